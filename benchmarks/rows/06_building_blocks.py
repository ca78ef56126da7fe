"""Chapter 06 rows: vector add, the reduction variants, scans and histograms against CuPy in the same run.

Anchors: cupy.sum (2^28 floats), cupy.cumsum (2^26 floats), cupy.bincount (2^26 ints), each timed
interleaved with the kernels it anchors. Sums and scans are checked exactly on integer-valued inputs
(exact in float32 in any order) at sizes that are not multiples of the block size before timing.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions" / "06_building_blocks"
N_SUM = 1 << 28
N_SCAN = 1 << 26
N_HIST = 1 << 26
ODD_SIZES = (1, 33, 4097, 1_000_003, (1 << 22) + 5)


def _ref(name):
    import course
    return course.compile((SOLUTIONS / f"{name}.cu").read_text()).kernel(name)


def _sum_launch(k, n, block=256):
    import course
    return min(-(-n // (16 * block)), 1024, course.device_info().sm_count * k.occupancy(block)), block


def _check_sum(cupy, k):
    from course.lessons.ch06 import exact_inputs
    out = cupy.empty(1, dtype=cupy.float32)
    for n in ODD_SIZES:
        xh, want = exact_inputs(n, seed=n)
        x = cupy.asarray(xh)
        for _ in range(2):                      # the second launch proves the counter was reset
            out.fill(cupy.nan)
            grid, block = _sum_launch(k, n)
            k(grid, block, x, out, n)
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
            k(-(-n // 4096), 256, x, y, n)
            assert np.array_equal(y.get(), want), f"scan_inclusive wrong at n={n}"
    xh, _ = exact_inputs(100_001, seed=3)
    x = cupy.asarray(xh)
    y = cupy.full(100_001, cupy.nan, dtype=cupy.float32)
    k(-(-100_000 // 4096), 256, x[1:], y[1:], 100_000)    # unaligned views: the scalar path
    assert np.array_equal(y[1:].get(), np.cumsum(xh[1:].astype(np.int64)).astype(np.float32)), "scan on views"


def _hist_launch(n, block=512, max_blocks=512):
    return max(1, min(-(-n // (16 * block)), max_blocks)), block


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


def _map_rows(ctx, cupy, course, ch06) -> list:
    va = course.compile(ch06.VEC_ADD4_SRC).kernel("vec_add4")
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
    """The graded reference and the lesson's variants, interleaved with cupy.sum."""
    ref = _ref("reduce_sum")
    _check_sum(cupy, ref)
    for v in ch06.REDUCE_VARIANTS:
        ch06.check_reduction(v, 256, sizes=ODD_SIZES)
    x = cupy.random.default_rng(62).random(N_SUM, dtype=cupy.float32)
    res = cupy.empty(1, dtype=cupy.float32)
    partials = cupy.empty(1024, dtype=cupy.float32)
    g, b = _sum_launch(ref, N_SUM)
    fns = {"cupy.sum": lambda: x.sum(out=res[0]), "reference": lambda: ref(g, b, x, res, N_SUM)}
    for v in ch06.REDUCE_VARIANTS:
        fns[f"{v.number}: {v.kernel}"] = lambda v=v: ch06.run_reduction(v, x, res, 256, partials)
    t = ctx.interleaved(fns)
    cupy_gbps = t["cupy.sum"].gbps(4 * N_SUM)
    out = [ctx.row("reference reduce_sum (two stages, one launch), sum of 2^28 floats",
                   t["reference"].gbps(4 * N_SUM), "GB/s", anchor="cupy.sum, same run", anchor_value=cupy_gbps,
                   target=0.95, note=f"{g} blocks x {b}; median {t['reference'].median_ms:.3f} ms")]
    for v in ch06.REDUCE_VARIANTS:
        name = f"{v.number}: {v.kernel}"
        out.append(ctx.row(f"sum variant {name}", t[name].gbps(4 * N_SUM), "GB/s", anchor="cupy.sum, same run",
                           anchor_value=cupy_gbps, note=v.header))
    return out


