"""Chapter 05 (shared memory and bank conflicts): which bank each lane hits, and the transpose.

The bank model itself (`course.access.bank_access`) is shared with chapter 08; this module draws it
(`plot_banks`), sweeps the lesson's strided shared-memory reads, checks and times the four transposes of
the notebook against a copy of the same bytes (`transpose_table`), bounds what a conflicted tile can
reach, and reads Nsight Compute's bank-conflict counters where the profiler is available. The kernels
themselves live in the notebook's ``%%cuda`` cells.
"""
from __future__ import annotations

import re

from .. import benchmark, check, device_info, gpu_available, lesson_cell, no_gpu_message, print_table, sm_clock_mhz
from ..access import BANKS, BankAccess, Pattern, bank_access
from ..ncu import NcuResult, run_ncu

__all__ = [
    "plot_banks", "BANK_PATTERNS", "bank_table", "SMEM_STRIDES", "SMEM_WIDTHS", "smem_runner",
    "smem_stride_sweep", "plot_smem_curve", "TRANSPOSE_ABOUT", "transpose_launch", "transpose_table",
    "ncu_bank_conflicts", "predicted_transpose_conflicts", "conflict_bound_gbps", "H100_SXM", "smem_peak_gbps",
    "smem_sizes", "conflict_factor", "bank_model_table", "transpose_tile_figure",
]

CHAPTER = "05_bank_conflicts"


# --- drawing the bank model (CPU) ----------------------------------------------------------------

def plot_banks(acc: BankAccess, ax=None, title: str | None = None, max_rows: int = 12):
    """32 columns, one per bank; one row per wavefront. A bank with k distinct words in a phase
    needs k wavefronts, so a conflict shows as a column of stacked cells; lanes reading the same
    word share a cell (broadcast). 8- and 16-byte accesses are served in phases of 16 and 8 lanes,
    drawn one below the other."""
    import matplotlib.pyplot as plt
    phases = acc.phases()
    total = acc.wavefronts
    shown = min(max(total, 1), max_rows)
    if ax is None:
        _fig, ax = plt.subplots(figsize=(12, 0.42 * shown + 1.3))
    cmap = plt.get_cmap("viridis")
    row0 = 0
    for p, (lo, hi, cells) in enumerate(phases):
        depth = max((len(v) for v in cells.values()), default=0)
        for b, words in cells.items():
            for k, w in enumerate(sorted(words)):
                row = row0 + k
                if row >= shown:
                    continue
                ls = sorted(set(words[w]))
                ax.add_patch(plt.Rectangle((b, row), 1, 1, color=cmap(ls[0] / 32), alpha=0.55, lw=0.5, ec="white"))
                label = ",".join(map(str, ls)) if len(ls) <= 2 else f"{ls[0]}..{ls[-1]}\n({len(ls)})"
                ax.text(b + 0.5, row + 0.5, label, ha="center", va="center", fontsize=6)
        if len(phases) > 1 and row0 < shown:
            ax.axhline(row0, color="black", lw=1)
            ax.text(BANKS + 0.2, row0 + 0.5, f"phase {p + 1}\nlanes {lo}-{hi}", fontsize=7, va="center")
        row0 += depth
    if total > shown:
        ax.text(BANKS / 2, shown + 0.35, f"... {total - shown} more wavefronts", ha="center", fontsize=8)
    ax.set_xlim(0, BANKS + (3 if len(phases) > 1 else 0))
    ax.set_ylim(shown + (0.8 if total > shown else 0), 0)
    ax.set_xticks([b + 0.5 for b in range(BANKS)], [str(b) for b in range(BANKS)], fontsize=7)
    ax.set_yticks([r + 0.5 for r in range(shown)], [f"wavefront {r + 1}" for r in range(shown)], fontsize=7)
    ax.set_xlabel("bank (cells list the lanes reading that word)")
    t = acc.summary()
    ax.set_title(f"{title}\n{t}" if title else t, fontsize=9)
    return ax


_TY = 5  # the row a warp's threadIdx.y picks in the tile patterns; any value gives the same degree
BANK_PATTERNS = [
    Pattern("row of float[32][32]: tile[ty][i]", "ty * 32 + i", lambda i: _TY * 32 + i),
    Pattern("column of float[32][32]: tile[i][ty]", "i * 32 + ty", lambda i: i * 32 + _TY),
    Pattern("column of float[32][33]: tile[i][ty]", "i * 33 + ty", lambda i: i * 33 + _TY),
    Pattern("swizzled column: tile[i][ty ^ i]", "i * 32 + (ty ^ i)", lambda i: i * 32 + (_TY ^ i)),
    Pattern("stride 2: s[2i]", "2 * i", lambda i: 2 * i),
    Pattern("stride 3: s[3i]", "3 * i", lambda i: 3 * i),
    Pattern("stride 16: s[16i]", "16 * i", lambda i: 16 * i),
    Pattern("broadcast: s[0]", "0", lambda i: 0),
    Pattern("float2 s2[i]", "i", lambda i: i, 8),
    Pattern("float4 s4[i]", "i", lambda i: i, 16),
    Pattern("float4 column of float4[32][8]: s4[i*8]", "i * 8", lambda i: 8 * i, 16),
]


