"""Chapter 07 (staged GEMM): the lesson's kernels, the staged table, the tile sweep and their checks.

C = A @ B with A (M x K), B (K x N) and C (M x N) row-major. The stages, in the order the chapter builds
them: 1 naive, 2 coalesced, 3 shared-memory tiles, 4 register tiles in 1D, 5 in 2D, 6 vectorized and
double-buffered (FP32, against cuBLAS SGEMM); 7 WMMA on BF16 with shared-memory tiles, 8 the same fed by
cp.async, double then multi-stage (against cuBLAS's BF16 GEMM). Stages 3 and 6 are the chapter's graded
exercises: their kernels are read from solutions/07_staged_gemm/ when the folder is there, and the
table shows the benchmark suite's recorded numbers for them otherwise. The kernel sources below are the
text of the notebook's ``%%cuda`` cells (a test keeps them equal). Nothing here touches CUDA at import.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..gemm import check_gemm, gemm_flops, make_inputs


__all__ = [
    "SIZE", "NAIVE_SRC", "COALESCED_SRC", "REG1D_SRC", "REG2D_SRC", "WMMA_SRC", "Stage", "STAGES",
    "solution_source", "stage_intensity", "Lesson",
    "measure_stages", "show_stages", "plot_stages", "roofline_points", "tile_config", "tile_sweep",
]

SIZE = 4096          # M = N = K of the staged table

NAIVE_SRC = r'''
// Stage 1: one thread per output, threadIdx.x walking down a column of C. Neighbouring lanes read
// A from different rows (32 cache lines per warp load) and write C 4 * N bytes apart.
extern "C" __global__ void gemm_naive(const float* A, const float* B, float* C, int M, int N, int K)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
'''.strip("\n")

COALESCED_SRC = r'''
// Stage 2: the same arithmetic with threadIdx.x walking along a row of C: a warp reads one A value
// (a broadcast) and 32 consecutive B values per k, and writes 128 contiguous bytes of C.
extern "C" __global__ void gemm_coalesced(const float* A, const float* B, float* C, int M, int N, int K)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[(size_t)row * N + col] = acc;
}
'''.strip("\n")

REG1D_SRC = r'''
// Stage 4: each thread computes TM = 8 outputs of one column. One B value from shared memory feeds
// 8 FMAs, so shared-memory traffic per FMA drops 8x against the one-output tile.
#define BM 64
#define BN 64
#define BK 8
#define TM 8
extern "C" __global__ void __launch_bounds__(BM * BN / TM)
gemm_reg1d(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;                 // 512 threads
    const int tcol = tid % BN, trow = tid / BN;  // trow 0..7 owns rows trow*TM .. trow*TM + 7
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int a_r = tid / BK, a_k = tid % BK;    // 64 x 8 tile: one element each
    const int b_k = tid / BN, b_c = tid % BN;    //  8 x 64 tile: one element each
    float acc[TM] = {0.0f};
    for (int k0 = 0; k0 < K; k0 += BK) {
        As[a_r][a_k] = (m0 + a_r < M && k0 + a_k < K) ? A[(size_t)(m0 + a_r) * K + k0 + a_k] : 0.0f;
        Bs[b_k][b_c] = (k0 + b_k < K && n0 + b_c < N) ? B[(size_t)(k0 + b_k) * N + n0 + b_c] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float b = Bs[k][tcol];
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i] = fmaf(As[trow * TM + i][k], b, acc[i]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int r = m0 + trow * TM + i, c = n0 + tcol;
        if (r < M && c < N) C[(size_t)r * N + c] = acc[i];
    }
}
'''.strip("\n")

REG2D_SRC = r'''
// Stage 5: each thread computes a TM x TN block of outputs from TM values of A and TN of B per k:
// TM * TN FMAs for TM + TN shared loads. BM, BN, BK, TM, TN are compile-time (-D) so the sweep can
// try other shapes; the block has (BM / TM) * (BN / TN) threads.
#ifndef BM
#define BM 128
#endif
#ifndef BN
#define BN 128
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 8
#endif
#ifndef TN
#define TN 8
#endif
#define THREADS ((BM / TM) * (BN / TN))
static_assert(BM % TM == 0 && BN % TN == 0, "the tile must split into whole thread blocks");
static_assert((BM * BK) % THREADS == 0 && (BK * BN) % THREADS == 0, "tile loads must split evenly");

extern "C" __global__ void __launch_bounds__(THREADS)
gemm_reg2d(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N, int K)
{
    __shared__ float As[BK][BM];   // k-major: a thread's TM values at one k are contiguous
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    float acc[TM][TN] = {{0.0f}};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
#pragma unroll
        for (int i = tid; i < BM * BK; i += THREADS) {       // coalesced along k, transposed on store
            const int r = i / BK, k = i % BK;
            As[k][r] = (m0 + r < M && k0 + k < K) ? A[(size_t)(m0 + r) * K + k0 + k] : 0.0f;
        }
#pragma unroll
        for (int i = tid; i < BK * BN; i += THREADS) {
            const int k = i / BN, c = i % BN;
            Bs[k][c] = (k0 + k < K && n0 + c < N) ? B[(size_t)(k0 + k) * N + n0 + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][trow * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tcol * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int r = m0 + trow * TM + i, c = n0 + tcol * TN + j;
            if (r < M && c < N) C[(size_t)r * N + c] = acc[i][j];
        }
}
'''.strip("\n")

WMMA_SRC = r'''
// Stages 7-8: BF16 tensor cores through WMMA. A 128 x 128 tile per block of 8 warps (2 x 4), each warp
// a 64 x 32 piece as 4 x 2 fragments of 16 x 16 with FP32 accumulators. STAGES = 1 loads each BK = 32
// slice with ordinary loads and waits for it; STAGES = 2 (double buffering) and more stream the next
// slices with cp.async while the tensor cores work on the current one.
// Contract: any M; N and K multiples of 8. Output C is bf16, like cuBLAS's BF16 GEMM.
#include <mma.h>
#include <cuda_bf16.h>
using namespace nvcuda;
#ifndef STAGES
#define STAGES 2
#endif
#define BM 128
#define BN 128
#define BK 32
#define A_LD (BK + 8)      // padded rows: 80 bytes, so the 16-byte row pieces spread over the banks
#define B_LD (BN + 8)
#define THREADS 256
typedef __nv_bfloat16 bf16;

__device__ __forceinline__ void copy16(bf16* dst, const bf16* src, bool valid)
{
#if STAGES > 1
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(d), "l"(src), "r"(valid ? 16 : 0));
#else
    *reinterpret_cast<uint4*>(dst) = valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}

extern "C" __global__ void __launch_bounds__(THREADS)
gemm_wmma(const bf16* __restrict__ A, const bf16* __restrict__ B, bf16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(128) unsigned char smem[];
    bf16* As = reinterpret_cast<bf16*>(smem);
    bf16* Bs = As + STAGES * BM * A_LD;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;

    auto load = [&](int s, int k0) {
        bf16* as = As + s * BM * A_LD;
        bf16* bs = Bs + s * BK * B_LD;
#pragma unroll
        for (int i = 0; i < 2; ++i) {            // A: 128 rows x 4 pieces of 8
            const int id = tid + i * THREADS, r = id / 4, c = (id % 4) * 8;
            const bool ok = m0 + r < M && k0 + c < K;
            copy16(as + r * A_LD + c, ok ? A + (size_t)(m0 + r) * K + k0 + c : A, ok);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {            // B: 32 rows x 16 pieces of 8
            const int id = tid + i * THREADS, k = id / 16, c = (id % 16) * 8;
            const bool ok = k0 + k < K && n0 + c < N;
            copy16(bs + k * B_LD + c, ok ? B + (size_t)(k0 + k) * N + n0 + c : B, ok);
        }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int k_tiles = (K + BK - 1) / BK;
#if STAGES > 1
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < k_tiles) load(s, s * BK);
        asm volatile("cp.async.commit_group;\n" ::);
    }
#endif
    for (int kt = 0; kt < k_tiles; ++kt) {
#if STAGES > 1
        asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
        __syncthreads();
        if (kt + STAGES - 1 < k_tiles) load((kt + STAGES - 1) % STAGES, (kt + STAGES - 1) * BK);
        asm volatile("cp.async.commit_group;\n" ::);
        const int s = kt % STAGES;
#else
        __syncthreads();                          // everyone is done with the previous slice
        load(0, kt * BK);
        __syncthreads();
        const int s = 0;
#endif
        const bf16* as = As + s * BM * A_LD;
        const bf16* bs = Bs + s * BK * B_LD;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b[2];
#pragma unroll
            for (int i = 0; i < 4; ++i) wmma::load_matrix_sync(a[i], as + (wm + i * 16) * A_LD + kk, A_LD);
#pragma unroll
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], bs + kk * B_LD + wn + j * 16, B_LD);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
    }

    // epilogue: each warp parks one 16 x 16 float fragment at a time in its own scratch, then writes
    // it as bf16 with bounds checks (edge tiles may be partial)
#if STAGES > 1
    asm volatile("cp.async.wait_group 0;\n" ::);
#endif
    __syncthreads();
    float* scratch = reinterpret_cast<float*>(smem) + warp * 16 * 16;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                const int r = m0 + wm + i * 16 + e / 16, c = n0 + wn + j * 16 + e % 16;
                if (r < M && c < N) C[(size_t)r * N + c] = __float2bfloat16_rn(scratch[e]);
            }
            __syncwarp();
        }
}
'''.strip("\n")


SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions" / "07_staged_gemm"


def solution_source(name: str) -> str | None:
    """Text of solutions/07_staged_gemm/<name>.cu, or None where the solutions are not shipped."""
    p = SOLUTIONS / f"{name}.cu"
    return p.read_text() if p.exists() else None


def _cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def _wmma_smem(stages: int) -> int:
    # A tiles 128 x 40 and B tiles 32 x 136 bf16 per stage; the epilogue scratch (8 warps x 1 KiB) fits
    return max(stages * (128 * 40 + 32 * 136) * 2, 8 * 256 * 4)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One row of the staged table: where its kernel comes from and how it is launched."""

    number: str
    key: str
    title: str
    precision: str                 # "fp32" or "bf16": the cuBLAS it is compared with
    kernel: str
    source: str                    # a name of this module (…_SRC) or "solution:<file>"
    options: tuple = ()
    block_tile: tuple = (1, 1)     # (BM, BN): the C tile of one block (grid and intensity model)
    block: object = 256            # threads per block (an int, or (x, y))
    smem: int = 0                  # dynamic shared bytes

    def text(self) -> str | None:
        if self.source.startswith("solution:"):
            return solution_source(self.source.split(":", 1)[1])
        return globals()[self.source]

    def launch(self, m: int, n: int, k: int) -> tuple:
        """(grid, block, dynamic shared bytes) for an m x n x k product."""
        bm, bn = self.block_tile
        if self.key == "naive":        # the one stage whose x runs down the rows of C
            return (_cdiv(m, bm), _cdiv(n, bn)), self.block, self.smem
        return (_cdiv(n, bn), _cdiv(m, bm)), self.block, self.smem


