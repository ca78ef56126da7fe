"""Chapter 06 rows: vector add, the reduction variants, scans and histograms against CuPy in the same run.

The kernels are the lesson's own `%%cuda` cells (`course.lesson_cell`), and the sum, scan and histogram rows
come from the very tables the lesson prints (`ch06.reduction_table`, `scan_table`, `histogram_table`, each a
`course.variants.compare` against cupy.sum on 2^28 floats, cupy.cumsum on 2^26 floats or cupy.bincount on
2^26 ints), which check every variant exactly on integer-valued inputs before timing any. The graded
references are checked harder here first: at odd sizes, twice in a row (their cross-launch state must
reset), and on unaligned views.
"""
from __future__ import annotations

import numpy as np

CHAPTER = "06_building_blocks"
N_SUM = 1 << 28
N_SCAN = 1 << 26
N_HIST = 1 << 26
ODD_SIZES = (1, 33, 4097, 1_000_003, (1 << 22) + 5)


def _ref(name):
    import course
    return course.compile(course.solution_source(CHAPTER, name), name=f"{name}.cu").kernel(name)


def _sum_launch(k, n):
    from course.lessons import ch06
    return ch06.reference_launch("reduce_sum", n, k)


def _hist_launch(n):
    """The graded histogram's launch, as the lesson's table makes it (a test holds it to the grader's spec)."""
    from course.lessons import ch06
    return ch06.reference_launch("histogram256", n)


def _scan_launch(n):
    from course.lessons import ch06
    return ch06.reference_launch("scan_inclusive", n)


def _check_sum(cupy, k):
    from course.lessons.ch06 import exact_inputs
    out = cupy.empty(1, dtype=cupy.float32)
    for n in ODD_SIZES:
        xh, want = exact_inputs(n, seed=n)
        x = cupy.asarray(xh)
        for _ in range(2):                      # the second launch proves the counter was reset
            out.fill(cupy.nan)
            k(*_sum_launch(k, n), x, out, n)
            assert float(out.get()[0]) == want, f"reduce_sum wrong at n={n}"
    x = cupy.asarray(exact_inputs(1001, seed=7)[0])
    out.fill(cupy.nan)
    k(4, 256, x[1:], out, 1000)                 # a view that is not 16-byte aligned: the scalar path
    assert float(out.get()[0]) == float(x[1:].get().astype(np.int64).sum()), "reduce_sum wrong on a view"


def _check_scan(cupy, k):
    from course.lessons.ch06 import exact_inputs
    for n in ODD_SIZES:
        xh, _ = exact_inputs(n, seed=n + 1)
        want = np.cumsum(xh.astype(np.int64)).astype(np.float32)
        x = cupy.asarray(xh)
        for _ in range(2):                      # state must be clean for the next launch
            y = cupy.full(n, cupy.nan, dtype=cupy.float32)
            k(*_scan_launch(n), x, y, n)
            assert np.array_equal(y.get(), want), f"scan_inclusive wrong at n={n}"
    xh, _ = exact_inputs(100_001, seed=3)
    x = cupy.asarray(xh)
    y = cupy.full(100_001, cupy.nan, dtype=cupy.float32)
    k(*_scan_launch(100_000), x[1:], y[1:], 100_000)    # unaligned views: the scalar path
    assert np.array_equal(y[1:].get(), np.cumsum(xh[1:].astype(np.int64)).astype(np.float32)), "scan on views"


def _check_hist(cupy, k):
    from course.lessons.ch06 import hist_inputs
    for n in ODD_SIZES:
        dh = hist_inputs(n, seed=n)
        d, h = cupy.asarray(dh), cupy.zeros(256, dtype=cupy.uint32)
        k(*_hist_launch(n), d, h, n)
        assert np.array_equal(h.get(), np.bincount(dh, minlength=256)), f"histogram256 wrong at n={n}"
    dh = np.random.default_rng(5).integers(-50, 300, 10_001).astype(np.int32)   # out-of-range values skipped
    d, h = cupy.asarray(dh), cupy.zeros(256, dtype=cupy.uint32)
    k(*_hist_launch(10_000), d[1:], h, 10_000)
    keep = dh[1:][(dh[1:] >= 0) & (dh[1:] < 256)]
    assert np.array_equal(h.get(), np.bincount(keep, minlength=256)), "histogram256 wrong on a view / range"


def _by_name(table) -> dict:
    """name -> (GB/s, median ms, about) of a `course.variants.Comparison`."""
    return {r["name"]: (r["rate"], r["ms"], r["about"]) for r in table}


