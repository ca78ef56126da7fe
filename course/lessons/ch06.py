"""Chapter 06 (building blocks): map, reduce, scan and histogram, each measured against CuPy.

Reduction variants are numbered 1..6 and described in one header line each (`REDUCE_VARIANTS`);
`reduction_table` checks every variant before it times any, llm.c style. The CPU helpers count
active lanes and warps of the reduction trees and draw the steps of a scan.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from .ch04 import _kernel

__all__ = [
    "VEC_ADD4_SRC", "REDUCE_SHARED_SRC", "REDUCE_SHUFFLE_SRC", "Variant", "REDUCE_VARIANTS", "header_lines",
    "exact_inputs", "active_lanes", "plot_active_lanes", "run_reduction", "check_reduction",
    "reduction_table", "reduce_runner", "reduce_sweep", "SCAN_BLOCK_SRC", "SCAN_FULL_SRC", "hillis_steele_steps",
    "plot_scan_steps", "scan_full", "scan_table", "HIST_SRC", "hist_inputs", "histogram_table", "hist_runner",
    "hist_sweep", "solution_source", "reduction_grid",
]

# --- vector add: the map ---------------------------------------------------------------------

VEC_ADD4_SRC = r'''// z = x + y with float4 loads and a grid sized to the GPU; n need not be a multiple of 4.
extern "C" __global__ void vec_add4(const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ z, int n)
{
    const int stride = gridDim.x * blockDim.x;
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    const int n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);   // CuPy arrays start 256-byte aligned
    const float4* y4 = reinterpret_cast<const float4*>(y);
    float4* z4 = reinterpret_cast<float4*>(z);
    for (int i = tid; i < n4; i += stride) {
        const float4 a = x4[i], b = y4[i];
        z4[i] = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    }
    for (int i = 4 * n4 + tid; i < n; i += stride)   // the last n % 4 elements
        z[i] = x[i] + y[i];
}
'''

# --- reduction variants ----------------------------------------------------------------------

REDUCE_SHARED_SRC = r'''// Variants 1-3: a tree in shared memory, then one atomicAdd per block into *out (zero it first).
// Launch with blockDim.x a power of two and blockDim.x * 4 bytes of dynamic shared memory.

// 1: interleaved addressing. At step s the threads with tid % (2s) == 0 add: they are spread over
//    every warp, so all warps keep issuing while most of their lanes idle, and the lanes that work
//    read shared memory 2s words apart (bank conflicts).
extern "C" __global__ void reduce1_interleaved(const float* __restrict__ x, float* out, int n)
{
    extern __shared__ float s[];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + tid;
    s[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (int step = 1; step < blockDim.x; step *= 2) {
        if (tid % (2 * step) == 0)
            s[tid] += s[tid + step];
        __syncthreads();
    }
    if (tid == 0)
        atomicAdd(out, s[0]);
}

// 2: sequential addressing. The threads that add are 0..step-1: whole warps retire as the tree
//    narrows, and neighbouring lanes read neighbouring words.
extern "C" __global__ void reduce2_sequential(const float* __restrict__ x, float* out, int n)
{
    extern __shared__ float s[];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + tid;
    s[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (tid < step)
            s[tid] += s[tid + step];
        __syncthreads();
    }
    if (tid == 0)
        atomicAdd(out, s[0]);
}

// 3: first add during the load. Each thread adds two elements a block apart before the tree:
//    half as many blocks, and no thread idles at the first step.
extern "C" __global__ void reduce3_first_add(const float* __restrict__ x, float* out, int n)
{
    extern __shared__ float s[];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * (2 * blockDim.x) + tid;
    float v = (i < n) ? x[i] : 0.0f;
    if (i + blockDim.x < n)
        v += x[i + blockDim.x];
    s[tid] = v;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step >>= 1) {
        if (tid < step)
            s[tid] += s[tid + step];
        __syncthreads();
    }
    if (tid == 0)
        atomicAdd(out, s[0]);
}
'''

REDUCE_SHUFFLE_SRC = r'''// Variants 4-6: warp shuffles instead of a shared-memory tree. blockDim.x a multiple of 32.

__device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    return v;                                   // lane 0 holds the warp's total
}

// The block's total, valid in thread 0. The leading barrier lets one kernel call it twice.
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float warp_totals[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();
    v = warp_sum(v);
    if (lane == 0)
        warp_totals[warp] = v;
    __syncthreads();
    if (warp == 0)
        v = warp_sum(lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f);
    return v;
}

// A grid-stride sum with float4 loads, four independent loads in flight per thread.
__device__ __forceinline__ float thread_sum(const float* __restrict__ x, int n)
{
    const int stride = gridDim.x * blockDim.x;
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    float a = 0.0f, b = 0.0f, c = 0.0f, d = 0.0f;
    if ((reinterpret_cast<unsigned long long>(x) & 15) == 0) {
        const float4* x4 = reinterpret_cast<const float4*>(x);
        const int n4 = n / 4;
        int i = tid;
        for (; i + 3 * stride < n4; i += 4 * stride) {
            const float4 p = x4[i], q = x4[i + stride], r = x4[i + 2 * stride], s = x4[i + 3 * stride];
            a += (p.x + p.y) + (p.z + p.w);
            b += (q.x + q.y) + (q.z + q.w);
            c += (r.x + r.y) + (r.z + r.w);
            d += (s.x + s.y) + (s.z + s.w);
        }
        for (; i < n4; i += stride) {
            const float4 p = x4[i];
            a += (p.x + p.y) + (p.z + p.w);
        }
        for (int j = 4 * n4 + tid; j < n; j += stride)   // the last n % 4 elements
            a += x[j];
    } else {                                              // a view that starts mid-float4
        for (int j = tid; j < n; j += stride)
            a += x[j];
    }
    return (a + b) + (c + d);
}

// 4: warp shuffles. Two elements per thread as in 3; each warp adds its 32 values in registers
//    (5 shuffles, no barrier) and only the warp totals pass through shared memory.
extern "C" __global__ void reduce4_shuffle(const float* __restrict__ x, float* out, int n)
{
    const int i = blockIdx.x * (2 * blockDim.x) + threadIdx.x;
    float v = (i < n) ? x[i] : 0.0f;
    if (i + blockDim.x < n)
        v += x[i + blockDim.x];
    v = block_sum(v);
    if (threadIdx.x == 0)
        atomicAdd(out, v);
}

// 5: grid-stride loop. A grid sized to fill the GPU once; each thread sums many float4s, so there
//    are about a thousand atomics in all instead of one per 512 elements.
extern "C" __global__ void reduce5_grid_stride(const float* __restrict__ x, float* out, int n)
{
    const float v = block_sum(thread_sum(x, n));
    if (threadIdx.x == 0)
        atomicAdd(out, v);
}

// 6: two stages, no atomics. Stage 1 is 5 writing one partial per block; stage 2, one block of a
//    second launch, adds the partials in a fixed order: the same bits on every run.
extern "C" __global__ void reduce6_partials(const float* __restrict__ x, float* __restrict__ partials, int n)
{
    const float v = block_sum(thread_sum(x, n));
    if (threadIdx.x == 0)
        partials[blockIdx.x] = v;
}

extern "C" __global__ void reduce6_final(const float* __restrict__ partials, float* __restrict__ out, int count)
{
    float v = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x)
        v += partials[i];
    v = block_sum(v);
    if (threadIdx.x == 0)
        *out = v;
}
'''


@dataclasses.dataclass(frozen=True)
class Variant:
    """One reduction variant: its number, kernel(s), one-line description, and launch shape."""

    number: int
    kernel: str
    header: str
    src: str
    per_thread: int = 1         # elements each thread loads when the grid covers the data (1 or 2)
    grid_stride: bool = False   # grid sized to the GPU instead of to n
    atomic: bool = True         # adds into *out, which must start at zero


REDUCE_VARIANTS = [
    Variant(1, "reduce1_interleaved", "interleaved addressing: tid % (2s) keeps every warp busy with a few lanes",
            REDUCE_SHARED_SRC),
    Variant(2, "reduce2_sequential", "sequential addressing: threads 0..s-1 add, idle warps retire",
            REDUCE_SHARED_SRC),
    Variant(3, "reduce3_first_add", "first add during load: two elements per thread, half the blocks",
            REDUCE_SHARED_SRC, per_thread=2),
    Variant(4, "reduce4_shuffle", "warp shuffles: 32 values added in registers, 32 totals in shared memory",
            REDUCE_SHUFFLE_SRC, per_thread=2),
    Variant(5, "reduce5_grid_stride", "grid-stride float4 loop, one atomicAdd per block of a GPU-sized grid",
            REDUCE_SHUFFLE_SRC, grid_stride=True),
    Variant(6, "reduce6_partials", "two stages: partials per block, then one block adds them (no atomics)",
            REDUCE_SHUFFLE_SRC, grid_stride=True, atomic=False),
]
"""The numbered variants, in the order of the lesson's table."""