STAGES = [
    Stage("1", "naive", "naive: one output per thread, x down a column", "fp32", "gemm_naive", "NAIVE_SRC",
          block_tile=(32, 8), block=(32, 8)),
    Stage("2", "coalesced", "coalesced: x along a row", "fp32", "gemm_coalesced", "COALESCED_SRC",
          block_tile=(8, 32), block=(32, 8)),
    Stage("3", "tiled", "shared-memory tiles 32 x 32", "fp32", "sgemm_tiled", "solution:sgemm_tiled",
          block_tile=(32, 32), block=(32, 32)),
    Stage("4", "reg1d", "register tiles 1D (8 outputs/thread)", "fp32", "gemm_reg1d", "REG1D_SRC",
          block_tile=(64, 64), block=512),
    Stage("5", "reg2d", "register tiles 2D (8 x 8 outputs/thread)", "fp32", "gemm_reg2d", "REG2D_SRC",
          block_tile=(128, 128)),
    Stage("6", "vector", "float4 loads, transposed A, double buffer", "fp32", "sgemm_regtile",
          "solution:sgemm_regtile", block_tile=(128, 128)),
    Stage("7", "wmma", "WMMA BF16, shared-memory tiles", "bf16", "gemm_wmma", "WMMA_SRC", ("-DSTAGES=1",),
          block_tile=(128, 128), smem=_wmma_smem(1)),
    Stage("8a", "wmma_db", "WMMA + cp.async double buffer", "bf16", "gemm_wmma", "WMMA_SRC", ("-DSTAGES=2",),
          block_tile=(128, 128), smem=_wmma_smem(2)),
    Stage("8b", "wmma_ms", "WMMA + cp.async 4 stages", "bf16", "gemm_wmma", "WMMA_SRC", ("-DSTAGES=4",),
          block_tile=(128, 128), smem=_wmma_smem(4)),
]