def _map_rows(ctx, cupy, course) -> list:
    va = course.lesson_cell(CHAPTER, "vec_add4").kernel("vec_add4")
    grid = course.device_info().sm_count * va.occupancy(256)
    for n in (1, 1_000_003):
        a = cupy.random.default_rng(n).random(n, dtype=cupy.float32)
        z = cupy.full(n, cupy.nan, dtype=cupy.float32)
        va(grid, 256, a, a, z, n)
        assert bool((z == a + a).all()), f"vec_add4 wrong at n={n}"
    x = cupy.random.default_rng(61).random(N_SUM, dtype=cupy.float32)
    y = cupy.random.default_rng(63).random(N_SUM, dtype=cupy.float32)
    z = cupy.empty_like(x)
    # two distinct inputs: adding x to itself reads one stream, and 12 bytes per element would overcount
    r = ctx.benchmark(lambda: va(grid, 256, x, y, z, N_SUM), name="vec_add4")
    return [ctx.row("vec_add4 (float4, grid-stride), 2^28 floats", r.gbps(12 * N_SUM), "GB/s",
                    anchor="D2D copy (read+write), same run", anchor_value=ctx.copy_gbps, target=0.90,
                    note=f"median {r.median_ms:.3f} ms")]


def _sum_rows(ctx, cupy, ch06) -> list:
    """The lesson's table: its variants and the graded reference against cupy.sum."""
    ref = _ref("reduce_sum")
    _check_sum(cupy, ref)
    t = _by_name(ch06.reduction_table(n=N_SUM, verbose=False))
    cupy_gbps = t["cupy.sum"][0]
    g, b = _sum_launch(ref, N_SUM)
    gbps, ms, _ = t["reference reduce_sum"]
    out = [ctx.row("reference reduce_sum (two stages, one launch), sum of 2^28 floats", gbps, "GB/s",
                   anchor="cupy.sum, same run", anchor_value=cupy_gbps, target=0.95,
                   note=f"{g} blocks x {b}; median {ms:.3f} ms")]
    for i, name in enumerate(ch06.REDUCE_VARIANTS, 1):
        gbps, _, about = t[f"{i}: {name}"]
        out.append(ctx.row(f"sum variant {i}: {name}", gbps, "GB/s", anchor="cupy.sum, same run",
                           anchor_value=cupy_gbps, note=about))
    return out


def _scan_rows(ctx, cupy, ch06) -> list:
    _check_scan(cupy, _ref("scan_inclusive"))
    t = _by_name(ch06.scan_table(n=N_SCAN, verbose=False))
    base = t["cupy.cumsum"][0]
    ref_gbps = t["single pass (decoupled look-back)"][0]
    return [ctx.row("reference scan_inclusive (single pass, decoupled look-back), 2^26 floats", ref_gbps, "GB/s",
                    anchor="cupy.cumsum, same run", anchor_value=base, target=1.5,
                    note=f"8 bytes per element; {100 * ref_gbps / ctx.copy_gbps:.0f}% of the copy ceiling"),
            ctx.row("scan, three launches (reduce, then scan), 2^26 floats", t["three launches (reduce, then scan)"][0],
                    "GB/s", anchor="cupy.cumsum, same run", anchor_value=base, note="moves 12 bytes per element")]


def _hist_rows(ctx, cupy, ch06) -> list:
    _check_hist(cupy, _ref("histogram256"))
    t = _by_name(ch06.histogram_table(n=N_HIST, verbose=False))
    base = t["cupy.bincount"][0]
    gbps, ms, _ = t["reference (exercise)"]
    return [ctx.row("reference histogram256 (privatized), 2^26 uniform ints", gbps, "GB/s",
                    anchor="cupy.bincount, same run", anchor_value=base, target=3.0, note=f"median {ms:.3f} ms"),
            ctx.row("histogram, lesson hist_shared, 2^26 uniform ints", t["shared-memory privatized"][0], "GB/s",
                    anchor="cupy.bincount, same run", anchor_value=base),
            ctx.row("histogram, lesson hist_global (global atomics), 2^26 uniform ints", t["global atomics"][0],
                    "GB/s", anchor="cupy.bincount, same run", anchor_value=base)]


def rows(ctx) -> list:
    import cupy
    import course
    from course.lessons import ch06
    out = []
    # one function per section: its arrays are freed when it returns
    for section in (lambda: _map_rows(ctx, cupy, course), lambda: _sum_rows(ctx, cupy, ch06),
                    lambda: _scan_rows(ctx, cupy, ch06), lambda: _hist_rows(ctx, cupy, ch06)):
        out += section()
        cupy.get_default_memory_pool().free_all_blocks()
    return out