def bank_table(patterns=None) -> list:
    """One dict per pattern: conflict degree and wavefronts under the bank model."""
    out = []
    for p in patterns or BANK_PATTERNS:
        a = p.banks()
        out.append({"pattern": p.name, "bytes/lane": p.elem_bytes, "degree": a.degree,
                    "wavefronts": a.wavefronts, "ideal": a.ideal_wavefronts})
    return out


# --- measured: the lesson's strided shared-memory reads -------------------------------------------

SMEM_STRIDES = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 24, 31, 32, 33]
SMEM_WIDTHS = [4, 8, 16]


def smem_runner(kernels=None, reps: int = 4096, blocks_per_sm: int = 8, block: int = 256):
    """A ``run(stride, width) -> shared-memory GB/s`` (bytes the lanes received, all SMs) for sweeps.

    ``kernels`` maps the element width (4, 8, 16 bytes) to the compiled ``smem_stride_4/8/16`` of the
    notebook's cell; by default that cell (`course.lesson_cell`: the version last run in this session,
    else the saved one), compiled on the first call, so building a sweep without a GPU compiles nothing.
    """
    state = {}

    def run(stride, width):
        import cupy
        if width not in SMEM_WIDTHS:
            raise ValueError(f"width should be one of {SMEM_WIDTHS} bytes; got {width}")
        if not state:
            if kernels is None:
                mod = lesson_cell(CHAPTER, "smem_stride_4").compile()
                state["k"] = {w: mod.kernel(f"smem_stride_{w}") for w in SMEM_WIDTHS}
            else:
                state["k"] = dict(kernels)
            state["grid"] = device_info().sm_count * blocks_per_sm
            state["out"] = cupy.zeros(state["grid"] * block, dtype=cupy.float32)
        k, grid, out = state["k"][width], state["grid"], state["out"]
        res = benchmark(lambda: k(grid, block, out, stride, reps), budget_s=0.5, min_samples=5, flush_l2=False,
                        name="smem_stride")
        return res.gbps(grid * block * reps * width)
    return run


def smem_stride_sweep(record: bool | None = None, kernels=None):
    """The lesson's widget: shared-memory GB/s against stride, a slider for the element width."""
    from ..widgets import sweep
    return sweep(smem_runner(kernels), {"stride": SMEM_STRIDES, "width": SMEM_WIDTHS}, metric="shared-memory GB/s",
                 name="05_bank_conflicts_smem_stride", title="s[(lane*stride + r) % size]", record=record)


def smem_sizes() -> dict:
    """Element width (bytes) -> elements of the shared array that width's kernel reads, from the cell."""
    src = lesson_cell(CHAPTER, "smem_stride_4").source
    return {int(w): int(n) for w, n in re.findall(r"smem_stride_(\d+)\(.*?strided_reads<\w+, (\d+)>", src)}


def conflict_factor(stride: int, width: int, size: int | None = None) -> float:
    """Wavefronts of the cell's access at ``stride`` over those of a conflict-free access of that width."""
    size = size or smem_sizes()[width]
    a = bank_access(lambda lane: lane * stride % size, width)
    return a.wavefronts / a.ideal_wavefronts


def smem_peak_gbps(sm_count: int | None = None, clock_mhz: float | None = None) -> float:
    """The banks' peak, GB/s: 32 banks x 4 bytes = 128 bytes per clock per SM, times SMs and clock."""
    sms, mhz = _sms_clock(sm_count, clock_mhz)
    return 128 * sms * mhz / 1e3


def _model(width: int, peak: float):
    # issue #22: the banks cap the rate at peak / factor; a conflict-free loop is capped by its own stride-1
    # figure (instruction issue), so the prediction is the smaller of the two, not stride-1 / factor
    sizes = smem_sizes()
    return lambda s, base: min(base, peak / conflict_factor(s, width, sizes[width]))


def bank_model_table(sw, peak: float | None = None) -> list:
    """Every conflicted point of the sweep (live or recorded) against min(stride-1 figure, peak / factor),
    and against the stride-1 figure / factor; [] when there is nothing measured or recorded."""
    peak = peak or smem_peak_gbps()
    out = []
    for width in SMEM_WIDTHS:
        base = sw.measure(stride=1, width=width)
        for s in SMEM_STRIDES:
            got, f = sw.measure(stride=s, width=width), conflict_factor(s, width)
            if base and got and f > 1:
                model = _model(width, peak)(s, base)
                out.append({"bytes": width, "stride": s, "factor": f, "GB/s": round(got), "stride-1 / factor": round(base / f),
                            "min(stride-1, peak / factor)": round(model), "measured / model": round(got / model, 3)})
    return out


