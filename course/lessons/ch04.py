"""Chapter 04 (coalescing): which 32-byte sectors a warp touches, and what that costs in bandwidth.

The sector model itself (`course.access.warp_access`) is shared with later chapters; this module draws
it (`plot_warp_access`, `plot_patterns`), sweeps the lesson's ``scale_strided`` kernel over stride and
offset, and asks Nsight Compute for its own count (`compare_with_ncu`) where the profiler is installed and
allowed to read the counters. The kernels themselves live in the notebook's ``%%cuda`` cells.
"""
from __future__ import annotations

from collections import Counter

from .. import benchmark, gpu_available, lesson_cell, no_gpu_message, print_table
from ..access import LINE, SECTOR, WARP, Pattern, WarpAccess, warp_access
from ..ncu import NcuResult, run_ncu

__all__ = [
    "plot_warp_access", "plot_patterns", "PATTERNS", "prediction_table", "STRIDES", "OFFSETS",
    "strided_runner", "stride_offset_sweep", "plot_stride_curve", "probe_source", "ncu_sectors_per_request",
    "compare_with_ncu", "padded_ld", "row_store_table",
]

CHAPTER = "04_coalescing"


# --- drawing the sector model (CPU) ----------------------------------------------------------------

def _runs(sectors) -> list:
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
        a = p.sectors()
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
        plot_warp_access(p.sectors(), ax=ax, title=f"{p.name}  ({p.elem_bytes} B per lane)")
    for ax in list(axes.flat)[len(patterns):]:
        ax.axis("off")
    fig.tight_layout()
    return fig


def padded_ld(cols: int, elem_bytes: int = 4, align: int = SECTOR) -> int:
    """The leading dimension (elements between row starts) that rounds a row up to ``align`` bytes."""
    per = align // elem_bytes
    return -(-cols // per) * per


def row_store_table(cols: int, elem_bytes: int = 4, rows: int = 32) -> list:
    """A warp storing 32 consecutive elements at the start of each of ``rows`` rows (a transpose's output
    tile), with rows ``cols`` long, padded to 32 and to 128 bytes: sectors and partly written sectors per store.
    A partly written sector must be completed by another warp, often of another block, before L2 holds it whole."""
    out = []
    for label, ld in (("as given", cols), ("padded to 32 B", padded_ld(cols, elem_bytes)),
                      ("padded to 128 B", padded_ld(cols, elem_bytes, LINE))):
        accs = [warp_access(lambda i: i, elem_bytes, base=r * ld * elem_bytes) for r in range(rows)]
        partial = [sum(n * elem_bytes < SECTOR for n in Counter((a.addresses // SECTOR).tolist()).values())
                   for a in accs]
        out.append({"rows": label, "leading dimension": ld, "row bytes": ld * elem_bytes,
                    "sectors/store": sum(a.sectors_per_request for a in accs) / rows,
                    "partial sectors/store": sum(partial) / rows})
    return out


# --- the stride/offset sweep of the lesson's scale_strided cell ----------------------------------

def strided_runner(kernel=None, m: int | None = None, max_stride: int = 64, max_offset: int = 32):
    """A ``run(stride, offset) -> useful GB/s`` for `course.widgets.sweep`, timing ``scale_strided``.

    ``kernel`` is the compiled ``scale_strided`` of the notebook; by default the chapter's ``%%cuda``
    cell (`course.lesson_cell`: the version last run in this session, else the saved one), compiled on
    the first call, so building a sweep on a machine without a GPU compiles nothing. Every point touches
    the same ``m`` elements (reads 4 bytes and writes 4 bytes of each), so the y axis compares like with
    like: useful bytes per second, whatever the hardware had to fetch. Buffers are allocated for the
    largest stride on the first call (about 2 x 4 GiB with the default ``m = 2**24``; less on GPUs with
    less free memory).
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
            state.update(k=kernel or lesson_cell(CHAPTER, "scale_strided").kernel("scale_strided"), m=mm,
                         x=cupy.ones(size, dtype=cupy.float32), y=cupy.zeros(size, dtype=cupy.float32))
        k, mm, x, y = state["k"], state["m"], state["x"], state["y"]
        grid = -(-mm // 256)
        res = benchmark(lambda: k(grid, 256, x, y, 2.0, mm, stride, offset), budget_s=0.5, min_samples=5,
                        name="scale_strided")
        return res.gbps(8 * mm)
    return run


STRIDES = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]
OFFSETS = [0, 1, 2, 4, 8, 16, 32]


def stride_offset_sweep(record: bool | None = None, kernel=None):
    """The lesson's widget: useful GB/s against stride, with a slider for the offset (in floats)."""
    from ..widgets import sweep
    return sweep(strided_runner(kernel), {"stride": STRIDES, "offset": OFFSETS}, metric="useful GB/s",
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


# --- the model against Nsight Compute ------------------------------------------------------------

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
    patterns = list(patterns or PATTERNS)
    rows = [{"pattern": p.name, "model": p.sectors().sectors_per_request, "ncu": None} for p in patterns]
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