def stage_intensity(stage: Stage, m: int = SIZE, n: int = SIZE, k: int = SIZE) -> float:
    """FLOP per byte the stage's blocks request from global memory (what L2/DRAM must serve).

    A block computing a BM x BN tile reads BM x K of A and K x BN of B: 2 BM BN K FLOPs for
    (BM + BN) K elements. For the two one-output-per-thread stages the block is the warp's footprint
    and nothing is shared through shared memory, so they sit at 2 FLOPs per 2 loads whatever the caches
    catch; every other stage's intensity grows with its tile, which is the point of tiling.
    """
    elem = 2 if stage.precision == "bf16" else 4
    if stage.key in ("naive", "coalesced"):
        return 2 / (2 * elem)
    bm, bn = stage.block_tile
    return 2 * bm * bn / ((bm + bn) * elem)


class Lesson:
    """Every stage whose source is here, compiled once for this GPU; ``run(key, a, b, c)`` launches one.

    Stages needing what this GPU lacks (BF16 tensor cores before sm_80) or solutions that are not
    shipped are left out, with the reason in ``skipped``.
    """

    def __init__(self, keys=None):
        import course
        self.kernels, self.skipped = {}, {}
        bf16_ok = course.supports("bf16_mma")
        for st in STAGES:
            if keys is not None and st.key not in keys:
                continue
            text = st.text()
            if text is None:
                self.skipped[st.key] = "solutions/07_staged_gemm is not here (its graded exercise)"
            elif st.precision == "bf16" and not bf16_ok:
                self.skipped[st.key] = "BF16 tensor cores and cp.async need sm_80 or newer"
            else:
                self.kernels[st.key] = (st, course.compile(text, options=st.options).kernel(st.kernel))

    def run(self, key: str, a, b, c):
        if key not in self.kernels:
            why = self.skipped.get(key) or ("it was not asked for (Lesson(keys=...))" if key in {s.key for s in STAGES}
                                            else f"there is no such stage; the stages are {', '.join(s.key for s in STAGES)}")
            raise KeyError(f"stage {key!r} cannot run here: {why}")
        st, kern = self.kernels[key]
        m, k = a.shape
        n = b.shape[1]
        grid, block, smem = st.launch(m, n, k)
        kern(grid, block, a, b, c, m, n, k, shared_mem=smem)


