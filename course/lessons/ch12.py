"""Chapter 12 (cooperative groups and thread-block clusters): tiles, a grid-wide barrier, clusters and DSMEM.

The kernels live only in the notebook's `%%cuda` cells. This module holds the arithmetic the text rests on
(which block of a cluster owns a bin, how many blocks a given shared-memory footprint lets an SM hold),
inputs with hot bins, the launches, exact checks against NumPy, and the tables and sweeps that time the
lesson's kernels with `course.variants.compare` against `cupy.sum` / `cupy.bincount`. The benchmark rows
build the same tables. Chapter 06's kernels, where compared, are read from its cells with `course.lesson_cell`.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "CHAPTER", "BINS", "CLUSTER_SIZES", "H100", "TILE_KERNELS", "SUM_KERNELS", "HIST_KERNELS", "lesson_kernels",
    "shuffle_counts", "check_tiles", "exact_inputs", "grid_sum", "check_sum", "sync_sweep", "owner",
    "slice_bytes", "blocks_per_sm", "cluster_table", "hist_inputs", "cluster_kernel", "hist_grid", "hist_launch",
    "check_hist", "histogram_table", "best_private", "BINS_LARGE", "RANGE", "large_histogram_table",
    "best_non_cluster", "hist_sweep", "reduce_cluster_launch", "reduction_table",
]

CHAPTER = "12_clusters"
BINS = 16384
BINS_LARGE = 65536                     # 256 KiB of counters: more than one block's 227 KiB
RANGE = 16384                          # the bins of one pass of the privatized-in-passes histogram (64 KiB)
CLUSTER_SIZES = (1, 2, 4, 8)           # 8 is the largest portable cluster
# the H100 SXM's limits (cudaDeviceProp): shared memory per SM and its per-block reserve, threads, blocks
H100 = {"smem_per_sm": 233_472, "smem_per_block_optin": 232_448, "reserved_per_block": 1024,
        "max_threads_per_sm": 2048, "max_blocks_per_sm": 32, "sm_count": 132}
TILE_KERNELS = ("tile_sum_cg32", "tile_sum_shfl32", "tile_sum_cg16", "tile_scan_cg32", "tile_scan_shfl32")
SUM_KERNELS = ("sum_partials", "sum_final", "sum_grid_sync")
HIST_KERNELS = ("hist_global", "hist_private")
CHECK_SIZES = (1, 33, 4097, 1_000_003)


def lesson_kernels(names, given=None) -> dict:
    """name -> `course.Kernel`: from ``given`` (Kernels the notebook's cells compiled, or a dict), else compiled
    from the lesson cell that defines it (in a notebook session, the cell as it last ran)."""
    import course
    have = dict(given) if isinstance(given, dict) else {k.name: k for k in given or ()}
    return {n: have[n] if n in have else course.lesson_cell(CHAPTER, n).kernel(n) for n in names}


# --- 1. tiles ----------------------------------------------------------------------------------

def shuffle_counts(arch: str = "sm_90") -> dict:
    """{kernel: {shuffle opcode with its mode: count}} of the tile cell compiled for ``arch`` (no GPU needed).
    Raises FileNotFoundError or RuntimeError where nvdisasm is missing."""
    import course
    prog = course.lesson_cell(CHAPTER, "tile_sum_cg32").compile_for_arch(arch)
    return {k: {op: n for op, n in sorted(c.items()) if op.startswith("SHFL")}
            for k, c in course.sass_opcodes(prog.sass(), modifiers=True).items()}


def check_tiles(kernels=None, n: int = 100_003, block: int = 256) -> list:
    """Run every tile kernel on ``n`` small integers and compare with NumPy; lines saying what matched.
    Raises `course.CheckError` naming the first kernel that is wrong."""
    import cupy
    import course
    ks = lesson_kernels(TILE_KERNELS, kernels)
    xh, _ = exact_inputs(n, seed=12)
    pad = np.concatenate([xh, np.zeros(-n % 32, np.float32)])
    x, lines = cupy.asarray(xh), []
    for name, k in ks.items():
        width = 16 if name.endswith("16") else 32
        if "scan" in name:
            want, out = pad.reshape(-1, 32).cumsum(axis=1).ravel()[:n], cupy.full(n, cupy.nan, dtype=cupy.float32)
        else:
            want = pad.reshape(-1, width).sum(axis=1)[:-(-n // width)]
            out = cupy.full(want.size, cupy.nan, dtype=cupy.float32)
        k(course.grid_for(n, block), block, x, out, n)
        course.assert_close(out, want, rtol=0, atol=0, name=f"{name}'s output")
        lines.append(f"{name:17s} exact on {n:,} values ({want.size:,} {'prefixes' if 'scan' in name else 'sums'})")
    return lines


# --- 2. grid-wide barrier ----------------------------------------------------------------------

def exact_inputs(n: int, seed: int = 0) -> tuple:
    """(float32 small integers, their exact sum): every float32 partial sum is exact, in any order."""
    x = np.random.default_rng(seed).integers(-4, 5, size=n).astype(np.float32)
    return x, int(x.astype(np.int64).sum())


def grid_sum(kernels: dict, how: str, x, out, partials, block: int = 256) -> None:
    """Sum ``x`` into ``out[0]`` with one wave of blocks: "grid sync" (one cooperative launch, a grid-wide barrier
    between the stages) or "two launches" (the same two stages as two kernels). ``partials`` holds a float per
    block of the wave."""
    n = int(x.size)
    if ("wave", block) not in kernels:   # asked once: a driver call inside every timed launch would be timed too
        kernels["wave", block] = kernels["sum_grid_sync"].max_cooperative_grid(block)
    grid = min(kernels["wave", block], int(partials.size))
    if how == "grid sync":
        kernels["sum_grid_sync"](grid, block, x, partials, out, n, cooperative=True)
    elif how == "two launches":
        kernels["sum_partials"](grid, block, x, partials, n)
        kernels["sum_final"](1, block, partials, out, grid)
    else:
        raise ValueError(f"`how` should be 'grid sync' or 'two launches'; got {how!r}")


def check_sum(run, label: str, sizes=CHECK_SIZES) -> bool:
    """True when ``run(x, out)`` writes the exact sum into ``out[0]`` (zeroed first) at every size."""
    import cupy
    import course
    for n in sizes:
        xh, want = exact_inputs(n, seed=n)
        out = cupy.zeros(1, dtype=cupy.float32)
        run(cupy.asarray(xh), out)
        if float(out.get()[0]) != want:
            raise course.CheckError(f"{label} is wrong at n={n}: {float(out.get()[0])!r}, expected {want} "
                                    "(exact inputs: only the exact sum is right)")
    return True


def sync_sweep(kernels=None, record: bool | None = None):
    """The widget: microseconds per sum against n, a slider for one cooperative launch or two launches."""
    from course.widgets import sweep
    state = {}

    def run(n, how):
        import cupy
        import course
        if not state:
            state.update(ks=lesson_kernels(SUM_KERNELS, kernels), out=cupy.zeros(1, dtype=cupy.float32),
                         partials=cupy.empty(8192, dtype=cupy.float32))
        ks, out, partials = state["ks"], state["out"], state["partials"]
        check_sum(lambda a, b: grid_sum(ks, how, a, b, partials), how, sizes=(1_000_003,))
        x = cupy.random.default_rng(n).random(n, dtype=cupy.float32)
        r = course.benchmark(lambda: grid_sum(ks, how, x, out, partials), name=how, budget_s=0.5, min_samples=10)
        return 1000 * r.median_ms
    return sweep(run, {"n": [1 << k for k in range(10, 29, 2)], "how": ["grid sync", "two launches"]},
                 metric="microseconds per sum (median)", name="12_clusters_grid_sync", logx=True,
                 title="one cooperative launch with grid.sync() against two launches", record=record)


# --- 3. clusters: the arithmetic -------------------------------------------------------------------

def slice_bytes(cluster: int, bins: int = BINS) -> int:
    """Bytes of shared memory each block of a cluster holds: its 1/cluster of the 4-byte counters."""
    if not isinstance(cluster, int) or cluster < 1 or cluster & (cluster - 1) or cluster > 16 or bins % cluster:
        raise ValueError(f"`cluster` should be a power of two from 1 to 16 dividing {bins}; got {cluster}")
    return 4 * bins // cluster


def owner(v, cluster: int, bins: int = BINS) -> tuple:
    """(rank of the block that owns bin ``v`` in a cluster of ``cluster``, its index in that block's slice):
    contiguous slices, as the kernel splits them.

    >>> owner(16383, 4)
    (3, 4095)
    """
    per = slice_bytes(cluster, bins) // 4
    return np.asarray(v) // per, np.asarray(v) % per


def blocks_per_sm(threads: int, smem: int, gpu: dict = H100) -> tuple:
    """(resident blocks per SM, what limits them) for blocks of ``threads`` threads holding ``smem`` bytes of
    shared memory: the shared memory (each block also costs the per-block reserve), the threads, or the cap
    on blocks. (0, "shared memory") when one block does not fit."""
    if smem > gpu["smem_per_block_optin"]:
        return 0, "shared memory"
    limits = {"shared memory": gpu["smem_per_sm"] // (smem + gpu["reserved_per_block"]),
              "threads": gpu["max_threads_per_sm"] // threads, "blocks": gpu["max_blocks_per_sm"]}
    why = min(limits, key=limits.get)
    return limits[why], why


def cluster_table(threads: int = 256, bins: int = BINS, gpu: dict = H100) -> list:
    """One row per cluster size: slice bytes, blocks per SM and what limits them, resident threads per SM,
    and the global atomics that merging one wave of blocks costs (each cluster adds ``bins`` counters once)."""
    rows = []
    for c in CLUSTER_SIZES:
        per_sm, why = blocks_per_sm(threads, slice_bytes(c, bins), gpu)
        blocks = per_sm * gpu["sm_count"] // c * c
        rows.append({"cluster": c, "KiB per block": slice_bytes(c, bins) // 1024, "blocks per SM": per_sm,
                     "limited by": why, "threads per SM": per_sm * threads,
                     "merge atomics per wave": blocks // c * bins})
    return rows


def hist_inputs(n: int, hot: float = 0.25, hot_bins: int = 16, seed: int = 0, bins: int = BINS) -> np.ndarray:
    """``n`` uint32 values in [0, bins): a fraction ``hot`` of them spread over ``hot_bins`` bins (contention),
    the rest uniform. ``hot=0`` is uniform."""
    rng = np.random.default_rng(seed)
    v = rng.integers(0, bins, size=n, dtype=np.uint32)
    is_hot = rng.random(n) < hot
    picks = rng.choice(bins, size=hot_bins, replace=False).astype(np.uint32)
    v[is_hot] = picks[rng.integers(0, hot_bins, size=int(is_hot.sum()))]
    return v


def cluster_kernel(cluster: int, name: str = "hist_cluster", bins: int = BINS):
    """The cluster cell's kernel compiled with ``-DCLUSTER=cluster`` (its `__cluster_dims__` is fixed at compile
    time: CuPy cannot set cluster dimensions at launch), and ``-DBINS=bins`` for another bin count."""
    import course
    return course.lesson_cell(CHAPTER, name).kernel(name, options=(f"-DCLUSTER={cluster}", *_bins_option(bins)))


def _bins_option(bins: int) -> tuple:
    """The hist cells' -D for ``bins`` (none for their default, so the notebook's own compile is reused)."""
    return () if bins == BINS else (f"-DBINS={bins}",)


def hist_grid(kernel, block: int, smem: int, cluster: int = 1) -> int:
    """One wave of blocks (SMs x blocks per SM from the occupancy API), a multiple of ``cluster``."""
    import course
    try:
        per_sm = kernel.occupancy(block, smem)
    except Exception:  # a driver that will not answer for a cluster kernel: the H100 rule (any grid is correct)
        per_sm = blocks_per_sm(block, smem)[0]
    wave = course.device_info().sm_count * max(1, per_sm)
    return max(cluster, wave // cluster * cluster)


def hist_launch(kind: str, kernel, data, hist, block: int = 256, cluster: int = 1, bins: int = BINS) -> None:
    """Launch a ``bins``-bin histogram (the kernel compiled for it) of ``kind`` "global", "private" (all bins in
    one block's dynamic shared memory), "cluster" (``cluster`` blocks share the bins, 1/cluster each) or
    "passes" (``bins / RANGE`` launches of hist_private_pass, each counting one range of RANGE bins in 64 KiB
    and reading all the data) into ``hist`` (zero it first)."""
    if kind == "passes":
        grid = hist_grid(kernel, block, 4 * RANGE)
        for first in range(0, bins, RANGE):
            kernel(grid, block, data, hist, int(data.size), first, shared_mem=4 * RANGE)
        return
    smem = {"global": 0, "private": 4 * bins, "cluster": slice_bytes(cluster, bins)}[kind]
    kernel(hist_grid(kernel, block, smem, cluster), block, data, hist, int(data.size), shared_mem=smem)


def check_hist(run, label: str, sizes=CHECK_SIZES, bins: int = BINS) -> bool:
    """True when ``run(data, hist)`` counts exactly (hot-bin inputs, and values >= bins to be skipped)."""
    import cupy
    import course
    for n in sizes:
        dh = hist_inputs(n, seed=n, bins=bins)
        dh[::97] = bins + dh[::97] % 7          # out of range: must not be counted
        hist = cupy.zeros(bins, dtype=cupy.uint32)
        run(cupy.asarray(dh), hist)
        want, got = np.bincount(dh[dh < bins], minlength=bins), hist.get()
        if not np.array_equal(got, want):
            i = int(np.flatnonzero(got != want)[0])
            raise course.CheckError(f"{label} is wrong at n={n}: bin {i} holds {got[i]}, expected {want[i]}")
    return True


def _hist_compare(bins: int, n: int, hot: float, specs, verbose: bool):
    """Check, then time against cupy.bincount, one row per (label, kind, kernel, block, cluster, about) of
    ``specs`` (`hist_launch`'s arguments) on ``n`` values with hot bins; GB/s = 4 bytes read per value."""
    import cupy
    from course.variants import Variant, compare
    d, h = cupy.asarray(hist_inputs(n, hot=hot, seed=5, bins=bins)), cupy.zeros(bins, dtype=cupy.uint32)

    def row(label, kind, k, block, cluster, about):
        def go(a, b):
            hist_launch(kind, k, a, b, block, cluster, bins)
        return Variant(label, lambda: go(d, h), about=about, check=lambda: check_hist(go, label, bins=bins))
    return compare([row(*spec) for spec in specs],
                   anchors=[Variant("cupy.bincount", lambda: cupy.bincount(d, minlength=bins))], work=4 * n,
                   title=f"{bins:,}-bin histogram of {n:,} values, {hot:.0%} in 16 hot bins "
                   "(GB/s = 4 bytes read per value)", verbose=verbose)


def histogram_table(kernels=None, n: int = 1 << 26, clusters=(2, 4, 8), hot: float = 0.25, verbose: bool = True):
    """Check, then time against cupy.bincount on ``n`` values with hot bins: global atomics, the privatized
    histogram at three block sizes, and (sm_90) the DSMEM histogram per cluster size. GB/s = 4 bytes read
    per value. `best_private` picks the anchor of the DSMEM rows."""
    import course
    ks = lesson_kernels(HIST_KERNELS, kernels)
    specs = [("global atomics", "global", ks["hist_global"], 256, 1, "one L2 atomic per value")]
    specs += [(f"privatized, block {b}", "private", ks["hist_private"], b, 1, "64 KiB per block")
              for b in (256, 512, 1024)]
    if course.supports("clusters"):
        specs += [(f"DSMEM, cluster {c}", "cluster", cluster_kernel(c), 256, c,
                   f"{64 // c} KiB per block, bins shared by {c} blocks") for c in clusters]
    return _hist_compare(BINS, n, hot, specs, verbose)


def best_private(table) -> dict:
    """The fastest privatized row of `histogram_table`: the DSMEM rows' anchor."""
    return max((r for r in table if r["name"].startswith("privatized")), key=lambda r: r["rate"])


def large_histogram_table(n: int = 1 << 26, clusters=(2, 4), hot: float = 0.25, verbose: bool = True):
    """The 65,536-bin case, where no single block holds the counters: global atomics, the histogram privatized
    in BINS_LARGE / RANGE passes (blocks 512 and 1024) and (sm_90) the DSMEM histogram per cluster size at
    1,024 threads a block (a 128 KiB slice leaves room for one block an SM: its threads must come from the
    block), checked, then timed against cupy.bincount. `best_non_cluster` picks the DSMEM rows' anchor."""
    import course
    bins, opt = BINS_LARGE, _bins_option(BINS_LARGE)
    ks = {k: course.lesson_cell(CHAPTER, k).kernel(k, options=opt) for k in ("hist_global", "hist_private_pass")}
    specs = [("global atomics", "global", ks["hist_global"], 256, 1, "one L2 atomic per value")]
    specs += [(f"privatized in {bins // RANGE} passes, block {b}", "passes", ks["hist_private_pass"], b, 1,
               f"64 KiB per block, the data read {bins // RANGE} times") for b in (512, 1024)]
    if course.supports("clusters"):
        specs += [(f"DSMEM, cluster {c}", "cluster", cluster_kernel(c, bins=bins), 1024, c,
                   f"{256 // c} KiB per block, bins shared by {c} blocks") for c in clusters]
    return _hist_compare(bins, n, hot, specs, verbose)


def best_non_cluster(table) -> dict:
    """The fastest row of a histogram table that is not a cluster's (cupy.bincount included)."""
    return max((r for r in table if not r["name"].startswith("DSMEM")), key=lambda r: r["rate"])


def hist_sweep(record: bool | None = None, n: int = 1 << 25):
    """The widget: GB/s of the DSMEM histogram against the cluster size (1 is one block owning all 64 KiB),
    a slider for the input (uniform, or a quarter of the values in 16 hot bins). Needs sm_90 to measure."""
    from course.widgets import sweep
    state = {}

    def run(cluster, data):
        import cupy
        import course
        course.require("clusters", strict=True)
        if state.get("data") != data:
            state.update(data=data, d=cupy.asarray(hist_inputs(n, hot=0.25 if data == "hot" else 0.0, seed=7)),
                         h=cupy.zeros(BINS, dtype=cupy.uint32))
        k = cluster_kernel(cluster)
        check_hist(lambda a, b: hist_launch("cluster", k, a, b, 256, cluster), f"cluster {cluster}",
                   sizes=(1_000_003,))
        r = course.benchmark(lambda: hist_launch("cluster", k, state["d"], state["h"], 256, cluster),
                             name=f"cluster {cluster}", budget_s=0.5, min_samples=5)
        return r.gbps(4 * n), f"{hist_grid(k, 256, slice_bytes(cluster), cluster)} blocks"
    return sweep(run, {"cluster": list(CLUSTER_SIZES), "data": ["uniform", "hot"]}, logx=True,
                 metric="GB/s (4 bytes read per value)", name="12_clusters_histogram", record=record,
                 title=f"DSMEM histogram of {BINS:,} bins, 2^25 values, by cluster size")


# --- 4. cluster reduction ----------------------------------------------------------------------------

def reduce_cluster_launch(kernel, x, out, cluster: int = 8, block: int = 256) -> None:
    """One block per 2 x ``block`` floats (chapter 06's variant 4 shape), the grid rounded up to whole clusters;
    one atomicAdd per cluster into ``out[0]`` (zero it first)."""
    blocks = max(1, -(-int(x.size) // (2 * block)))
    kernel(-(-blocks // cluster) * cluster, block, x, out, int(x.size))


def reduction_table(kernels=None, n: int = 1 << 28, cluster: int = 8, verbose: bool = True):
    """Check, then time against cupy.sum on ``n`` floats: the grid-synchronized sum, its two-launch twin,
    chapter 06's variants 4 (one atomic per block) and 5 (grid-stride), and (sm_90) the cluster reduction
    (one atomic per cluster of ``cluster`` blocks). GB/s = 4 bytes read per element."""
    import cupy
    import course
    from course.variants import Variant, compare
    ks = lesson_kernels(SUM_KERNELS, kernels)
    x = cupy.random.default_rng(3).random(n, dtype=cupy.float32)
    out, partials = cupy.zeros(1, dtype=cupy.float32), cupy.empty(8192, dtype=cupy.float32)
    v4 = course.lesson_cell("06_building_blocks", "reduce4_shuffle").kernel("reduce4_shuffle")
    v5 = course.lesson_cell("06_building_blocks", "reduce5_grid_stride").kernel("reduce5_grid_stride")

    def v4_run(a, b):
        v4(max(1, -(-a.size // 512)), 256, a, b, a.size)

    def v5_run(a, b):
        v5(course.device_info().sm_count * v5.occupancy(256), 256, a, b, a.size)
    variants = [Variant(how, lambda how=how: grid_sum(ks, how, x, out, partials),
                        check=lambda how=how: check_sum(lambda a, b: grid_sum(ks, how, a, b, partials), how),
                        about=about) for how, about in (
        ("grid sync", "one cooperative launch: partials, grid.sync(), block 0 adds them"),
        ("two launches", "the same two stages as two kernels"))]
    variants += [Variant(label, lambda f=f: f(x, out), check=lambda f=f, label=label: check_sum(f, label), about=a)
                 for label, f, a in (("ch06 variant 4", v4_run, "one atomic per block of 512 elements"),
                                     ("ch06 variant 5", v5_run, "grid-stride, one atomic per block of a wave"))]
    if course.supports("clusters"):
        kc = cluster_kernel(cluster, "reduce_cluster")
        variants.append(Variant(f"cluster of {cluster}", lambda: reduce_cluster_launch(kc, x, out, cluster),
                                check=lambda: check_sum(lambda a, b: reduce_cluster_launch(kc, a, b, cluster),
                                                        "reduce_cluster"),
                                about=f"variant 4's blocks, partials added through DSMEM: one atomic per {cluster}"))
    return compare(variants, anchors=[Variant("cupy.sum", lambda: x.sum(out=out[0]), about="CUB")], work=4 * n,
                   title=f"sum of {n:,} floats (GB/s = 4 bytes read per element)", verbose=verbose)
