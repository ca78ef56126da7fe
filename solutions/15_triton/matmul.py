# matmul: C = A B for row-major A (m x k) and B (k x n) in BF16, accumulated and stored in float32, in Triton:
# one program per BLOCK_M x BLOCK_N tile of C, programs ordered in groups of GROUP_M tile rows (grid = tiles).
import triton
import triton.language as tl

LAUNCH = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, m, n, k, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           GROUP_M: tl.constexpr):
    # ### BEGIN SOLUTION
    # Consecutive programs take GROUP_M tile rows of one column band before moving right, so the A rows and
    # the B columns a wave of programs reads stay in L2 together.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(m, BLOCK_M)
    tiles_n = tl.cdiv(n, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_here = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_here
    pid_n = (pid % per_group) // rows_here
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None].to(tl.int64) * k + rk[None, :]
    b = b_ptr + rk[:, None].to(tl.int64) * n + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, k, BLOCK_K):
        # masked loads fill the edges with zeros, which add nothing to the dot products
        a_tile = tl.load(a, mask=(rm[:, None] < m) & (k0 + rk[None, :] < k), other=0.0)
        b_tile = tl.load(b, mask=(k0 + rk[:, None] < k) & (rn[None, :] < n), other=0.0)
        acc = tl.dot(a_tile, b_tile, acc)
        a += BLOCK_K
        b += BLOCK_K * n
    c = c_ptr + rm[:, None].to(tl.int64) * n + rn[None, :]
    tl.store(c, acc, mask=(rm[:, None] < m) & (rn[None, :] < n))
    # ### END SOLUTION
