"""Chapter 06 (building blocks): map, reduce, scan and histogram, each measured against CuPy.

The kernels live only in the notebook's `%%cuda` cells; each table here takes the compiled kernels, checks
every variant exactly, then times them all with `course.variants.compare` against `cupy.sum`, `cupy.cumsum`
or `cupy.bincount`. The benchmark suite builds the same tables, so it records the numbers the lesson prints.
The CPU helpers count the active lanes and warps of the reduction trees, draw the steps of a scan, and show
the sweeps (measured, or as recorded) against the one-atomic-per-block limit. The single-pass scan's model
is `ch06_lookback`.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "CHAPTER", "CHECK_SIZES", "SCAN_TILE", "REDUCE_VARIANTS", "REDUCE_KERNELS", "SCAN_KERNELS", "HIST_KERNELS",
    "lesson_kernels", "exact_inputs", "check_exact", "active_lanes", "plot_active_lanes", "reduction_grid",
    "reduce_launch", "check_reduction", "reference_variant", "reference_launch", "reduction_table", "reduce_sweep",
    "reduce_rates", "atomic_ns", "atomic_fit", "plot_reduce_sweep", "sweep_table",
    "hillis_steele_steps", "plot_scan_steps", "scan_full", "scan_table", "hist_inputs", "hist_launch",
    "histogram_table", "hist_sweep",
]

CHAPTER = "06_building_blocks"
CHECK_SIZES = (1, 33, 4097, 1_000_003, (1 << 22) + 5)  # no multiple of a block, float4 or tile; one beyond L2
SCAN_TILE = 4096  # elements per block of the reference scan: 256 threads x TILE_ITEMS 16, as the grader launches it


def lesson_kernels(names, given=None) -> dict:
    """name -> compiled `course.Kernel` for each of ``names``: from ``given`` (Kernels, or a dict name -> Kernel:
    what the notebook's `%%cuda` cells just compiled), else compiled from the lesson cell that defines it
    (`course.lesson_cell`: in a notebook session, the cell as it last ran, edits included)."""
    import course
    have = dict(given) if isinstance(given, dict) else {k.name: k for k in given or ()}
    return {name: have[name] if name in have else course.lesson_cell(CHAPTER, name).kernel(name) for name in names}


def exact_inputs(n: int, seed: int = 0, spread: int = 4) -> tuple:
    """(float32 values that are small integers, their exact sum as an int).

    Every partial sum of such values is an integer far below 2**24, so float32 adds them without
    rounding in any order: a reduction (or scan) is then right only if it is exactly right, which
    catches a single lost element where a tolerance would not.
    """
    x = np.random.default_rng(seed).integers(-spread, spread + 1, size=n).astype(np.float32)
    return x, int(x.astype(np.int64).sum())


def check_exact(kind: str, run, label: str, sizes=CHECK_SIZES) -> bool:
    """True when ``run(input, output)`` is exactly right at every size; else `course.CheckError` naming the size
    and the first wrong value. ``kind`` is "sum" (output: one float, zeroed), "scan" (n floats) or "hist"
    (256 counters, zeroed); the inputs are `exact_inputs` or `hist_inputs`, so only the exact answer passes."""
    import cupy
    import course
    for j, n in enumerate(sizes):
        if kind == "hist":
            xh = hist_inputs(n, seed=300 + j)
            want, out = np.bincount(xh, minlength=256), cupy.zeros(256, dtype=cupy.uint32)
        else:
            xh, total = exact_inputs(n, seed=100 + j)
            want = np.float32([total]) if kind == "sum" else np.cumsum(xh.astype(np.int64)).astype(np.float32)
            out = cupy.zeros(1, dtype=cupy.float32) if kind == "sum" else cupy.full(n, cupy.nan, dtype=cupy.float32)
        run(cupy.asarray(xh), out)
        if not np.array_equal(got := out.get(), want):
            i = int(np.flatnonzero(got != want)[0])
            what = {"sum": "the sum", "scan": f"y[{i}]", "hist": f"bin {i}"}[kind]
            raise course.CheckError(f"{label} is wrong at n={n}: {what} is {got[i].item()!r}, expected "
                                    f"{want[i].item()!r} (exact inputs: only the exact answer is right)")
    return True


# --- reduction -------------------------------------------------------------------------------

# Variant N is the Nth kernel: (elements each thread loads over a grid sized to n, or 0 for one wave of a
# grid-stride grid; whether it takes blockDim.x floats of dynamic shared memory; its line in the table).
REDUCE_VARIANTS = {
    "reduce1_interleaved": (1, True, "interleaved addressing: tid % (2s) keeps every warp busy with a few lanes"),
    "reduce2_sequential": (1, True, "sequential addressing: threads 0..s-1 add, idle warps retire"),
    "reduce3_first_add": (2, True, "first add during load: two elements per thread, half the blocks"),
    "reduce4_shuffle": (2, False, "warp shuffles: 32 values added in registers, 32 totals in shared memory"),
    "reduce5_grid_stride": (0, False, "grid-stride float4 loop, one atomicAdd per block of a GPU-sized grid"),
    "reduce6_partials": (0, False, "two stages: partials per block, then one block adds them (no atomics)"),
}
REDUCE_KERNELS = (*REDUCE_VARIANTS, "reduce6_final")


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
    if variant not in ("interleaved", "sequential"):
        raise ValueError(f"`variant` should be 'interleaved' or 'sequential'; got {variant!r}")
    tids, inter = np.arange(block), variant == "interleaved"
    steps = [1 << k for k in range(block.bit_length() - 1)]
    acts = [(s, tids[tids % (2 * s) == 0] if inter else tids[tids < s]) for s in (steps if inter else steps[::-1])]
    return [(s, int(a.size), int(np.unique(a // 32).size)) for s, a in acts]


def plot_active_lanes(block: int = 256, ax=None):
    """Warps issued per tree step, interleaved vs sequential addressing, against the lanes doing work."""
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(9, 3.5), layout="constrained")
    for variant, marker in (("interleaved", "o"), ("sequential", "s")):
        steps = active_lanes(block, variant)
        ax.plot(range(1, len(steps) + 1), [w for _, _, w in steps], marker=marker, label=f"{variant}: warps issuing")
    steps = active_lanes(block, "sequential")
    ax.plot(range(1, len(steps) + 1), [a / 32 for _, a, _ in steps], ls="--", color="gray",
            label="threads adding / 32 (the least warps that could do it)")
    ax.set(xlabel="tree step", ylabel="warps per block")
    ax.set_title(f"A block of {block}: warps that must issue at each step of the tree", fontsize=10)
    ax.grid(True, alpha=0.3)
    _legend_outside(ax)
    return ax


def _legend_outside(ax) -> None:
    """The legend right of the axes, where no line can run under it (issue #16: it covered a curve)."""
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def reduction_grid(block: int, kernel=None, cap: int = 1024, shared_mem: int = 0) -> int:
    """Blocks of a grid-stride kernel: as many as fit on the GPU at once (one wave), at most ``cap``. The blocks
    per SM are ``kernel``'s occupancy (its registers and shared memory decide it), else 2048 threads' worth."""
    import course
    per_sm = kernel.occupancy(block, shared_mem) if kernel is not None else max(1, 2048 // block)
    return max(1, min(cap, course.device_info().sm_count * max(1, per_sm)))


def reduce_launch(kernels: dict, name: str, x, out, block: int = 256, partials=None) -> None:
    """Launch reduction variant ``name`` (a key of `REDUCE_VARIANTS`) on CuPy array ``x`` into the one-element
    ``out``, as the lesson does. The atomic variants add into ``out``: zero it first when its value matters."""
    if block < 32 or block > 1024 or block & (block - 1):
        raise ValueError(f"the reduction variants need a power-of-two block from 32 to 1024; got {block}")
    per_thread, tree, _ = REDUCE_VARIANTS[name]
    k, n = kernels[name], int(x.size)
    grid = max(1, -(-n // (block * per_thread))) if per_thread else reduction_grid(block, k)
    if name != "reduce6_partials":
        k(grid, block, x, out, n, shared_mem=4 * block if tree else 0)
        return
    if partials is None or partials.size < grid:
        import cupy
        partials = cupy.empty(grid, dtype=cupy.float32)
    k(grid, block, x, partials, n)
    kernels["reduce6_final"](1, 1024, partials, out, grid)


def check_reduction(kernels: dict, name: str, block: int = 256, sizes=CHECK_SIZES) -> bool:
    """`check_exact` of reduction variant ``name`` launched with ``block`` threads."""
    return check_exact("sum", lambda x, out: reduce_launch(kernels, name, x, out, block), f"{name} (block {block})",
                       sizes)


def reference_launch(name: str, n: int, kernel=None) -> tuple:
    """(grid, block) of the graded reference ``name`` for ``n`` elements: the grader's launch
    (autograder/specs/06_building_blocks.py); the sum's grid is also capped at one wave of ``kernel``."""
    import course
    if name == "histogram256":
        return max(1, min(-(-n // (16 * 512)), 512)), 512
    if name == "scan_inclusive":
        return -(-n // SCAN_TILE), 256
    if name == "reduce_sum":
        return min(-(-n // (16 * 256)), 1024, course.device_info().sm_count * kernel.occupancy(256)), 256
    raise ValueError(f"`name` should be reduce_sum, scan_inclusive or histogram256; got {name!r}")


def reference_variant(name: str, row: str, kind: str, *arrays, about: str = "") -> list:
    """[the graded reference ``name`` as a `course.variants.Variant` on ``arrays`` (input, output), checked
    like ``kind`` (see `check_exact`)], or [] where the solutions are not shipped (a student's copy)."""
    import course
    from course.variants import Variant
    src = course.solution_source(CHAPTER, name)
    if src is None:
        return []
    k = course.compile(src, name=f"{name}.cu").kernel(name)

    def run(a, b):
        k(*reference_launch(name, a.size, k), a, b, a.size)
    return [Variant(row, lambda: run(*arrays), check=lambda: check_exact(kind, run, name), about=about)]


def reduction_table(kernels=None, n: int = 1 << 28, block: int = 256, verbose: bool = True):
    """Check every variant (and the exercise's reference, where shipped), then time each against cupy.sum on
    ``n`` floats: a `course.variants.Comparison`, GB/s counting the 4 bytes read per element."""
    import cupy
    from course.variants import Variant, compare
    ks = lesson_kernels(REDUCE_KERNELS, kernels)
    x = cupy.random.default_rng(3).random(n, dtype=cupy.float32)
    out = cupy.zeros(1, dtype=cupy.float32)
    partials = cupy.empty(1024, dtype=cupy.float32)
    # the atomic variants keep adding into `out` while timed: its value was checked before
    variants = [Variant(f"{i}: {name}", lambda name=name: reduce_launch(ks, name, x, out, block, partials),
                        check=lambda name=name: check_reduction(ks, name, block), about=about)
                for i, (name, (*_, about)) in enumerate(REDUCE_VARIANTS.items(), 1)]
    variants += reference_variant("reduce_sum", "reference reduce_sum", "sum", x, out,
                                  about="the exercise: two stages in one launch, the last block adds the partials")
    return compare(variants, anchors=[Variant("cupy.sum", lambda: x.sum(out=out[0]), about="CUB")], work=4 * n,
                   title=f"sum of {n:,} floats, block {block} (GB/s = 4 bytes read per element)", verbose=verbose)


def reduce_sweep(kernels=None, record: bool | None = None, n: int = 1 << 26):
    """The lesson's widget: GB/s against block size, a slider for the variant (each point checked first)."""
    from course.widgets import sweep
    state = {}

    def run(block, variant):
        import cupy
        import course
        if not state:
            f32 = cupy.float32
            state.update(ks=lesson_kernels(REDUCE_KERNELS, kernels), x=cupy.random.default_rng(4).random(n, dtype=f32),
                         out=cupy.zeros(1, dtype=f32), partials=cupy.empty(1024, dtype=f32))
        name, (ks, x, out, partials) = list(REDUCE_VARIANTS)[int(variant) - 1], state.values()
        check_reduction(ks, name, block, sizes=(1_000_003,))
        return course.benchmark(lambda: reduce_launch(ks, name, x, out, block, partials), name=name, budget_s=0.5,
                                min_samples=5).gbps(4 * n)
    return sweep(run, {"block": [32, 64, 128, 256, 512, 1024], "variant": [1, 2, 3, 4, 5, 6]},
                 metric="GB/s (4 bytes read per element)", name="06_building_blocks_reduce", title="sum of 2^26 floats",
                 logx=True, record=record)


def reduce_rates(sweep=None) -> dict:
    """{(block, variant): GB/s} of `reduce_sweep` (measured on a GPU, else as recorded; None where missing)."""
    sweep = sweep if sweep is not None else reduce_sweep(record=False)
    return {(b, v): r for v in sweep.params["variant"] for b, r in sweep.curve(progress=False, variant=v)}


def atomic_ns(rates: dict) -> dict:
    """{(block, variant): ns per block} of the variants that end every block with one atomicAdd on ``*out``
    (1-4): the block's bytes over the rate. Where it stays put as blocks grow, the atomics set the pace."""
    per = {i: k for i, (k, *_r) in enumerate(REDUCE_VARIANTS.values(), 1) if k}
    return {(b, v): 4 * b * per[v] / r for (b, v), r in rates.items() if v in per and r}


def atomic_fit(rates: dict) -> float:
    """ns per atomic: the median of `atomic_ns` at blocks of 32 to 128, where variants 1-4 all agree with
    it (no tree is the limit yet)."""
    return float(np.median([ns for (b, _v), ns in atomic_ns(rates).items() if b <= 128]))


def plot_reduce_sweep(sweep=None, ax=None):
    """GB/s against block size for every variant, with what one atomic per block allows (per block of
    elements for 1-2, per two for 3-4) at `atomic_fit`'s ns per atomic. None, with a sentence, if no data."""
    import matplotlib.pyplot as plt
    sweep = sweep if sweep is not None else reduce_sweep(record=False)
    rates = reduce_rates(sweep)
    if not any(rates.values()):
        print("[no GPU] No recording of the reduction sweep to draw; on a GPU this cell measures it.")
        return None
    if ax is None:
        _fig, ax = plt.subplots(figsize=(10, 4.5), layout="constrained")
    blocks, ns = sweep.params["block"], atomic_fit(rates)
    for v, name in enumerate(REDUCE_VARIANTS, 1):
        pts = [(b, rates[b, v]) for b in blocks if rates.get((b, v))]
        ax.plot([b for b, _ in pts], [r for _, r in pts], marker="o", ms=4, label=f"{v}: {name}")
    for k, ls in ((1, ":"), (2, "--")):
        ax.plot(blocks, [4 * b * k / ns for b in blocks], ls=ls, color="gray",
                label=f"one atomic per {'2 x ' if k == 2 else ''}block elements, {ns:.2f} ns each")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(blocks, [str(b) for b in blocks])
    ax.set(xlabel="threads per block", ylabel=sweep.metric)
    where = "measured here" if sweep.live else f"recorded on {sweep.recorded_on}"
    ax.set_title(f"Sum of 2^26 floats by block size ({where})", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    _legend_outside(ax)
    return ax


def sweep_table(sweep, ns: bool = False) -> None:
    """Print every point of a sweep with one slider (x values down, slider values across); with ``ns``, the
    reduction sweep's ns per block of variants 1-4 (`atomic_ns`) instead of its GB/s."""
    import course
    (slider, values), = [(k, v) for k, v in sweep.params.items() if k != sweep.x]
    got = atomic_ns(reduce_rates(sweep)) if ns else {(x, v): r for v in values
                                                    for x, r in sweep.curve(progress=False, **{slider: v})}
    values = sorted({v for _x, v in got}) if ns else values
    print(("ns per block atomic" if ns else sweep.metric) + (" (measured here)" if sweep.live else
                                                             f" (recorded on {sweep.recorded_on})"))
    course.print_table([{sweep.x: x, **{f"{slider} {v}": got.get((x, v)) for v in values}}
                        for x in sweep.params[sweep.x]], floatfmt="{:.2f}" if ns else None)


# --- scan ------------------------------------------------------------------------------------

SCAN_KERNELS = ("scan_tile_sums", "scan_carries", "scan_tiles")


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
        a = a + np.concatenate([np.zeros(d, dtype=a.dtype), a[:-d]])
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
    ax.set(xlim=(-1.6, n), ylim=(len(steps) * 1.5, -0.3))
    ax.axis("off")
    ax.set_title(f"Hillis-Steele: {len(steps) - 1} steps, {sum(n - (1 << k) for k in range(len(steps) - 1))} "
                 f"adds (a serial scan needs {n - 1})", fontsize=10)
    return ax


def scan_full(kernels: dict, x, y=None, block: int = 256, sums=None):
    """Inclusive scan of the CuPy float32 array ``x`` with the lesson's three launches (`SCAN_KERNELS`)."""
    import cupy
    n = int(x.size)
    y = cupy.empty_like(x) if y is None else y
    tiles = max(1, -(-n // (4 * block)))
    if sums is None or sums.size < tiles:
        sums = cupy.empty(tiles, dtype=cupy.float32)
    kernels["scan_tile_sums"](tiles, block, x, sums, n)
    kernels["scan_carries"](1, 1024, sums, tiles)
    kernels["scan_tiles"](tiles, block, x, sums, y, n)
    return y


def scan_table(kernels=None, n: int = 1 << 26, verbose: bool = True):
    """Check, then time the three-launch scan and (where shipped) the single-pass reference against
    cupy.cumsum on ``n`` floats; GB/s counts 8 bytes per element (one read, one write) for all."""
    import cupy
    from course.variants import Variant, compare
    ks = lesson_kernels(SCAN_KERNELS, kernels)
    x = cupy.random.default_rng(6).random(n, dtype=cupy.float32)
    y = cupy.empty_like(x)
    sums = cupy.empty(-(-n // 1024), dtype=cupy.float32)
    variants = [Variant("three launches (reduce, then scan)", lambda: scan_full(ks, x, y, 256, sums),
                        check=lambda: check_exact("scan", lambda a, b: scan_full(ks, a, b), "the three-launch scan"),
                        about="reads every element twice: moves 12 bytes per element")]
    variants += reference_variant("scan_inclusive", "single pass (decoupled look-back)", "scan", x, y,
                                  about="the exercise: reads once, writes once")
    return compare(variants, anchors=[Variant("cupy.cumsum", lambda: cupy.cumsum(x, out=y))], work=8 * n,
                   title=f"inclusive scan of {n:,} floats (GB/s = 8 bytes per element)", verbose=verbose)


# --- histogram -------------------------------------------------------------------------------

HIST_KERNELS = ("hist_global", "hist_shared")


def hist_inputs(n: int, distinct: int = 256, seed: int = 0) -> np.ndarray:
    """``n`` int32 values spread evenly over ``distinct`` of the 256 bins (fewer bins: more contention)."""
    if not 1 <= distinct <= 256:
        raise ValueError(f"`distinct` should be 1..256; got {distinct}")
    rng = np.random.default_rng(seed)
    bins = np.linspace(0, 255, distinct).astype(np.int32) if distinct > 1 else np.array([7], dtype=np.int32)
    return bins[rng.integers(0, distinct, size=n)]


def hist_launch(kernel, data, hist, block: int = 256) -> None:
    """Launch a lesson histogram ``kernel`` over ``data`` into ``hist`` (zero it first): one wave of blocks,
    never more than one block per ``block`` elements."""
    n = int(data.size)
    kernel(max(1, min(reduction_grid(block, kernel, cap=4096), -(-n // block))), block, data, hist, n)


def histogram_table(kernels=None, n: int = 1 << 26, verbose: bool = True):
    """Check, then time the global-atomic and the privatized histogram (and the graded reference where
    shipped) against cupy.bincount on ``n`` uniform ints; GB/s counts the 4 bytes read per element."""
    import cupy
    from course.variants import Variant, compare
    ks = lesson_kernels(HIST_KERNELS, kernels)
    d = cupy.asarray(hist_inputs(n, seed=9))
    h = cupy.zeros(256, dtype=cupy.uint32)
    # the timed runs keep counting into `h`: the counts were checked before
    variants = [Variant(name, lambda k=ks[kn]: hist_launch(k, d, h),
                        check=lambda name=name, k=ks[kn]: check_exact("hist", lambda a, b: hist_launch(k, a, b), name))
                for name, kn in (("global atomics", "hist_global"), ("shared-memory privatized", "hist_shared"))]
    variants += reference_variant("histogram256", "reference (exercise)", "hist", d, h, about="the exercise")
    return compare(variants, anchors=[Variant("cupy.bincount", lambda: cupy.bincount(d, minlength=256))], work=4 * n,
                   title=f"256-bin histogram of {n:,} uniform ints (GB/s = 4 bytes read per element)", verbose=verbose)


def hist_sweep(kernels=None, record: bool | None = None, n: int = 1 << 25):
    """The lesson's widget: GB/s against the number of distinct values, a slider for the kernel."""
    from course.widgets import sweep
    state = {}

    def run(distinct, kernel):
        import cupy
        import course
        if not state:
            state.update(ks=lesson_kernels(HIST_KERNELS, kernels), h=cupy.zeros(256, dtype=cupy.uint32))
        if state.get("distinct") != distinct:
            state.update(distinct=distinct, d=cupy.asarray(hist_inputs(n, distinct, seed=distinct)))
        k = state["ks"][{"global": "hist_global", "shared": "hist_shared"}[kernel]]
        return course.benchmark(lambda: hist_launch(k, state["d"], state["h"]), name=k.name, budget_s=0.5,
                                min_samples=5).gbps(4 * n)
    return sweep(run, {"distinct": [1, 2, 4, 8, 16, 32, 64, 128, 256], "kernel": ["global", "shared"]},
                 metric="GB/s (4 bytes read per element)", name="06_building_blocks_histogram",
                 title="256-bin histogram of 2^25 ints", logx=True, record=record)