def header_lines() -> list:
    """'variant N: description' for every variant, as the lesson's table header prints them."""
    return [f"variant {v.number}: {v.header}" for v in REDUCE_VARIANTS]


def exact_inputs(n: int, seed: int = 0, spread: int = 4) -> tuple:
    """Float32 values that are small integers, and their exact sum.

    Every partial sum of such values is an integer far below 2**24, so float32 adds them without
    rounding in any order: a reduction (or scan) is then right only if it is exactly right, which
    catches a single lost element where a tolerance would not.

    Returns
    -------
    (ndarray of float32, int)
    """
    rng = np.random.default_rng(seed)
    x = rng.integers(-spread, spread + 1, size=n).astype(np.float32)
    return x, int(x.astype(np.int64).sum())


def active_lanes(block: int, variant: str) -> list:
    """Per step of a shared-memory tree: (step, threads adding, warps with any thread adding).

    ``variant`` is "interleaved" (variant 1: tid % (2s) == 0) or "sequential" (variant 2: tid < s).
    A warp with one active lane costs as much issue time as a full one, so the warps column is what
    the step costs.

    Examples
    --------
    >>> active_lanes(256, "interleaved")[0]
    (1, 128, 8)
    >>> active_lanes(256, "sequential")[0]
    (128, 128, 4)
    """
    if block < 2 or block & (block - 1):
        raise ValueError(f"`block` should be a power of two >= 2; got {block}")
    tids = np.arange(block)
    out = []
    if variant == "interleaved":
        step = 1
        while step < block:
            act = tids[tids % (2 * step) == 0]
            out.append((step, int(act.size), int(np.unique(act // 32).size)))
            step *= 2
    elif variant == "sequential":
        step = block // 2
        while step > 0:
            act = tids[tids < step]
            out.append((step, int(act.size), int(np.unique(act // 32).size)))
            step //= 2
    else:
        raise ValueError(f"`variant` should be 'interleaved' or 'sequential'; got {variant!r}")
    return out


def plot_active_lanes(block: int = 256, ax=None):
    """Warps issued per tree step, interleaved vs sequential addressing, against the lanes doing work."""
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(8, 3.5))
    for variant, marker in (("interleaved", "o"), ("sequential", "s")):
        steps = active_lanes(block, variant)
        ax.plot(range(1, len(steps) + 1), [w for _, _, w in steps], marker=marker,
                label=f"{variant}: warps issuing")
    steps = active_lanes(block, "sequential")
    ax.plot(range(1, len(steps) + 1), [a / 32 for _, a, _ in steps], ls="--", color="gray",
            label="threads adding / 32 (the least warps that could do it)")
    ax.set_xlabel("tree step")
    ax.set_ylabel("warps per block")
    ax.set_title(f"A block of {block}: warps that must issue at each step of the tree", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def reduction_grid(block: int, kernel=None, cap: int = 1024, shared_mem: int = 0) -> int:
    """Blocks of a grid-stride kernel: as many as fit on the GPU at once (one wave), at most ``cap``.

    With ``kernel`` (a `course.Kernel`) the blocks per SM come from its occupancy (registers and shared
    memory decide it); without, 2048 threads per SM are assumed.
    """
    from .._env import device_info
    per_sm = kernel.occupancy(block, shared_mem) if kernel is not None else max(1, 2048 // block)
    return max(1, min(cap, device_info().sm_count * max(1, per_sm)))


def _pow2(block: int) -> None:
    if block < 32 or block > 1024 or block & (block - 1):
        raise ValueError(f"the reduction variants need a power-of-two block from 32 to 1024; got {block}")


def run_reduction(v: Variant, x, out, block: int = 256, partials=None) -> None:
    """Launch variant ``v`` on CuPy array ``x`` into ``out`` (a 1-element array; the atomic variants add
    into it, so zero it first when the value matters)."""
    import cupy
    _pow2(block)
    n = int(x.size)
    k = _kernel(v.src, v.kernel)
    if v.grid_stride:
        grid = reduction_grid(block, k)
    else:
        grid = max(1, -(-n // (block * v.per_thread)))
    smem = 4 * block if v.src is REDUCE_SHARED_SRC else 0
    if v.atomic:
        k(grid, block, x, out, n, shared_mem=smem)
        return
    if partials is None or partials.size < grid:
        partials = cupy.empty(grid, dtype=cupy.float32)
    k(grid, block, x, partials, n)
    _kernel(v.src, "reduce6_final")(1, 1024, partials, out, grid)


def check_reduction(v: Variant, block: int = 256, sizes=(1, 33, 1_000_003, (1 << 22) + 5)) -> None:
    """Raise `course.CheckError` unless ``v`` sums exactly (integer-valued inputs) at every size."""
    import cupy
    from .._errors import CheckError
    for j, n in enumerate(sizes):
        xh, want = exact_inputs(n, seed=100 + j)
        x = cupy.asarray(xh)
        out = cupy.zeros(1, dtype=cupy.float32)
        run_reduction(v, x, out, block)
        got = float(out.get()[0])
        if got != want:
            raise CheckError(f"variant {v.number} ({v.kernel}) is wrong at n={n}, block={block}: "
                             f"yours {got!r}, expected {want} (exact: the inputs are small integers)")


def reduction_table(n: int = 1 << 28, block: int = 256, variants=None, verbose: bool = True) -> list:
    """Check every variant, then time each and cupy.sum on ``n`` floats; one dict per row.

    Rows carry ``variant``, ``kernel``, ``ms``, ``gbps`` (4 bytes read per element) and ``of_cupy``
    (throughput as a fraction of cupy.sum's, measured in the same call).
    """
    import cupy
    from .._timing import benchmark
    variants = list(variants or REDUCE_VARIANTS)
    for v in variants:  # every variant proves itself before anything is timed
        check_reduction(v, block)
    x = cupy.random.default_rng(3).random(n, dtype=cupy.float32)
    out = cupy.zeros(1, dtype=cupy.float32)
    partials = cupy.empty(1024, dtype=cupy.float32)
    res = benchmark(lambda: x.sum(out=out[0]), name="cupy.sum")
    ref_ms = res.median_ms
    rows = [{"variant": "cupy", "kernel": "cupy.sum (CUB)", "block": "", "ms": ref_ms,
             "gbps": res.gbps(4 * n), "of_cupy": 1.0}]
    for v in variants:
        # the atomic variants keep adding into `out` while timed: its value was checked above
        r = benchmark(lambda v=v: run_reduction(v, x, out, block, partials), name=v.kernel)
        rows.append({"variant": v.number, "kernel": v.kernel, "block": block, "ms": r.median_ms,
                     "gbps": r.gbps(4 * n), "of_cupy": ref_ms / r.median_ms})
    if verbose:
        for line in header_lines():
            print(line)
        print()
        for r in rows:
            print(f"{str(r['variant']):>5} | {r['kernel']:<20} | block {str(r['block']):>4} | time {r['ms']:.3f} ms | "
                  f"bandwidth {r['gbps']:6.0f} GB/s | {100 * r['of_cupy']:5.1f}% of cupy.sum")
    return rows


def reduce_runner(n: int = 1 << 26):
    """A ``run(block, variant) -> GB/s`` for `course.widgets.sweep`; every variant checked on first use."""
    state = {"checked": set()}

    def run(block, variant):
        import cupy
        v = REDUCE_VARIANTS[int(variant) - 1]
        if (v.number, block) not in state["checked"]:
            check_reduction(v, block, sizes=(1_000_003,))
            state["checked"].add((v.number, block))
        if "x" not in state:
            state["x"] = cupy.random.default_rng(4).random(n, dtype=cupy.float32)
            state["out"] = cupy.zeros(1, dtype=cupy.float32)
            state["partials"] = cupy.empty(1024, dtype=cupy.float32)
        x, out, partials = state["x"], state["out"], state["partials"]
        from .ch04 import gbps_of
        return gbps_of(lambda: run_reduction(v, x, out, block, partials), 4 * n, name=v.kernel)
    return run


def reduce_sweep(record: bool | None = None):
    """The lesson's widget: GB/s against block size, a slider for the variant."""
    from ..widgets import sweep
    return sweep(reduce_runner(), {"block": [32, 64, 128, 256, 512, 1024], "variant": [1, 2, 3, 4, 5, 6]},
                 metric="GB/s (4 bytes read per element)", name="06_building_blocks_reduce", title="sum of 2^26 floats",
                 logx=True, record=record)


# --- scan ------------------------------------------------------------------------------------

SCAN_BLOCK_SRC = r'''// Inclusive scan of each block's own blockDim.x elements (a segmented scan, one segment per block).

// Hillis-Steele in shared memory: at step d every thread adds the value d places to its left.
// A barrier separates a step's reads from its writes, so nobody reads a value updated this step.
extern "C" __global__ void scan_block_hs(const float* __restrict__ x, float* __restrict__ y, int n)
{
    extern __shared__ float s[];
    const int tid = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + tid;
    s[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (int d = 1; d < blockDim.x; d *= 2) {
        const float left = (tid >= d) ? s[tid - d] : 0.0f;
        __syncthreads();
        s[tid] += left;
        __syncthreads();
    }
    if (i < n)
        y[i] = s[tid];
}

__device__ __forceinline__ float warp_inclusive_scan(float v)
{
    const int lane = threadIdx.x % 32;
    for (int d = 1; d < 32; d *= 2) {
        const float left = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d)
            v += left;
    }
    return v;
}

// Shuffles: each warp scans its 32 values in registers, warp 0 scans the warp totals, and each
// warp adds the total of the warps before it. Two barriers instead of 2 log2(blockDim.x).
// blockDim.x a multiple of 32.
extern "C" __global__ void scan_block_warp(const float* __restrict__ x, float* __restrict__ y, int n)
{
    __shared__ float warp_totals[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = warp_inclusive_scan((i < n) ? x[i] : 0.0f);
    if (lane == 31)
        warp_totals[warp] = v;
    __syncthreads();
    if (warp == 0)
        warp_totals[lane] = warp_inclusive_scan(lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f);
    __syncthreads();
    if (warp > 0)
        v += warp_totals[warp - 1];
    if (i < n)
        y[i] = v;
}
'''

SCAN_FULL_SRC = r'''// Inclusive scan of a whole array in three launches (reduce, then scan). A tile is the
// 4 * blockDim.x elements of one block; thread t owns elements 4t..4t+3 of its tile.
//   1. scan_tile_sums   each block adds up its tile                         reads  4 B/element
//   2. scan_carries     one block turns the tile sums into exclusive prefixes  (tile count only)
//   3. scan_tiles       each block scans its tile again from its prefix     reads + writes 8 B/element
// 12 bytes per element in all, where a single pass needs 8. blockDim.x a multiple of 32.

__device__ __forceinline__ float warp_inclusive_scan(float v)
{
    const int lane = threadIdx.x % 32;
    for (int d = 1; d < 32; d *= 2) {
        const float left = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d)
            v += left;
    }
    return v;
}

// Sum of `v` over the threads before this one; *total gets the whole block's sum. Leading barrier:
// safe to call in a loop.
__device__ float block_exclusive_scan(float v, float* total)
{
    __shared__ float warp_totals[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    __syncthreads();
    const float inclusive = warp_inclusive_scan(v);
    float exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 0)
        exclusive = 0.0f;
    if (lane == 31)
        warp_totals[warp] = inclusive;
    __syncthreads();
    if (warp == 0)
        warp_totals[lane] = warp_inclusive_scan(lane < warps ? warp_totals[lane] : 0.0f);
    __syncthreads();
    *total = warp_totals[warps - 1];
    return (warp > 0 ? warp_totals[warp - 1] : 0.0f) + exclusive;
}

__device__ __forceinline__ float4 load4(const float* __restrict__ x, long long i, int n)
{
    if (i + 3 < n && (reinterpret_cast<unsigned long long>(x) & 15) == 0)
        return *reinterpret_cast<const float4*>(x + i);
    return make_float4(i < n ? x[i] : 0.0f, i + 1 < n ? x[i + 1] : 0.0f,
                       i + 2 < n ? x[i + 2] : 0.0f, i + 3 < n ? x[i + 3] : 0.0f);
}

extern "C" __global__ void scan_tile_sums(const float* __restrict__ x, float* __restrict__ sums, int n)
{
    const float4 v = load4(x, 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x), n);
    float total;
    block_exclusive_scan((v.x + v.y) + (v.z + v.w), &total);
    if (threadIdx.x == 0)
        sums[blockIdx.x] = total;
}

// One block: thread t takes a contiguous run of the tile sums, so one pass over them suffices.
extern "C" __global__ void scan_carries(float* sums, int count)
{
    const int per = (count + blockDim.x - 1) / blockDim.x;
    const int lo = min(count, threadIdx.x * per), hi = min(count, lo + per);
    float mine = 0.0f;
    for (int i = lo; i < hi; ++i)
        mine += sums[i];
    float total;
    float run = block_exclusive_scan(mine, &total);
    for (int i = lo; i < hi; ++i) {
        const float s = sums[i];
        sums[i] = run;              // exclusive: the sum of every tile before tile i
        run += s;
    }
}

extern "C" __global__ void scan_tiles(const float* __restrict__ x, const float* __restrict__ carries,
                                   float* __restrict__ y, int n)
{
    const long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    float4 v = load4(x, i, n);
    v.y += v.x; v.z += v.y; v.w += v.z;           // the thread's own four, scanned
    float total;
    const float before = carries[blockIdx.x] + block_exclusive_scan(v.w, &total);
    v.x += before; v.y += before; v.z += before; v.w += before;
    if (i + 3 < n && (reinterpret_cast<unsigned long long>(y) & 15) == 0) {
        *reinterpret_cast<float4*>(y + i) = v;
    } else {
        if (i < n) y[i] = v.x;
        if (i + 1 < n) y[i + 1] = v.y;
        if (i + 2 < n) y[i + 2] = v.z;
        if (i + 3 < n) y[i + 3] = v.w;
    }
}
'''


def hillis_steele_steps(values) -> list:
    """The array after each step of a Hillis-Steele inclusive scan (step d adds the value d places left).

    Examples
    --------
    >>> [s.tolist() for s in hillis_steele_steps([1, 1, 1, 1])]
    [[1, 1, 1, 1], [1, 2, 2, 2], [1, 2, 3, 4]]
    """
    a = np.array(values)
    steps = [a.copy()]
    d = 1
    while d < a.size:
        left = np.concatenate([np.zeros(d, dtype=a.dtype), a[:-d]])
        a = a + left
        steps.append(a.copy())
        d *= 2
    return steps


def plot_scan_steps(values=(3, 1, 7, 0, 4, 1, 6, 3), ax=None):
    """The Hillis-Steele steps as rows of cells, with arrows from the value each cell adds."""
    import matplotlib.pyplot as plt
    steps = hillis_steele_steps(values)
    n = len(values)
    if ax is None:
        _fig, ax = plt.subplots(figsize=(1.0 * n + 1.5, 1.0 * len(steps) + 0.5))
    for r, row in enumerate(steps):
        for c, v in enumerate(row):
            ax.add_patch(plt.Rectangle((c, r * 1.5), 0.9, 0.9, fill=False))
            ax.text(c + 0.45, r * 1.5 + 0.45, str(v), ha="center", va="center", fontsize=10)
        if r:
            d = 1 << (r - 1)
            for c in range(d, n):
                ax.annotate("", xy=(c + 0.45, r * 1.5), xytext=(c - d + 0.45, (r - 1) * 1.5 + 0.9),
                            arrowprops={"arrowstyle": "->", "color": "tab:blue", "lw": 0.7})
        ax.text(-0.3, r * 1.5 + 0.45, "input" if r == 0 else f"d = {1 << (r - 1)}", ha="right", va="center",
                fontsize=9)
    ax.set_xlim(-1.6, n)
    ax.set_ylim(len(steps) * 1.5, -0.3)
    ax.axis("off")
    ax.set_title(f"Hillis-Steele: {len(steps) - 1} steps, {sum(n - (1 << k) for k in range(len(steps) - 1))} "
                 f"adds (a serial scan needs {n - 1})", fontsize=10)
    return ax


def scan_full(x, y=None, block: int = 256, sums=None):
    """Inclusive scan of the CuPy float32 array ``x`` with `SCAN_FULL_SRC`'s three launches."""
    import cupy
    n = int(x.size)
    if y is None:
        y = cupy.empty_like(x)
    tiles = max(1, -(-n // (4 * block)))
    if sums is None or sums.size < tiles:
        sums = cupy.empty(tiles, dtype=cupy.float32)
    _kernel(SCAN_FULL_SRC, "scan_tile_sums")(tiles, block, x, sums, n)
    _kernel(SCAN_FULL_SRC, "scan_carries")(1, 1024, sums, tiles)
    _kernel(SCAN_FULL_SRC, "scan_tiles")(tiles, block, x, sums, y, n)
    return y


def solution_source(name: str) -> str | None:
    """Text of solutions/06_building_blocks/<name>.cu, or None where the solutions are not shipped."""
    p = Path(__file__).resolve().parents[2] / "solutions" / "06_building_blocks" / f"{name}.cu"
    return p.read_text() if p.is_file() else None


def _single_pass_scan():
    """(kernel, tile) of the reference single-pass scan, or None without the solutions folder."""
    src = solution_source("scan_inclusive")
    if src is None:
        return None
    m = re.search(r"#define\s+TILE_ITEMS\s+(\d+)", src)
    return _kernel(src, "scan_inclusive"), int(m.group(1)) if m else 16


def scan_table(n: int = 1 << 26, verbose: bool = True) -> list:
    """Check, then time cupy.cumsum, the three-launch scan and (where shipped) the single-pass
    reference on ``n`` floats; GB/s counts 8 bytes per element (one read, one write) for all."""
    import cupy
    from .._errors import CheckError
    from .._timing import benchmark
    single = _single_pass_scan()
    for j, m in enumerate((1, 1000, 1_000_003, (1 << 22) + 3)):
        xh, _ = exact_inputs(m, seed=200 + j)
        want = np.cumsum(xh.astype(np.int64)).astype(np.float32)
        x = cupy.asarray(xh)
        outs = {"three launches": scan_full(x)}
        if single:
            k, items = single
            y = cupy.empty_like(x)
            k(-(-m // (256 * items)), 256, x, y, m)
            outs["single pass"] = y
        for name, y in outs.items():
            got = y.get()
            if not np.array_equal(got, want):
                bad = int(np.flatnonzero(got != want)[0])
                raise CheckError(f"scan ({name}) wrong at n={m}: y[{bad}] = {got[bad]!r}, expected {want[bad]!r}")
    x = cupy.random.default_rng(6).random(n, dtype=cupy.float32)
    y = cupy.empty_like(x)
    sums = cupy.empty(-(-n // 1024), dtype=cupy.float32)
    fns = {"cupy.cumsum": lambda: cupy.cumsum(x, out=y),
           "three launches (reduce, then scan)": lambda: scan_full(x, y, 256, sums)}
    if single:
        k, items = single
        fns["single pass (decoupled look-back)"] = lambda: k(-(-n // (256 * items)), 256, x, y, n)
    rows = []
    base = None
    for name, fn in fns.items():
        r = benchmark(fn, name=name)
        base = base or r.median_ms
        rows.append({"scan": name, "ms": r.median_ms, "gbps": r.gbps(8 * n), "vs_cumsum": base / r.median_ms})
    if verbose:
        for r in rows:
            print(f"{r['scan']:<36} | time {r['ms']:.3f} ms | {r['gbps']:6.0f} GB/s | {r['vs_cumsum']:.2f}x cupy.cumsum")
    return rows


# --- histogram -------------------------------------------------------------------------------

HIST_SRC = r'''// 256-bin histogram of ints; values outside [0, 256) are skipped. hist must be zero before the launch.

// one global atomicAdd per element: all threads of the GPU contend for 256 counters in L2
extern "C" __global__ void hist_global(const int* __restrict__ data, unsigned int* hist, int n)
{
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int v = data[i];
        if ((unsigned)v < 256u)
            atomicAdd(&hist[v], 1u);
    }
}

// privatized: each block counts into its own 256 counters in shared memory, then adds them to the
// global histogram, so L2 sees 256 atomics per block instead of one per element
extern "C" __global__ void hist_shared(const int* __restrict__ data, unsigned int* hist, int n)
{
    __shared__ unsigned int local[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        local[b] = 0;
    __syncthreads();
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int v = data[i];
        if ((unsigned)v < 256u)
            atomicAdd(&local[v], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (local[b])
            atomicAdd(&hist[b], local[b]);
}
'''


def hist_inputs(n: int, distinct: int = 256, seed: int = 0) -> np.ndarray:
    """``n`` int32 values spread evenly over ``distinct`` of the 256 bins (fewer bins: more contention)."""
    if not 1 <= distinct <= 256:
        raise ValueError(f"`distinct` should be 1..256; got {distinct}")
    rng = np.random.default_rng(seed)
    bins = np.linspace(0, 255, distinct).astype(np.int32) if distinct > 1 else np.array([7], dtype=np.int32)
    return bins[rng.integers(0, distinct, size=n)]


def _hist_launch(name: str, data, hist, block: int = 256, max_blocks: int | None = None):
    n = int(data.size)
    k = _kernel(HIST_SRC, name)
    grid = reduction_grid(block, k, cap=max_blocks or 4096)
    grid = max(1, min(grid, -(-n // block)))
    k(grid, block, data, hist, n)


def histogram_table(n: int = 1 << 26, verbose: bool = True) -> list:
    """Check, then time cupy.bincount, the global-atomic and the privatized histogram (and the graded
    reference where shipped) on ``n`` uniform ints; GB/s counts the 4 bytes read per element."""
    import cupy
    from .._errors import CheckError
    from .._timing import benchmark
    ref_src = solution_source("histogram256")
    ref = _kernel(ref_src, "histogram256") if ref_src else None

    def launch_ref(d, h):
        m = int(d.size)
        ref((max(1, min(512, -(-m // (512 * 16)))),), 512, d, h, m)

    kernels = {"global atomics": lambda d, h: _hist_launch("hist_global", d, h),
               "shared-memory privatized": lambda d, h: _hist_launch("hist_shared", d, h)}
    if ref:
        kernels["reference (exercise)"] = launch_ref
    for j, m in enumerate((1, 1000, 1_000_003)):
        dh = hist_inputs(m, seed=300 + j)
        want = np.bincount(dh, minlength=256).astype(np.uint32)
        d = cupy.asarray(dh)
        for name, fn in kernels.items():
            h = cupy.zeros(256, dtype=cupy.uint32)
            fn(d, h)
            if not np.array_equal(h.get(), want):
                raise CheckError(f"histogram ({name}) wrong at n={m}")
    d = cupy.asarray(hist_inputs(n, seed=9))
    h = cupy.zeros(256, dtype=cupy.uint32)
    fns = {"cupy.bincount": lambda: cupy.bincount(d, minlength=256)}
    fns.update({name: (lambda fn=fn: fn(d, h)) for name, fn in kernels.items()})
    rows = []
    base = None
    for name, fn in fns.items():
        r = benchmark(fn, name=name)
        base = base or r.median_ms
        rows.append({"histogram": name, "ms": r.median_ms, "gbps": r.gbps(4 * n), "vs_bincount": base / r.median_ms})
    if verbose:
        for r in rows:
            print(f"{r['histogram']:<26} | time {r['ms']:.3f} ms | {r['gbps']:6.0f} GB/s | "
                  f"{r['vs_bincount']:.2f}x cupy.bincount")
    return rows


def hist_runner(n: int = 1 << 25):
    """A ``run(distinct, kernel) -> GB/s`` for `course.widgets.sweep`: contention against privatization."""
    state = {}

    def run(distinct, kernel):
        import cupy
        from .ch04 import gbps_of
        name = {"global": "hist_global", "shared": "hist_shared"}[kernel]
        if distinct not in state:
            state.clear()
            state[distinct] = cupy.asarray(hist_inputs(n, distinct, seed=distinct))
            state["hist"] = cupy.zeros(256, dtype=cupy.uint32)
        d, h = state[distinct], state["hist"]
        return gbps_of(lambda: _hist_launch(name, d, h), 4 * n, name=name)
    return run


def hist_sweep(record: bool | None = None):
    """The lesson's widget: GB/s against the number of distinct values, a slider for the kernel."""
    from ..widgets import sweep
    return sweep(hist_runner(), {"distinct": [1, 2, 4, 8, 16, 32, 64, 128, 256], "kernel": ["global", "shared"]},
                 metric="GB/s (4 bytes read per element)", name="06_building_blocks_histogram",
                 title="256-bin histogram of 2^25 ints", logx=True, record=record)

