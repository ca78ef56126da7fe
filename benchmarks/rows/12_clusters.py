"""Chapter 12 rows: the 16,384- and 65,536-bin histograms and the sums of the lesson, each against its anchor in
the same run.

The rows come from the very tables the lesson prints (`ch12.histogram_table`, `ch12.large_histogram_table`,
`ch12.reduction_table`, each a `course.variants.compare` that checks every kernel exactly before timing any),
on 2^26 values with a quarter of them in 16 hot bins. The DSMEM histograms are measured against the best
version without clusters of the same run: at 16,384 bins the single-block privatized one (64 KiB per block,
the best of three block sizes), at 65,536 bins, which no block holds, the best of global atomics and the
histogram privatized in four passes. Neither has a target. The issue asked for 1.2 times at 16,384 bins; the
H100 gave 0.29 (the chapter explains why: the private copy fits one block there, and a remote add costs more
than a local one). At 65,536 bins the passes read the data four times, which bounds them near a quarter of
the copy ceiling, about 750 GB/s; there the H100 gave DSMEM (clusters of 2) 1.18 times the passes. The sums
are against CUB through `cupy.sum`. Cluster rows need sm_90 and are left out below it.
"""
from __future__ import annotations

CHAPTER = "12_clusters"
N_HIST = 1 << 26
N_SUM = 1 << 28
N_SMALL = 1 << 16


def _hist_rows(ctx, table, bins: str, other: dict, what: str) -> list:
    """One table's rows: global atomics and the privatized versions against cupy.bincount, each DSMEM row and
    the best of them against ``other`` (the best version without clusters, ``what`` it is)."""
    base = next(r for r in table if r["name"] == "cupy.bincount")["rate"]
    out = [ctx.row(f"histogram {bins} bins, {r['name']}, 2^26 values", r["rate"], "GB/s",
                   anchor="cupy.bincount, same run", anchor_value=base, note=r["about"])
           for r in table if r["name"] == "global atomics" or r["name"].startswith("privatized")]
    dsmem = [r for r in table if r["name"].startswith("DSMEM")]
    anchor = f"{what} ({other['name']}), same run"
    out += [ctx.row(f"histogram {bins} bins, {r['name']}, 2^26 values", r["rate"], "GB/s", anchor=anchor,
                    anchor_value=other["rate"], note=r["about"]) for r in dsmem]
    if dsmem:
        top = max(dsmem, key=lambda r: r["rate"])
        out.append(ctx.row(f"histogram {bins} bins, DSMEM at its best cluster size, 2^26 values", top["rate"], "GB/s",
                           anchor=anchor, anchor_value=other["rate"], note=f"{top['name']}; median {top['ms']:.3f} ms"))
    return out


def _sum_rows(ctx, ch12) -> list:
    t = ch12.reduction_table(n=N_SUM, verbose=False)
    base = next(r for r in t if r["name"] == "cupy.sum")["rate"]
    return [ctx.row(f"sum of 2^28 floats, {r['name']}", r["rate"], "GB/s", anchor="cupy.sum, same run",
                    anchor_value=base, note=r["about"]) for r in t if r["name"] != "cupy.sum"]


def _small_sum_rows(ctx, ch12, cupy) -> list:
    """Where a barrier and a second launch differ most: a sum small enough that fixed costs dominate."""
    ks = ch12.lesson_kernels(ch12.SUM_KERNELS)
    x = cupy.random.default_rng(1).random(N_SMALL, dtype=cupy.float32)
    out, partials = cupy.zeros(1, dtype=cupy.float32), cupy.empty(8192, dtype=cupy.float32)
    us = {}
    for how in ("grid sync", "two launches"):
        ch12.check_sum(lambda a, b, how=how: ch12.grid_sum(ks, how, a, b, partials), how)
        us[how] = 1000 * ctx.benchmark(lambda how=how: ch12.grid_sum(ks, how, x, out, partials), name=how).median_ms
    return [ctx.row("sum of 2^16 floats, one cooperative launch with grid.sync()", us["grid sync"], "us",
                    anchor="the same stages as two launches, same run", anchor_value=us["two launches"],
                    higher_is_better=False, note="microseconds per sum; a ratio below 1: the barrier is cheaper")]


def rows(ctx) -> list:
    import cupy
    from course.lessons import ch12
    out = []

    def small():
        t = ch12.histogram_table(n=N_HIST, verbose=False)
        return _hist_rows(ctx, t, "16,384", ch12.best_private(t), "best privatized")

    def large():     # no single-block privatized version exists: the anchor is the best of the rest
        t = ch12.large_histogram_table(n=N_HIST, verbose=False)
        return _hist_rows(ctx, t, "65,536", ch12.best_non_cluster(t), "best non-cluster")
    for section in (small, large, lambda: _sum_rows(ctx, ch12), lambda: _small_sum_rows(ctx, ch12, cupy)):
        out += section()
        cupy.get_default_memory_pool().free_all_blocks()
    return out
