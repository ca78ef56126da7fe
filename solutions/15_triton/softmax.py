# softmax: y[r][c] = exp(x[r][c] - m) / sum_j exp(x[r][j] - m), m the largest x[r][j], for every row r of a
# row-major rows x cols float32 matrix, in Triton: one program per row (grid = rows).
import triton
import triton.language as tl

LAUNCH = {"BLOCK": 2048, "num_warps": 8}


@triton.jit
def softmax(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
    # ### BEGIN SOLUTION
    # int64 row offsets: rows x cols passes 2^31 elements long before the grid runs out of rows
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * cols
    y_row = y_ptr + row * cols
    offs = tl.arange(0, BLOCK)
    if cols <= BLOCK:
        # the whole row in registers: read once, written once (8 bytes an element, the least there is)
        mask = offs < cols
        x = tl.load(x_row + offs, mask=mask, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_row + offs, e / tl.sum(e, axis=0), mask=mask)
    else:
        # a longer row: each lane keeps a running (max, sum) pair over the BLOCK-wide chunks (the online
        # softmax), the lanes' pairs are merged once, then a second pass writes the output
        m = tl.full([BLOCK], -float("inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            x = tl.load(x_row + start + offs, mask=mask, other=-float("inf"))
            m_new = tl.maximum(m, x)
            # a lane that has seen only padding has m_new = -inf, where exp(-inf - -inf) would be NaN
            seen = m_new > -float("inf")
            s = s * tl.where(seen, tl.exp(m - m_new), 0.0) + tl.where(seen, tl.exp(x - m_new), 0.0)
            m = m_new
        top = tl.max(m, axis=0)
        total = tl.sum(tl.where(m > -float("inf"), s * tl.exp(m - top), 0.0), axis=0)
        for start in range(0, cols, BLOCK):
            mask = start + offs < cols
            x = tl.load(x_row + start + offs, mask=mask, other=-float("inf"))
            tl.store(y_row + start + offs, tl.exp(x - top) / total, mask=mask)
    # ### END SOLUTION