def measure_stages(size: int = SIZE, check_sizes=((129, 136, 40), (1000, 1032, 520)), keys=None,
                   budget_s: float = 1.0, progress: bool = True) -> list:
    """Check every stage at sizes that are not tile multiples, then time it at size^3 with cuBLAS.

    Returns
    -------
    list of dict
        stage, title, precision, TFLOP/s, cuBLAS TFLOP/s (same precision, same run), fraction, ms,
        intensity; a stage that is wrong raises `course.CheckError` before anything is timed.
    """
    import course
    from course.cublas import gemm
    lesson = Lesson(keys)
    for key, (st, _k) in lesson.kernels.items():
        for (m, n, k) in check_sizes:
            a, b, c = make_inputs(m, n, k, st.precision, seed=m + n + k)
            lesson.run(key, a, b, c)
            res = check_gemm(c, a, b, st.precision, name=f"stage {st.number} ({key}) at {m}x{n}x{k}")
            if not res:
                raise course.CheckError(res.message)
    flops = gemm_flops(size, size, size)
    inputs = {p: make_inputs(size, size, size, p, seed=1) for p in ("fp32", "bf16")}
    base = {}
    for p, comp in (("fp32", "fp32"), ("bf16", "bf16")):
        a, b, c = inputs[p]
        if p == "bf16" and not course.supports("bf16_mma"):
            continue
        base[p] = course.benchmark(lambda: gemm(a, b, c, compute=comp), budget_s=budget_s).tflops(flops)
    items = list(lesson.kernels.items())
    if progress:
        try:
            from tqdm.auto import tqdm
            items = tqdm(items, desc="timing stages", leave=False)
        except ImportError:
            pass
    rows = []
    for key, (st, _k) in items:
        a, b, c = inputs[st.precision]
        r = course.benchmark(lambda: lesson.run(key, a, b, c), budget_s=budget_s, max_samples=30)
        t = r.tflops(flops)
        rows.append({"stage": st.number, "key": key, "title": st.title, "precision": st.precision,
                     "tflops": t, "cublas_tflops": base[st.precision], "fraction": t / base[st.precision],
                     "ms": r.median_ms, "intensity": stage_intensity(st, size, size, size)})
    return rows