def plot_smem_curve(sw, width: int = 4, ax=None, peak: float | None = None):
    """Measured (or recorded) shared-memory GB/s against stride, with the model min(stride-1 figure,
    peak / conflict factor)."""
    peak = peak or smem_peak_gbps()
    return sw.plot_against_model(
        _model(width, peak), fixed={"width": width}, measured_label=f"measured, {width}-byte elements",
        model_label=f"bank model: min(stride-1 figure, {peak / 1e3:.1f} TB/s / conflict factor)",
        xlabel="stride (elements between neighbouring lanes)", ylabel="GB/s delivered by shared memory (all SMs)",
        title="strided shared-memory reads", ax=ax)


# --- the transpose ---------------------------------------------------------------------------

TRANSPOSE_ABOUT = {"transpose_naive": "coalesced reads, 32-sector writes",
                   "transpose_smem": "tile[32][32]: 32-way conflicts on the column reads",
                   "transpose_pad": "tile[32][33]", "transpose_swizzle": "tile[32][32], column c ^ r"}
"""What each of the lesson's transposes changes, for the table's last column."""


def transpose_launch(rows: int, cols: int, per_thread: int = 1) -> tuple:
    """(grid, block): a block per 32 x 32 tile, ``per_thread`` elements a thread. The lesson's transposes move
    one (block (32, 32)); ``per_thread=4`` is the graded exercise's (32, 8), the step left to the student."""
    if per_thread < 1 or 32 % per_thread:
        raise ValueError(f"per_thread must divide the tile's 32 rows (1, 2, 4, ... 32); got {per_thread}")
    return (-(-cols // 32), -(-rows // 32)), (32, 32 // per_thread)


def transpose_tile_figure(kernel: str = "transpose_pad", per_thread: int = 1):
    """The tile transpose drawn with ``kernel``'s own shared tile (read from the notebook's cell) and
    `transpose_launch`'s block for ``per_thread``; returns (figure, banks of the tile column a warp reads back)."""
    from ..diagrams import tile_transpose
    body = lesson_cell(CHAPTER, kernel).source.split(f" {kernel}(", 1)[1].split('extern "C"', 1)[0]
    rows, words = map(int, re.search(r"__shared__\s+float\s+tile\[(\d+)\]\[(\d+)\]", body).groups())
    block = transpose_launch(1, 1, per_thread)[1]
    return tile_transpose((rows, rows), words, block,
                          title=f"{kernel}: a {rows} x {rows} tile through float tile[{rows}][{words}], block {block}")


def transpose_table(kernels, rows: int = 8192, cols: int = 8192, check_shape=(1000, 1037), **compare_kw):
    """Check each transpose exactly at an odd shape, then time them on ``rows x cols`` against a copy.

    ``kernels`` are compiled transposes ``k(grid, block, in, out, rows, cols)`` launched as
    `transpose_launch` says (the notebook's ``transpose_naive``, ``transpose_smem``...), in table order.
    The anchor is a device-to-device copy of the same bytes (CuPy), so each row reads "x copy". GB/s
    count one read and one write of every element. Returns the `course.variants.Comparison`; raises
    `course.CheckError` naming the first wrong transpose, before anything is timed.
    """
    import cupy
    from ..variants import Variant, compare
    rng = cupy.random.default_rng(5)
    small = rng.standard_normal(check_shape, dtype=cupy.float32)
    inp = rng.standard_normal((rows, cols), dtype=cupy.float32)
    out = cupy.empty((cols, rows), dtype=cupy.float32)
    same_shape = out.reshape(rows, cols)   # the copy writes the same bytes, in order

    def variant(k):
        def check_at_odd_shape():
            got = cupy.full(small.shape[::-1], cupy.nan, dtype=cupy.float32)
            k(*transpose_launch(*small.shape), small, got, *small.shape)
            return check(got, small.T, rtol=0, atol=0, name=f"{k.name} at {small.shape[0]} x {small.shape[1]}")
        grid, block = transpose_launch(rows, cols)
        return Variant(k.name, lambda: k(grid, block, inp, out, rows, cols), check_at_odd_shape,
                       about=TRANSPOSE_ABOUT.get(k.name, ""))
    copy = Variant("copy", lambda: cupy.copyto(same_shape, inp), about="cupy.copyto of the same bytes")
    return compare([variant(k) for k in kernels], anchors=[copy], work=8 * rows * cols, unit="GB/s",
                   title=f"transposes of {rows} x {cols} floats", **compare_kw)


# --- Nsight Compute's view ---------------------------------------------------------------------

_M_LD = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
_M_ST = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
_M_WF_LD = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"


H100_SXM = {"sm_count": 132, "clock_mhz": 1980}
"""What `conflict_bound_gbps` assumes without a GPU: an H100 SXM at its maximum SM clock."""


def _sms_clock(sm_count, clock_mhz) -> tuple:
    """(SMs, maximum SM clock in MHz): the arguments, else this GPU's, else `H100_SXM`."""
    if sm_count is None or clock_mhz is None:
        sms, mhz = H100_SXM["sm_count"], H100_SXM["clock_mhz"]
        if gpu_available():
            sms = device_info().sm_count
            clk = sm_clock_mhz()
            mhz = clk[1] if clk else mhz
        sm_count, clock_mhz = sm_count or sms, clock_mhz or mhz
    return sm_count, clock_mhz


def conflict_bound_gbps(degree: int, sm_count: int | None = None, clock_mhz: float | None = None) -> float:
    """Upper bound (GB/s, read + written) a tiled transpose gets from the shared-memory pipe alone.

    One 32 x 32 float tile costs 32 warp stores (one wavefront each) and 32 warp loads of ``degree``
    wavefronts each; the SM's shared memory retires one wavefront per cycle, and the tile moves
    8 KiB of DRAM traffic. Defaults: this GPU's SM count and maximum SM clock, or `H100_SXM`.

    Examples
    --------
    >>> round(conflict_bound_gbps(32, 132, 1980))   # tile[32][32]
    2028
    >>> conflict_bound_gbps(1, 132, 1980) > 30_000    # padded: shared memory is no limit
    True
    """
    sm_count, clock_mhz = _sms_clock(sm_count, clock_mhz)
    cycles_per_tile = 32 * 1 + 32 * degree
    return sm_count * clock_mhz * 1e6 / cycles_per_tile * 8192 / 1e9


def predicted_transpose_conflicts(rows: int, cols: int) -> dict:
    """Bank-model conflicts (extra wavefronts) of the three tiled transposes on a full-tile matrix.

    Each warp load of a tile column costs ``degree`` wavefronts where 1 would do; stores along tile
    rows are conflict-free in all three (the swizzle permutes them, the padding shifts them).
    """
    if rows % 32 or cols % 32:
        raise ValueError("the prediction assumes full 32 x 32 tiles: rows and cols multiples of 32")
    loads = rows * cols // 32  # warp-wide loads from the tile, one per 32 elements
    out = {}
    for name, col in (("transpose_smem", lambda i: i * 32 + _TY), ("transpose_pad", lambda i: i * 33 + _TY),
                      ("transpose_swizzle", lambda i: i * 32 + (_TY ^ i))):
        a = bank_access(col)
        out[name] = {"ld conflicts": loads * (a.wavefronts - a.ideal_wavefronts), "st conflicts": 0}
    return out


def ncu_bank_conflicts(rows: int = 1024, cols: int = 1024) -> list:
    """Model vs Nsight Compute bank conflicts for the tiled transposes; prints and returns the rows.

    Prints one sentence instead when there is no GPU, no ncu, or no permission to read counters.
    """
    pred = predicted_transpose_conflicts(rows, cols)
    rows_out = [{"kernel": k, "model ld conflicts": v["ld conflicts"], "ncu ld conflicts": None,
                 "ncu st conflicts": None} for k, v in pred.items()]
    if not gpu_available():
        print(no_gpu_message("Reading Nsight Compute's bank-conflict counters"))
        print_table(rows_out)
        return rows_out
    tiled = lesson_cell(CHAPTER, "transpose_smem")   # the notebook's cell, as last run in this session
    script = (
        "import cupy, course\n"
        f"m = course.compile({tiled.source!r}, options={tiled.options!r})\n"
        f"x = cupy.random.default_rng(1).standard_normal(({rows}, {cols}), dtype=cupy.float32)\n"
        f"y = cupy.empty(({cols}, {rows}), dtype=cupy.float32)\n"
        "for name in ('transpose_smem', 'transpose_pad', 'transpose_swizzle'):\n"
        f"    m.kernel(name)(*{transpose_launch(rows, cols)!r}, x, y, {rows}, {cols})\n"
        "cupy.cuda.Device().synchronize()\n")
    res: NcuResult = run_ncu(script, [_M_LD, _M_ST, _M_WF_LD], kernel="regex:transpose_", launches=3)
    if not res:
        print(res.reason)
    else:
        for r in rows_out:
            got = res.by_kernel.get(r["kernel"], {})
            r["ncu ld conflicts"] = got.get(_M_LD)
            r["ncu st conflicts"] = got.get(_M_ST)
    print_table(rows_out, floatfmt="{:.0f}")
    return rows_out
