"""Chapter 04 (coalescing): which 32-byte sectors a warp touches, and what that costs in bandwidth.

The CPU half counts and draws sectors for any index expression (`warp_access`,
`plot_warp_access`); the GPU half measures strided, misaligned and vectorized kernels and asks
Nsight Compute for its own count (`ncu_sectors_per_request`) where the profiler is installed and
allowed to read the counters. Chapters 05 and 06 reuse the measurement helpers at the end.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from .._table import print_table
from ..ncu import NcuResult, run_ncu

__all__ = [
    "WARP", "SECTOR", "LINE", "WarpAccess", "warp_access", "plot_warp_access", "plot_patterns",
    "Pattern", "PATTERNS", "prediction_table",
    "STRIDED_SRC", "SCALE_SRC", "WALK_SRC", "STRIDES", "OFFSETS", "strided_runner", "stride_offset_sweep", "plot_stride_curve",
    "gbps_of", "probe_source", "ncu_sectors_per_request",
    "compare_with_ncu", "row_scale_reference",
]

WARP = 32
SECTOR = 32   # bytes: the unit L1 and L2 track, and what a DRAM miss fills
LINE = 128    # bytes: four sectors share one cache tag


# --- the sector model (CPU) ----------------------------------------------------------------------

@dataclasses.dataclass
class WarpAccess:
    """The bytes one warp-wide load asks for, and the sectors and lines that serve them.

    Attributes
    ----------
    lanes : ndarray of int
        Active lanes (a lane whose index is None sits the load out).
    addresses : ndarray of int
        Byte address of each active lane's element, relative to the allocation.
    elem_bytes : int
        Bytes each lane loads (4 for float, 16 for float4).
    sectors : ndarray of int
        Distinct 32-byte sectors covering the requested bytes, sorted (address // 32).
    lines : ndarray of int
        Distinct 128-byte lines those sectors belong to.
    """

    lanes: np.ndarray
    addresses: np.ndarray
    elem_bytes: int
    sectors: np.ndarray
    lines: np.ndarray

    @property
    def sectors_per_request(self) -> int:
        """What Nsight Compute reports as sectors / request for this one instruction."""
        return int(self.sectors.size)

    @property
    def useful_bytes(self) -> int:
        """Distinct bytes the lanes asked for (lanes reading the same element count once)."""
        spans = {(int(a), int(a) + self.elem_bytes) for a in self.addresses}
        covered = set()
        for lo, hi in spans:
            covered.update(range(lo, hi))
        return len(covered)

    @property
    def fetched_bytes(self) -> int:
        return SECTOR * self.sectors_per_request

    @property
    def ideal_sectors(self) -> int:
        """Sectors the same amount of useful data needs when packed and aligned."""
        return max(1, -(-self.useful_bytes // SECTOR)) if self.lanes.size else 0

    @property
    def efficiency(self) -> float:
        """Useful bytes over fetched bytes: the fraction of DRAM bandwidth that does work."""
        return self.useful_bytes / self.fetched_bytes if self.fetched_bytes else 0.0

    def summary(self) -> str:
        n, k = self.sectors_per_request, int(self.lines.size)
        return (f"{n} sector{'s' * (n != 1)} in {k} line{'s' * (k != 1)} per request "
                f"(ideal {self.ideal_sectors}); {100 * self.efficiency:.0f}% of fetched bytes used")


def warp_access(index, elem_bytes: int = 4, *, base: int = 0, lanes: int = WARP) -> WarpAccess:
    """Which sectors serve one warp-wide load of ``x[index(lane)]``.

    Parameters
    ----------
    index : callable or sequence
        ``index(lane) -> element index`` (or None for an inactive lane), or one entry per lane.
    elem_bytes : int
        Size of one element: 1, 2, 4, 8 or 16 bytes. Loads are naturally aligned in CUDA, so an
        element never straddles two sectors.
    base : int
        Byte offset of element 0 from a 256-byte-aligned allocation (``cudaMalloc`` and CuPy
        align to at least 256 bytes); must be a multiple of ``elem_bytes``.
    lanes : int
        Lanes in the warp (32 on every NVIDIA GPU).

    Returns
    -------
    WarpAccess

    Examples
    --------
    >>> warp_access(lambda lane: lane).sectors_per_request          # 128 aligned bytes
    4
    >>> warp_access(lambda lane: lane + 1).sectors_per_request      # shifted by one float
    5
    >>> warp_access(lambda lane: 32 * lane).sectors_per_request     # one sector per lane
    32
    """
    if elem_bytes not in (1, 2, 4, 8, 16):
        raise ValueError(f"`elem_bytes` should be 1, 2, 4, 8 or 16; got {elem_bytes!r}")
    if base % elem_bytes:
        raise ValueError(f"`base` ({base}) should be a multiple of `elem_bytes` ({elem_bytes}): CUDA loads "
                         f"of {elem_bytes}-byte types must be aligned to {elem_bytes} bytes")
    if callable(index):
        idx = [index(lane) for lane in range(lanes)]
    else:
        idx = list(index)
        if len(idx) != lanes:
            raise ValueError(f"`index` should give one entry per lane ({lanes}); got {len(idx)}")
    active = [(lane, int(i)) for lane, i in enumerate(idx) if i is not None]
    if any(i < 0 for _, i in active):
        raise ValueError("element indices should be >= 0 (a negative index reads before the allocation)")
    lane_ids = np.array([lane for lane, _ in active], dtype=np.int64)
    addr = np.array([base + i * elem_bytes for _, i in active], dtype=np.int64)
    sectors = np.unique(addr // SECTOR)
    lines = np.unique(sectors // (LINE // SECTOR))
    return WarpAccess(lane_ids, addr, elem_bytes, sectors, lines)


def _runs(sectors: np.ndarray) -> list:
    """Split sorted sector ids into runs of consecutive ids."""
    runs, cur = [], []
    for s in sectors.tolist():
        if cur and s != cur[-1] + 1:
            runs.append(cur)
            cur = []
        cur.append(s)
    if cur:
        runs.append(cur)
    return runs


def plot_warp_access(acc: WarpAccess, ax=None, title: str | None = None):
    """Draw lanes (top) and the sectors they touch (bottom), one line per lane to its bytes.

    Sectors that are not touched are left out; a gap marks where the address jumps. Shaded bytes
    are the ones some lane asked for; the rest of each sector is fetched for nothing. Thick edges
    are 128-byte line boundaries.
    """
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(11, 2.8))
    runs = _runs(acc.sectors)
    gap = 0.6 if len(runs) <= 8 else 0.3
    x_of = {}
    x = 0.0
    for r in runs:
        for s in r:
            x_of[s] = x
            x += 1.0
        x += gap
    width = max(x - gap, 1.0)
    used = {}
    for a in acc.addresses.tolist():
        for b in range(a, a + acc.elem_bytes):
            used.setdefault(b // SECTOR, set()).add(b % SECTOR)
    for s, x0 in x_of.items():
        ax.add_patch(plt.Rectangle((x0, 0), 1, 1, fill=False, lw=0.6, ec="black"))
        for b in used.get(s, ()):
            ax.add_patch(plt.Rectangle((x0 + b / SECTOR, 0), 1 / SECTOR, 1, color="tab:blue", alpha=0.7, lw=0))
        if s % (LINE // SECTOR) == 0:
            ax.plot([x0, x0], [-0.15, 1.15], color="black", lw=2)
        if s % (LINE // SECTOR) == LINE // SECTOR - 1:
            ax.plot([x0 + 1, x0 + 1], [-0.15, 1.15], color="black", lw=2)
    for r in runs[1:]:
        ax.text(x_of[r[0]] - gap / 2, 0.5, "…", ha="center", va="center", fontsize=12)
    lane_y = 2.4
    lane_x = {lane: (lane + 0.5) * width / WARP for lane in range(WARP)}
    for lane, a in zip(acc.lanes.tolist(), acc.addresses.tolist()):
        s = a // SECTOR
        xb = x_of[s] + ((a % SECTOR) + acc.elem_bytes / 2) / SECTOR
        ax.plot([lane_x[lane], xb], [lane_y - 0.1, 1.0], color="gray", lw=0.6)
    ax.scatter([lane_x[lane] for lane in acc.lanes.tolist()], [lane_y] * acc.lanes.size, s=12, color="tab:orange",
               zorder=3)
    for lane in (0, 8, 16, 24, 31):
        ax.text(lane_x[lane], lane_y + 0.25, str(lane), ha="center", fontsize=7)
    ax.text(-0.02 * width, lane_y, "lane", ha="right", va="center", fontsize=8)
    ax.text(-0.02 * width, 0.5, "sectors", ha="right", va="center", fontsize=8)
    ax.set_xlim(-0.12 * width, width * 1.02)
    ax.set_ylim(-0.4, lane_y + 0.6)
    ax.axis("off")
    ax.set_title(title + "\n" + acc.summary() if title else acc.summary(), fontsize=9)
    return ax


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A named access pattern in both languages: ``c_expr`` (C, in terms of the lane ``i``) and
    ``index`` (Python, lane -> element index), for the same ``elem_bytes``-byte element type."""

    name: str
    c_expr: str
    index: object
    elem_bytes: int = 4

    def access(self) -> WarpAccess:
        return warp_access(self.index, self.elem_bytes)


PATTERNS = [
    Pattern("coalesced x[i]", "i", lambda i: i),
    Pattern("shifted x[i + 1]", "i + 1", lambda i: i + 1),
    Pattern("reversed x[31 - i]", "31 - i", lambda i: 31 - i),
    Pattern("stride 2 x[2i]", "2 * i", lambda i: 2 * i),
    Pattern("stride 8 x[8i]", "8 * i", lambda i: 8 * i),
    Pattern("stride 32 x[32i]", "32 * i", lambda i: 32 * i),
    Pattern("broadcast x[0]", "0", lambda i: 0),
    Pattern("float4 x4[i]", "i", lambda i: i, 16),
    Pattern("double x[i]", "i", lambda i: i, 8),
]
"""The patterns the lesson draws and Nsight Compute counts."""


def prediction_table(patterns=None) -> list:
    """One dict per pattern: name, sectors per request, ideal sectors, efficiency."""
    out = []
    for p in patterns or PATTERNS:
        a = p.access()
        out.append({"pattern": p.name, "bytes/lane": p.elem_bytes, "sectors/request": a.sectors_per_request,
                    "ideal": a.ideal_sectors, "lines": int(a.lines.size), "efficiency": round(a.efficiency, 3)})
    return out


def plot_patterns(patterns=None, ncols: int = 1):
    """`plot_warp_access` for each pattern, stacked."""
    import matplotlib.pyplot as plt
    patterns = list(patterns or PATTERNS)
    rows = -(-len(patterns) // ncols)
    fig, axes = plt.subplots(rows, ncols, figsize=(11 * ncols, 2.4 * rows), squeeze=False)
    for ax, p in zip(axes.flat, patterns):
        plot_warp_access(p.access(), ax=ax, title=f"{p.name}  ({p.elem_bytes} B per lane)")
    for ax in list(axes.flat)[len(patterns):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


# --- kernels the lesson measures (the %%cuda cells hold the same text) ---------------------------

STRIDED_SRC = r'''extern "C" __global__ void scale_strided(const float* __restrict__ x, float* __restrict__ y,
                                      float a, int m, int stride, int offset)
{
    // thread i works on element i*stride + offset: neighbouring lanes sit `stride` floats apart
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < m) {
        long long j = i * stride + offset;
        y[j] = a * x[j];
    }
}
'''
"""y = a*x on every ``stride``-th element starting at ``offset``; ``m`` elements are touched."""

SCALE_SRC = r'''extern "C" __global__ void scale_scalar(const float* __restrict__ x, float* __restrict__ y,
                                     float a, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = a * x[i];
}

// n4 = n / 4 float4s; the caller handles the n % 4 tail (none when n is a multiple of 4)
extern "C" __global__ void scale_vec4(const float4* __restrict__ x, float4* __restrict__ y,
                                   float a, int n4)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 v = x[i];            // one 16-byte load: 512 contiguous bytes per warp
        v.x *= a; v.y *= a; v.z *= a; v.w *= a;
        y[i] = v;
    }
}

// a grid sized to the GPU, not to the data: each thread keeps four independent float4 loads in flight
extern "C" __global__ void scale_vec4_grid(const float4* __restrict__ x, float4* __restrict__ y,
                                        float a, int n4)
{
    const int stride = gridDim.x * blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n4; i += 4 * stride) {
        float4 v[4];
        #pragma unroll
        for (int k = 0; k < 4; ++k) v[k] = x[i + k * stride];
        #pragma unroll
        for (int k = 0; k < 4; ++k) {
            v[k].x *= a; v[k].y *= a; v[k].z *= a; v[k].w *= a;
            y[i + k * stride] = v[k];
        }
    }
    for (; i < n4; i += stride) {
        float4 v = x[i];
        v.x *= a; v.y *= a; v.z *= a; v.w *= a;
        y[i] = v;
    }
}
'''
"""Three ways to write y = a*x: a float per thread, a float4 per thread, float4 with a grid-stride loop."""

WALK_SRC = r'''// Row sums of a row-major rows x cols matrix, two ways.

// one thread per row, walking along it: at every step the 32 lanes of a warp read 32 different
// rows, `cols` floats apart, so each load instruction touches 32 sectors
extern "C" __global__ void row_sum_thread(const float* __restrict__ m, float* __restrict__ out,
                                       int rows, int cols)
{
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = m + (long long)r * cols;
    float s = 0.0f;
    for (int c = 0; c < cols; ++c)
        s += row[c];
    out[r] = s;
}

// one warp per row: the lanes read 32 neighbouring floats (128 bytes) at every step, then add
// their partial sums with shuffles
extern "C" __global__ void row_sum_warp(const float* __restrict__ m, float* __restrict__ out,
                                     int rows, int cols)
{
    int r = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (r >= rows) return;             // whole warps leave together, so the shuffles stay full
    const float* row = m + (long long)r * cols;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32)
        s += row[c];
    for (int off = 16; off > 0; off >>= 1)
        s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0)
        out[r] = s;
}
'''
"""Row sums with a thread per row (uncoalesced) and a warp per row (coalesced)."""


_KERNELS: dict = {}


def _kernel(src: str, name: str):
    """Compile ``src`` once per process (on the first GPU call) and return kernel ``name``."""
    if src not in _KERNELS:
        from .._launch import compile as compile_
        _KERNELS[src] = compile_(src)
    return _KERNELS[src].kernel(name)


def gbps_of(fn, nbytes: float, **kw) -> float:
    """GB/s of ``fn()`` timed with `course.benchmark` for ``nbytes`` moved per call."""
    from .._timing import benchmark
    kw.setdefault("budget_s", 0.5)
    kw.setdefault("min_samples", 5)
    return benchmark(fn, **kw).gbps(nbytes)


def strided_runner(m: int | None = None, max_stride: int = 64, max_offset: int = 32):
    """A ``run(stride, offset) -> useful GB/s`` for `course.widgets.sweep` over `STRIDED_SRC`.

    Every point touches the same ``m`` elements (reads 4 bytes and writes 4 bytes of each), so the
    y axis compares like with like: useful bytes per second, whatever the hardware had to fetch.
    Buffers are allocated for the largest stride on the first call (about 2 x 4 GiB with the
    default ``m = 2**24``; less on GPUs with less free memory).
    """
    state = {}

    def run(stride, offset):
        import cupy
        if stride < 1 or stride > max_stride or offset < 0 or offset > max_offset:
            raise ValueError(f"stride should be in 1..{max_stride} and offset in 0..{max_offset}")
        if not state:
            free = cupy.cuda.runtime.memGetInfo()[0]
            mm = m or 1 << 24
            while 2 * 4 * (mm * max_stride + max_offset) > 0.6 * free and mm > 1 << 18:
                mm //= 2
            size = mm * max_stride + max_offset
            state.update(k=_kernel(STRIDED_SRC, "scale_strided"), m=mm,
                         x=cupy.ones(size, dtype=cupy.float32), y=cupy.zeros(size, dtype=cupy.float32))
        k, mm, x, y = state["k"], state["m"], state["x"], state["y"]
        grid = -(-mm // 256)
        return gbps_of(lambda: k(grid, 256, x, y, 2.0, mm, stride, offset), 8 * mm, name="scale_strided")
    return run


STRIDES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
OFFSETS = [0, 1, 2, 4, 8, 16, 32]


def stride_offset_sweep(record: bool | None = None):
    """The lesson's widget: useful GB/s against stride, with a slider for the offset (in floats)."""
    from ..widgets import sweep
    return sweep(strided_runner(), {"stride": STRIDES, "offset": OFFSETS}, metric="useful GB/s",
                 name="04_coalescing_stride_offset", title="y[j] = a*x[j], j = i*stride + offset", record=record)


def plot_stride_curve(sw, offset: int = 0, ax=None):
    """Measured (or recorded) GB/s against stride, with the sector model's prediction scaled to stride 1.

    The model: a warp moves ``sectors(stride)`` sectors for 128 useful bytes, so useful bandwidth
    falls as ``4 / sectors`` of the stride-1 figure, flat from stride 8 on (one sector per lane).
    """
    return sw.plot_against_model(
        lambda s, base: base * 4 / warp_access(lambda i: i * s + offset).sectors_per_request,
        fixed={"offset": offset}, measured_label=f"measured (offset {offset})",
        model_label="sector model: stride-1 figure x 4 / sectors per request",
        xlabel="stride (floats between neighbouring lanes)", ylabel="useful GB/s (8 bytes per element touched)",
        title="strided scale", logx=True, ax=ax)


_PROBE_TYPES = {4: "float", 8: "float2", 16: "float4"}


def probe_source(pattern: Pattern, name: str = "probe") -> str:
    """A kernel whose every warp loads ``x[w * pitch + c_expr]`` once (lane ``i``), then stores it
    coalesced: the load is the only global load, so Nsight Compute's load counters see just it."""
    t = _PROBE_TYPES.get(pattern.elem_bytes)
    if t is None:
        raise ValueError(f"the probe kernel loads 4, 8 or 16-byte elements; got {pattern.elem_bytes}")
    return (f'extern "C" __global__ void {name}(const {t}* __restrict__ x, {t}* __restrict__ y, int pitch)\n'
            '{\n'
            '    const int i = threadIdx.x % 32;\n'
            '    const long long w = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;\n'
            f'    y[w * 32 + i] = x[w * pitch + ({pattern.c_expr})];\n'
            '}\n')


_METRIC_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
_METRIC_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"


def _pitch(pattern: Pattern) -> int:
    """Elements between warps' windows: past the pattern's largest index, a multiple of 128 bytes."""
    top = max(int(pattern.index(i)) for i in range(WARP)) + 1
    per_line = LINE // pattern.elem_bytes
    return -(-top // per_line) * per_line


def ncu_sectors_per_request(patterns, warps: int = 1024) -> NcuResult:
    """Nsight Compute's sectors/request for each pattern, from one profiled run.

    The result's ``metrics`` maps each pattern's name to its ratio (None where ncu gave none). One
    kernel per pattern (``probe_0``, ``probe_1``, ...) is compiled into one module and launched once.
    """
    patterns = list(patterns)
    src = "\n".join(probe_source(p, f"probe_{j}") for j, p in enumerate(patterns))
    lines = ["import cupy, course", f"m = course.compile({src!r})"]
    for j, p in enumerate(patterns):
        pitch, comps = _pitch(p), p.elem_bytes // 4
        lines += [f"x = cupy.zeros({warps * pitch * comps}, dtype=cupy.float32)",
                  f"y = cupy.zeros({warps * 32 * comps}, dtype=cupy.float32)",
                  f"m.kernel('probe_{j}')({warps * 32 // 128}, 128, x, y, {pitch})"]
    lines.append("cupy.cuda.Device().synchronize()")
    res = run_ncu("\n".join(lines) + "\n", [_METRIC_SECTORS, _METRIC_REQUESTS], kernel="regex:^probe_",
                  launches=len(patterns))
    if res:
        ratios = {}
        for j, p in enumerate(patterns):
            got = res.by_kernel.get(f"probe_{j}", {})
            s, r = got.get(_METRIC_SECTORS), got.get(_METRIC_REQUESTS)
            ratios[p.name] = (s / r) if s and r else None
        res.metrics = ratios
    return res


def compare_with_ncu(patterns=None) -> list:
    """Model vs Nsight Compute sectors/request for each pattern; prints the table and returns it.

    Without a GPU, or when ncu is missing or not allowed to read counters, prints one sentence
    saying so and returns the model's column alone.
    """
    from .._env import gpu_available, no_gpu_message
    patterns = list(patterns or PATTERNS)
    rows = [{"pattern": p.name, "model": p.access().sectors_per_request, "ncu": None} for p in patterns]
    if not gpu_available():
        print(no_gpu_message("Comparing with Nsight Compute"))
    else:
        res = ncu_sectors_per_request(patterns)
        if not res:
            print(res.reason)
        else:
            for row, p in zip(rows, patterns):
                v = res.metrics.get(p.name)
                row["ncu"] = None if v is None else round(v, 2)
    print_table(rows)
    return rows


def row_scale_reference(inp: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """What the graded ``row_scale`` computes: every row of ``inp`` times its entry of ``scale``."""
    return (inp * scale.reshape(-1, 1)).astype(np.float32)