def _recorded_stage_rows() -> tuple:
    """The benchmark suite's stage rows as measure_stages() rows, and the GPU they were recorded on."""
    from course.results import recorded_rows
    rows, gpu, _ceil = recorded_rows("07_staged_gemm")
    out = []
    for r in rows:       # the suite names them "stage <number>: <title>"
        st = next((s for s in STAGES if r["name"].startswith(f"stage {s.number}:")), None)
        if st is None or r.get("anchor_value") is None:
            continue
        out.append({"stage": st.number, "key": st.key, "title": st.title, "precision": st.precision,
                    "tflops": r["value"], "cublas_tflops": r["anchor_value"], "fraction": r["ratio"],
                    "ms": None, "intensity": stage_intensity(st)})
    return out, gpu


def show_stages(rows=None) -> list:
    """Print the staged table: measured here (``rows`` from measure_stages) or, without a GPU, recorded."""
    import course
    where = "measured on this GPU"
    if rows is None:
        rows, gpu = _recorded_stage_rows()
        where = f"recorded on {gpu} by the benchmark suite" if rows else ""
        if not rows:
            print("No recorded staged table yet: `python -m benchmarks --only 07_staged_gemm` on a GPU records it.")
            return []
    print(f"C = A @ B at {SIZE}^3, {where}; each stage against cuBLAS of its own precision")
    course.print_table([{"stage": r["stage"], "kernel": r["title"], "in": r["precision"],
                         "TFLOP/s": f"{r['tflops']:.1f}", "% of cuBLAS": f"{100 * r['fraction']:.1f}",
                         "cuBLAS": f"{r['cublas_tflops']:.0f}", "FLOP/B (tile)": f"{r['intensity']:.1f}"}
                        for r in rows])
    if where == "measured on this GPU":
        # the graded stages are left out where solutions/ is not shipped: name them, with the recording if any
        have = {r["key"] for r in rows}
        missing = [st for st in STAGES if st.key not in have and st.source.startswith("solution:")]
        recorded, gpu = _recorded_stage_rows() if missing else ([], None)
        recorded = {r["key"]: r for r in recorded}
        for st in missing:
            r = recorded.get(st.key)
            print(f"stage {st.number} ({st.key}) is a graded exercise whose reference is not here"
                  + (f"; recorded on {gpu}: {r['tflops']:.1f} TFLOP/s, {100 * r['fraction']:.1f}% of cuBLAS"
                     if r else ""))
    return rows


