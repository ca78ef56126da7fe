"""Chapter 08 (tensor cores): fragment layouts, ldmatrix and its swizzle, mma.sync, the reference's ablation.

The chapter's own kernels are short: ``PROBE_SRC`` (one warp, one m16n8k16 MMA, every lane's registers
written out, so the layout pictures here are checked against the hardware) and ``SIMPLE_SRC`` (a first
complete mma.sync GEMM: ldmatrix from padded shared memory, one stage, no cp.async). Both fall back to
FP16 with two m16n8k8 MMAs below sm_80. The fast kernel is the graded exercise; its reference,
solutions/08_tensor_cores/mma_gemm.cu, is measured here feature by feature (the ablation) when the
solutions folder is present, and replayed from the benchmark suite's recording otherwise.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = [
    "SIZE", "PROBE_SRC", "SIMPLE_SRC", "PEAK_SRC", "fragment_map", "plot_fragment", "probe_layouts",
    "ldmatrix_access", "swizzle_table", "plot_swizzle", "round_bf16", "bf16_error_table",
    "mma_gemm_source", "mma_gemm_smem", "ABLATION", "measure_ablation", "show_ablation", "mma_peak",
    "simple_gemm", "input_dtype",
]

SIZE = 4096

_MMA_HELPERS = r'''
// ldmatrix: each of the 32 lanes names one 16-byte row of an 8 x 8 b16 matrix (x4: four matrices);
// lane 4g + t receives elements (g, 2t) and (g, 2t + 1) of each. .trans hands out the transpose.
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const void* p)
{
    unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm_x2_trans(unsigned (&r)[2], const void* p)
{
    unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a));
}
// D += A (16 x 16, row) * B (16 x 8, col). sm_80+: one bf16 m16n8k16. sm_75: fp16 in two m16n8k8
// halves of k (a0,a1 with b0, then a2,a3 with b1) - the same registers hold the same elements.
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
    asm("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[2]), "r"(a[3]), "r"(b[1]));
#endif
}
'''.strip("\n")

PROBE_SRC = _MMA_HELPERS + r'''

// One warp: A (16 x 16) and B (16 x 8, k x n), both row-major 16-bit, into shared memory; fragments
// by ldmatrix (B with .trans, since mma wants it k-major per lane); one MMA. Every lane writes what
// it holds: its 8 A halves, 4 B halves and 4 C floats, so the host can draw who holds what.
extern "C" __global__ void mma_probe(const unsigned short* A, const unsigned short* B,
                                     unsigned short* a_out, unsigned short* b_out, float* c_out)
{
    __shared__ __align__(16) unsigned short As[16 * 16];
    __shared__ __align__(16) unsigned short Bs[16 * 8];
    const int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) As[i] = A[i];
    for (int i = lane; i < 128; i += 32) Bs[i] = B[i];
    __syncwarp();
    unsigned a[4], b[2];
    ldsm_x4(a, &As[(lane & 15) * 16 + (lane >> 4) * 8]);   // lanes 0-15: k 0-7 of rows 0-15; 16-31: k 8-15
    ldsm_x2_trans(b, &Bs[(lane & 15) * 8]);                 // lanes 0-15: rows k = 0..15 (x2 uses 16 addresses)
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    mma16816(c, a, b);
    for (int r = 0; r < 4; ++r) {
        a_out[lane * 8 + 2 * r] = a[r] & 0xFFFF;
        a_out[lane * 8 + 2 * r + 1] = a[r] >> 16;
        c_out[lane * 4 + r] = c[r];
    }
    for (int r = 0; r < 2; ++r) {
        b_out[lane * 4 + 2 * r] = b[r] & 0xFFFF;
        b_out[lane * 4 + 2 * r + 1] = b[r] >> 16;
    }
}
'''

SIMPLE_SRC = _MMA_HELPERS + r'''

// A first whole GEMM on mma.sync: C (M x N, float) = A (M x K) @ B (K x N), 16-bit inputs, row-major,
// M, N multiples of 64 and K of 32. A block of 4 warps owns a 64 x 64 tile, each warp 32 x 32
// (2 m16 x 4 n8 MMAs per k16 step). Tiles reach shared memory through ordinary 16-byte loads; rows are
// padded by 8 elements so that the 8 row addresses of each ldmatrix phase fall on different banks.
#define BM 64
#define BN 64
#define BK 32
#define PAD 8
extern "C" __global__ void __launch_bounds__(128)
mma_simple(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B, float* __restrict__ C,
           int M, int N, int K)
{
    __shared__ __align__(16) unsigned short As[BM][BK + PAD];
    __shared__ __align__(16) unsigned short Bs[BK][BN + PAD];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
    float acc[2][4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = tid; i < BM * BK / 8; i += 128) {      // 16-byte pieces of the A tile
            const int r = i / (BK / 8), c = (i % (BK / 8)) * 8;
            *reinterpret_cast<uint4*>(&As[r][c]) = *reinterpret_cast<const uint4*>(A + (size_t)(m0 + r) * K + k0 + c);
        }
        for (int i = tid; i < BK * BN / 8; i += 128) {
            const int r = i / (BN / 8), c = (i % (BN / 8)) * 8;
            *reinterpret_cast<uint4*>(&Bs[r][c]) = *reinterpret_cast<const uint4*>(B + (size_t)(k0 + r) * N + n0 + c);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[2][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 2; ++i) ldsm_x4(a[i], &As[wm + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
#pragma unroll
            for (int j = 0; j < 4; ++j) ldsm_x2_trans(b[j], &Bs[kk + (lane & 15)][wn + j * 8]);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma16816(acc[i][j], a[i], b[j]);
        }
        __syncthreads();
    }
    const int g = lane >> 2, t = lane & 3;                  // C: lane 4g + t holds rows g, g + 8, cols 2t, 2t + 1
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float* out = C + (size_t)(m0 + wm + i * 16 + g + 8 * h) * N + n0 + wn + j * 8 + 2 * t;
                *reinterpret_cast<float2*>(out) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
}
'''

PEAK_SRC = r'''
// How fast can mma.sync go on this GPU with no memory at all? ACC independent accumulators per warp
// keep the tensor pipe fed; the operands never change. The result is kept live through `out`.
#ifndef ACC
#define ACC 16
#endif
extern "C" __global__ void mma_peak(float* out, int iters)
{
    unsigned a[4] = {threadIdx.x, threadIdx.x * 3u, threadIdx.x ^ 5u, 7u};
    unsigned b0 = threadIdx.x * 11u, b1 = 13u;
    float d[ACC][4] = {};
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < ACC; ++i)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < ACC; ++i) s += d[i][0] + d[i][1] + d[i][2] + d[i][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
'''.strip("\n")


# --- fragment layouts ------------------------------------------------------------------------------

def fragment_map(operand: str) -> np.ndarray:
    """Who holds what in mma.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16").

    Returns an int array shaped like the operand (A 16 x 16, B 16 x 8 as k x n, C 16 x 8) whose
    entries are ``lane * 8 + slot``: the lane, and the 16-bit half (A, B) or float (C) of its registers,
    counted as the probe kernel writes them out (A: 8 halves, B: 4 halves, C: 4 floats).
    """
    lanes = np.arange(32)
    g, t = lanes // 4, lanes % 4
    if operand == "A":
        out = np.full((16, 16), -1)
        for reg, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            for h in range(2):
                out[g + dr, 2 * t + h + dc] = lanes * 8 + 2 * reg + h
    elif operand == "B":
        out = np.full((16, 8), -1)
        for reg, dk in enumerate((0, 8)):
            for h in range(2):
                out[2 * t + h + dk, g] = lanes * 8 + 2 * reg + h
    elif operand == "C":
        out = np.full((16, 8), -1)
        for reg, (dr, h) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
            out[g + dr, 2 * t + h] = lanes * 8 + reg
    else:
        raise ValueError(f"`operand` should be 'A', 'B' or 'C'; got {operand!r}")
    return out


def plot_fragment(operand: str, ax=None, layout=None):
    """Draw an operand's elements colored by the lane that holds them, labelled lane.slot."""
    import matplotlib.pyplot as plt
    layout = fragment_map(operand) if layout is None else np.asarray(layout)
    rows, cols = layout.shape
    if ax is None:
        _fig, ax = plt.subplots(figsize=(cols * 0.55 + 1, rows * 0.38 + 1))
    ax.imshow(layout // 8, cmap="tab20", vmin=0, vmax=31, aspect="auto")
    for r in range(rows):
        for c in range(cols):
            ax.text(c, r, f"{layout[r, c] // 8}.{layout[r, c] % 8}", ha="center", va="center", fontsize=6)
    names = {"A": ("row m", "column k"), "B": ("row k", "column n"), "C": ("row m", "column n")}[operand]
    ax.set_ylabel(names[0])
    ax.set_xlabel(names[1])
    ax.set_title(f"m16n8k16 operand {operand}: lane.slot of each element")
    return ax


def input_dtype():
    """The 16-bit type the chapter's kernels take here: "bf16" from sm_80, "fp16" on sm_75."""
    import course
    return "bf16" if course.supports("bf16_mma") else "fp16"


def _to16(x, kind: str):
    import cupy
    from course.cublas import to_bf16
    return to_bf16(x) if kind == "bf16" else cupy.asarray(x, dtype=cupy.float16).view(cupy.uint16)


def probe_layouts() -> dict:
    """Run PROBE_SRC and read back, for A, B and C, which lane.slot holds each element.

    A and B are filled with their own element indices (exact in 16 bits); C is probed with A = the
    identity, so that C = B's 16 x 8 values, again element indices. Returns operand -> array shaped as
    in `fragment_map`, which it should equal.
    """
    import cupy
    import course
    kind = input_dtype()
    k = course.compile(PROBE_SRC).kernel("mma_probe")
    idx_a = cupy.arange(256, dtype=cupy.float32).reshape(16, 16)
    idx_b = cupy.arange(128, dtype=cupy.float32).reshape(16, 8)
    a_out = cupy.zeros(256, cupy.uint16)
    b_out = cupy.zeros(128, cupy.uint16)
    c_out = cupy.zeros(128, cupy.float32)
    k(1, 32, _to16(idx_a, kind), _to16(idx_b, kind), a_out, b_out, c_out)
    found = {}
    # a_out holds 8 halves per lane and b_out 4: entry i is lane i // per, slot i % per
    from course.gemm import values64
    for name, vals, shape, per in (("A", values64(a_out, kind), (16, 16), 8), ("B", values64(b_out, kind), (16, 8), 4)):
        lay = np.full(shape, -1)
        for i, v in enumerate(cupy.asnumpy(vals).astype(int)):
            lay.flat[v] = (i // per) * 8 + i % per
        found[name] = lay
    k(1, 32, _to16(cupy.eye(16, dtype=cupy.float32), kind), _to16(idx_b, kind), a_out, b_out, c_out)
    lay = np.full((16, 8), -1)
    for slot, v in enumerate(cupy.asnumpy(c_out).astype(int)):
        lay.flat[v] = (slot // 4) * 8 + slot % 4
    found["C"] = lay
    return found


# --- ldmatrix and the swizzle ---------------------------------------------------------------------

def ldmatrix_access(row_bytes: int, swizzle: bool, *, operand: str = "A", kstep: int = 0):
    """The bank picture of one ldmatrix.x4 of the reference kernel (course.lessons.ch05.bank_access).

    Each lane names a 16-byte row piece; a phase is 8 lanes (one 8 x 8 matrix). ``row_bytes`` is the
    shared tile's row: 64 for A with BK = 32, 256 for B with BN = 128. Swizzled, chunk c of row r is
    stored at c ^ ((r >> 1) & 3) (64-byte rows) or c ^ (r & 7) (rows of 128 bytes or more).
    """
    from course.lessons.ch05 import bank_access
    chunks = row_bytes // 16

    def phys(r, c):
        if not swizzle:
            return c
        return c ^ (((r >> 1) & 3) if row_bytes == 64 else (r & 7))

    def index(lane):
        if operand == "A":      # rows 0-15, chunk 2*kstep (+1 for lanes 16-31)
            r, c = lane & 15, 2 * kstep + (lane >> 4)
        else:                   # .trans: rows k = 0-15 of chunk pair (lanes 16-31: the next n8 tile)
            r, c = lane & 15, lane >> 4
        return r * chunks + phys(r, c)
    return bank_access(index, elem_bytes=16)


def swizzle_table() -> list:
    """Conflict degree of the reference's ldmatrix loads with and without the XOR swizzle."""
    rows = []
    for label, rb, op in (("A tile, BK = 32 (64-byte rows)", 64, "A"), ("B tile, BN = 128 (256-byte rows)", 256, "B")):
        for sw in (False, True):
            acc = ldmatrix_access(rb, sw, operand=op)
            rows.append({"tile": label, "swizzle": "XOR" if sw else "none", "degree": acc.degree,
                         "wavefronts": acc.wavefronts, "summary": acc.summary()})
    return rows


def plot_swizzle(row_bytes: int = 64, rows: int = 8, ax=None):
    """Where each logical 16-byte chunk of the first ``rows`` rows lands, and the bank group it hits."""
    import matplotlib.pyplot as plt
    chunks = row_bytes // 16
    if ax is None:
        _fig, ax = plt.subplots(figsize=(chunks * 0.9 + 1.5, rows * 0.4 + 1))
    grid = np.zeros((rows, chunks), int)
    for r in range(rows):
        for c in range(chunks):
            p = c ^ (((r >> 1) & 3) if row_bytes == 64 else (r & 7))
            grid[r, p] = c
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, aspect="auto")
    for r in range(rows):
        for p in range(chunks):
            group = (r * row_bytes // 16 + p) % 8
            ax.text(p, r, f"c{grid[r, p]}\nb{4 * group}-{4 * group + 3}", ha="center", va="center", fontsize=6)
    ax.set_xlabel("physical 16-byte slot in the row")
    ax.set_ylabel("row")
    ax.set_title(f"XOR swizzle of {row_bytes}-byte rows: logical chunk c, banks b (color = logical chunk)")
    return ax


# --- BF16 accuracy --------------------------------------------------------------------------------

def round_bf16(x) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even), returned as float32 (NumPy, no GPU)."""
    from course.cublas import from_bf16, to_bf16
    return from_bf16(to_bf16(np.asarray(x, np.float32)))


def bf16_error_table(ks=(64, 256, 1024, 4096), m: int = 64, n: int = 64, seed: int = 0) -> list:
    """Relative error of a BF16-input, FP32-accumulate product, measured two ways (NumPy only).

    Against the FP32 inputs' exact product, the error is the inputs' rounding (2^-9 relative each); it
    stays near 2^-9 of the largest output whatever K, since the rounding errors of K products partly
    cancel just as the outputs themselves grow. Against the rounded inputs' exact product only the FP32
    accumulation remains, thousands of times smaller. A test of a BF16 kernel must pick the
    reference it means and a tolerance to match.
    """
    rng = np.random.default_rng(seed)
    out = []
    for k in ks:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        ar, br = round_bf16(a), round_bf16(b)
        got = (ar @ br).astype(np.float32)           # what FP32 accumulation of the rounded inputs gives
        exact_rounded = ar.astype(np.float64) @ br.astype(np.float64)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(exact).max()
        out.append({"K": k, "vs FP32 inputs": float(np.abs(got - exact).max() / scale),
                    "vs rounded inputs": float(np.abs(got - exact_rounded).max() / scale)})
    return out


# --- the reference kernel and its ablation --------------------------------------------------------

_SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "08_tensor_cores" / "mma_gemm.cu"
_DEFAULTS = dict(BM=256, BN=128, BK=32, WARPS_M=4, WARPS_N=2, STAGES=4, SWIZZLE=1, SMEM_EPILOGUE=1, OUT_BF16=1,
                 GROUP_M=8, FRAG_DB=1)

ABLATION = [
    ("reference (everything on)", {}),
    ("fragments not double-buffered", {"FRAG_DB": 0}),
    ("blocks in row order (no grid swizzle)", {"GROUP_M": 1}),
    ("epilogue straight to global", {"SMEM_EPILOGUE": 0}),
    ("2 stages instead of 4", {"STAGES": 2}),
    ("3 stages", {"STAGES": 3}),
    ("128 x 256 tiles (2 x 4 warps)", {"BM": 128, "BN": 256, "WARPS_M": 2, "WARPS_N": 4}),
    ("no XOR swizzle", {"SWIZZLE": 0}),
]


def mma_gemm_source() -> str | None:
    """solutions/08_tensor_cores/mma_gemm.cu, or None where the solutions are not shipped."""
    return _SOLUTION.read_text() if _SOLUTION.exists() else None


def mma_gemm_smem(**cfg) -> int:
    """Dynamic shared bytes of mma_gemm for a configuration (pipeline, or the epilogue's staging tile)."""
    c = dict(_DEFAULTS, **cfg)
    pipe = c["STAGES"] * (c["BM"] + c["BN"]) * c["BK"] * 2
    return max(pipe, c["BM"] * (c["BN"] + 8) * 2 if c["SMEM_EPILOGUE"] else 0)


def _mma_kernel(cfg):
    import course
    c = dict(_DEFAULTS, **cfg)
    k = course.compile(mma_gemm_source(), options=[f"-D{a}={v}" for a, v in c.items()]).kernel("mma_gemm")

    def launch(a, b, out):
        m, kk = a.shape
        n = b.shape[1]
        grid = -(-m // c["BM"]) * -(-n // c["BN"])
        if c["OUT_BF16"]:   # the kernel's float* C_out is a bf16 buffer in this mode (see its signature)
            out = out.view("float32")   # n is a multiple of 8, so every row pairs up
        k(grid, 32 * c["WARPS_M"] * c["WARPS_N"], a, b, out, m, n, kk, shared_mem=mma_gemm_smem(**cfg))
    return launch


def measure_ablation(size: int = SIZE, budget_s: float = 1.0, check_shape=(777, 264, 520)) -> list:
    """Each ABLATION variant of the reference: checked at an odd shape, then timed against cuBLAS BF16.

    Returns rows of {variant, tflops, cublas_tflops, fraction}; raises course.CheckError for a wrong
    variant; [] (with a sentence) where the solutions folder or sm_80 is missing.
    """
    import course
    from course.cublas import gemm
    from course.gemm import check_gemm, gemm_flops, make_inputs
    if mma_gemm_source() is None or not course.supports("bf16_mma"):
        print("The ablation runs solutions/08_tensor_cores/mma_gemm.cu on sm_80 or newer; "
              "show_ablation() prints the recorded one.")
        return []
    a, b, c = make_inputs(size, size, size, "bf16", seed=5)
    flops = gemm_flops(size, size, size)
    base = course.benchmark(lambda: gemm(a, b, c, compute="bf16"), budget_s=budget_s).tflops(flops)
    rows = []
    for label, cfg in ABLATION:
        launch = _mma_kernel(cfg)
        m, n, k = check_shape
        sa, sb, sc = make_inputs(m, n, k, "bf16", seed=m)
        launch(sa, sb, sc)
        ok = check_gemm(sc, sa, sb, "bf16", name=f"mma_gemm ({label}) at {m}x{n}x{k}")
        if not ok:
            raise course.CheckError(ok.message)
        t = course.benchmark(lambda: launch(a, b, c), budget_s=budget_s, max_samples=30).tflops(flops)
        rows.append({"variant": label, "tflops": t, "cublas_tflops": base, "fraction": t / base})
    return rows


def show_ablation(rows=None) -> list:
    """Print the ablation: measured ``rows`` or, without them, the benchmark suite's recording."""
    import course
    where = "measured here"
    if not rows:
        from course.results import recorded_rows
        rec, gpu, _c = recorded_rows("08_tensor_cores")
        rows = [{"variant": r["name"].split(": ", 1)[1], "tflops": r["value"], "cublas_tflops": r["anchor_value"],
                 "fraction": r["ratio"]} for r in rec if r["name"].startswith("mma_gemm: ")]
        where = f"recorded on {gpu} by the benchmark suite"
        if not rows:
            print("No recorded ablation yet: `python -m benchmarks --only 08_tensor_cores` on a GPU records it.")
            return []
    print(f"mma_gemm at {SIZE}^3 (BF16 in, FP32 accumulate, BF16 out), {where}")
    course.print_table([{"variant": r["variant"], "TFLOP/s": f"{r['tflops']:.0f}",
                         "% of cuBLAS BF16": f"{100 * r['fraction']:.1f}"} for r in rows])
    return rows


def mma_peak(acc: int = 16, iters: int = 4096, budget_s: float = 0.5) -> float:
    """TFLOP/s of PEAK_SRC: mma.sync m16n8k16 with no memory traffic, 8 warps on every SM."""
    import cupy
    import course
    k = course.compile(PEAK_SRC, options=[f"-DACC={acc}"]).kernel("mma_peak")
    blocks, threads = course.device_info().sm_count, 256
    out = cupy.empty(blocks * threads, cupy.float32)
    r = course.benchmark(lambda: k(blocks, threads, out, iters), budget_s=budget_s, max_samples=20)
    return r.tflops(blocks * (threads // 32) * iters * acc * 2 * 16 * 8 * 16)


def simple_gemm():
    """SIMPLE_SRC compiled here, as ``f(a, b, c)`` for 16-bit a, b (uint16 bits) and float32 c."""
    import course
    k = course.compile(SIMPLE_SRC).kernel("mma_simple")

    def launch(a, b, c):
        m, kk = a.shape
        n = b.shape[1]
        if m % 64 or n % 64 or kk % 32:
            raise ValueError(f"mma_simple needs M, N multiples of 64 and K of 32; got {m} x {n} x {kk}")
        k((n // 64, m // 64), 128, a, b, c, m, n, kk)
    return launch