def _scan_rows(ctx, cupy, ch06) -> list:
    sc = _ref("scan_inclusive")
    _check_scan(cupy, sc)
    xh, _ = ch06.exact_inputs(1_000_003, seed=8)
    assert np.array_equal(ch06.scan_full(cupy.asarray(xh)).get(),
                          np.cumsum(xh.astype(np.int64)).astype(np.float32)), "three-launch scan wrong"
    x = cupy.random.default_rng(63).random(N_SCAN, dtype=cupy.float32)
    y = cupy.empty_like(x)
    sums = cupy.empty(-(-N_SCAN // 1024), dtype=cupy.float32)
    t = ctx.interleaved({"cupy.cumsum": lambda: cupy.cumsum(x, out=y),
                         "reference": lambda: sc(-(-N_SCAN // 4096), 256, x, y, N_SCAN),
                         "three": lambda: ch06.scan_full(x, y, 256, sums)})
    base = t["cupy.cumsum"].gbps(8 * N_SCAN)
    ref_gbps = t["reference"].gbps(8 * N_SCAN)
    return [ctx.row("reference scan_inclusive (single pass, decoupled look-back), 2^26 floats", ref_gbps, "GB/s",
                    anchor="cupy.cumsum, same run", anchor_value=base, target=1.5,
                    note=f"8 bytes per element; {100 * ref_gbps / ctx.copy_gbps:.0f}% of the copy ceiling"),
            ctx.row("scan, three launches (reduce, then scan), 2^26 floats", t["three"].gbps(8 * N_SCAN), "GB/s",
                    anchor="cupy.cumsum, same run", anchor_value=base, note="moves 12 bytes per element")]


def _hist_rows(ctx, cupy, course, ch06) -> list:
    hk = _ref("histogram256")
    _check_hist(cupy, hk)
    lesson = course.compile(ch06.HIST_SRC)
    lg = course.device_info().sm_count * 8
    for name in ("hist_global", "hist_shared"):
        for n in (1, 1_000_003):
            dh = ch06.hist_inputs(n, seed=n)
            hh = cupy.zeros(256, dtype=cupy.uint32)
            lesson.kernel(name)(lg, 256, cupy.asarray(dh), hh, n)
            assert np.array_equal(hh.get(), np.bincount(dh, minlength=256)), f"{name} wrong at n={n}"
    d = cupy.asarray(ch06.hist_inputs(N_HIST, seed=64))
    h = cupy.zeros(256, dtype=cupy.uint32)
    t = ctx.interleaved({"cupy.bincount": lambda: cupy.bincount(d, minlength=256),
                         "reference": lambda: hk(*_hist_launch(N_HIST), d, h, N_HIST),
                         "shared": lambda: lesson.kernel("hist_shared")(lg, 256, d, h, N_HIST),
                         "global": lambda: lesson.kernel("hist_global")(lg, 256, d, h, N_HIST)})
    base = t["cupy.bincount"].gbps(4 * N_HIST)
    return [ctx.row("reference histogram256 (privatized), 2^26 uniform ints", t["reference"].gbps(4 * N_HIST),
                    "GB/s", anchor="cupy.bincount, same run", anchor_value=base, target=3.0,
                    note=f"median {t['reference'].median_ms:.3f} ms"),
            ctx.row("histogram, lesson hist_shared, 2^26 uniform ints", t["shared"].gbps(4 * N_HIST), "GB/s",
                    anchor="cupy.bincount, same run", anchor_value=base),
            ctx.row("histogram, lesson hist_global (global atomics), 2^26 uniform ints",
                    t["global"].gbps(4 * N_HIST), "GB/s", anchor="cupy.bincount, same run", anchor_value=base)]


def rows(ctx) -> list:
    import cupy
    import course
    from course.lessons import ch06
    out = []
    # one function per section: its arrays are freed when it returns
    for section in (lambda: _map_rows(ctx, cupy, course, ch06), lambda: _sum_rows(ctx, cupy, ch06),
                    lambda: _scan_rows(ctx, cupy, ch06), lambda: _hist_rows(ctx, cupy, course, ch06)):
        out += section()
        cupy.get_default_memory_pool().free_all_blocks()
    return out