def plot_stages(rows, ax=None):
    """Bars of each stage's % of cuBLAS (FP32 stages vs SGEMM, BF16 stages vs cuBLAS BF16)."""
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(9, 3.8))
    labels = [f"{r['stage']} {r['key']}" for r in rows]
    pct = [100 * r["fraction"] for r in rows]
    colors = ["tab:blue" if r["precision"] == "fp32" else "tab:orange" for r in rows]
    bars = ax.bar(labels, pct, color=colors)
    for bar, r in zip(bars, rows):
        ax.annotate(f"{r['tflops']:.0f}", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.axhline(100, color="gray", lw=1, ls="--")
    ax.set_ylabel("% of cuBLAS (same precision)")
    ax.set_title("Staged GEMM: bar = % of cuBLAS, label = TFLOP/s (blue FP32 vs SGEMM, orange BF16)")
    ax.tick_params(axis="x", rotation=30)
    return ax


def roofline_points(rows) -> list:
    """(label, FLOP/B, TFLOP/s) for course.plots.roofline: each stage at its tile's intensity."""
    return [(f"{r['stage']} {r['key']}", r["intensity"], r["tflops"]) for r in rows]


# --- the tile sweep of stage 5 ------------------------------------------------------------------

SWEEP_SIZE = 2048
SWEEP_PARAMS = {"BM": [32, 64, 128, 256], "BN": [64, 128, 256], "BK": [8, 16], "TM": [4, 8], "TN": [4, 8]}


def tile_config(BM: int, BN: int, BK: int, TM: int, TN: int) -> dict:
    """What a REG2D_SRC tile shape costs before it runs: threads, shared bytes, and why it is invalid.

    Returns a dict with ``threads``, ``smem`` and ``problem`` (None when the shape can run). The checks
    are the kernel's own static_asserts and the launch limits, explained in words.
    """
    threads = (BM // TM) * (BN // TN) if BM % TM == 0 and BN % TN == 0 else 0
    smem = (BM + BN) * BK * 4
    problem = None
    if BM % TM or BN % TN:
        problem = f"{BM} x {BN} does not split into {TM} x {TN} thread tiles"
    elif threads > 1024:
        problem = f"{threads} threads per block; the limit is 1024 (use bigger TM/TN or a smaller tile)"
    elif threads < 32:
        problem = f"{threads} threads per block: less than one warp, most of the SM would idle"
    elif (BM * BK) % threads or (BK * BN) % threads:
        problem = (f"the {BM} x {BK} and {BK} x {BN} tiles do not split evenly over {threads} threads "
                   "(the loader's static_assert)")
    elif smem > 48 * 1024:
        problem = f"{smem} bytes of static shared memory; the static limit is 48 KiB"
    return {"threads": threads, "smem": smem, "problem": problem}


def tile_sweep(record: bool | None = None):
    """Sweep REG2D_SRC's BM, BN, BK, TM, TN at 2048^3: TFLOP/s, with registers, shared memory and
    occupancy in each point's note; invalid shapes are explained, not crashed.

    Recorded as benchmarks/results/sweeps/07_staged_gemm_tiles.json for machines without a GPU.
    """
    import course
    from course.widgets import sweep
    state = {}

    def run(BM, BN, BK, TM, TN):
        cfg = tile_config(BM, BN, BK, TM, TN)
        if cfg["problem"]:
            raise ValueError(cfg["problem"])
        if "in" not in state:
            state["in"] = make_inputs(SWEEP_SIZE, SWEEP_SIZE, SWEEP_SIZE, "fp32", seed=3)
        a, b, c = state["in"]
        kern = course.compile(REG2D_SRC, options=[f"-D{k}={v}" for k, v in
                                                  dict(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN).items()]).kernel("gemm_reg2d")
        res = kern.resources
        grid = (_cdiv(SWEEP_SIZE, BN), _cdiv(SWEEP_SIZE, BM))
        c.fill(float("nan"))   # the previous point's C is right too: poison it, or a shape that skips outputs passes
        kern(grid, cfg["threads"], a, b, c, SWEEP_SIZE, SWEEP_SIZE, SWEEP_SIZE)
        ok = check_gemm(c, a, b, "fp32", name=f"{BM}x{BN}x{BK}/{TM}x{TN}")
        if not ok:
            raise course.CheckError(ok.message)
        t = course.benchmark(lambda: kern(grid, cfg["threads"], a, b, c, SWEEP_SIZE, SWEEP_SIZE, SWEEP_SIZE),
                             budget_s=0.3, max_samples=15).tflops(gemm_flops(SWEEP_SIZE, SWEEP_SIZE, SWEEP_SIZE))
        blocks = kern.occupancy(cfg["threads"])
        note = (f"{res.registers} regs/thread, {cfg['smem']} B shared, {blocks} block(s) = "
                f"{blocks * cfg['threads'] // 32} warps per SM" + (f", {res.spill_stores} B spilled" if res.spill_stores else ""))
        return t, note

    return sweep(run, SWEEP_PARAMS, metric="TFLOP/s", x="BM", name="07_staged_gemm_tiles",
                 title=f"gemm_reg2d at {SWEEP_SIZE}^3 (FP32)", record=record)
