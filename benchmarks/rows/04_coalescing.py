"""Chapter 04 rows: coalesced scale against the copy ceiling, the stride-32 collapse, the graded reference, the
load and store paths of section 6 (cache hints) against the plain one.

GB/s count the bytes the kernel needs (every element read once and written once), so a strided kernel
that fetches 8 times more sectors shows up as 8 times less useful bandwidth. Every kernel is checked on
fresh inputs at sizes that are not multiples of the block size before anything is timed. The lesson's
kernels come from the chapter's %%cuda cells, the slow row_scale from the exercise notebook's.
"""
from __future__ import annotations

from pathlib import Path

N = 1 << 28                  # 1 GiB per array, far past L2
STRIDE_M = 1 << 24           # elements touched by the strided kernel at every stride
ROWS, COLS = 16384, 4099     # the graded row_scale at a non-multiple-of-32 width (256 MiB per matrix)
STEM = "04_coalescing"
REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "solutions" / STEM
EXERCISE = REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb"


def _row_scale_launch(rows, cols):
    """The grader's geometry for row_scale (autograder/specs/04_coalescing.py)."""
    return (min(-(-cols // 128), 32), min(-(-rows // 8), 4096)), (32, 8)


def _check_scales(cupy, course, m):
    rng = cupy.random.default_rng(41)
    for n in (4, 1_000_004, 4 * 300_007):          # n4 = 1, 250001, 300007: partial last blocks
        x = rng.random(n, dtype=cupy.float32)
        want = 2.0 * x
        grid = course.device_info().sm_count * m.scale_vec4_grid.occupancy(256)
        for name, launch in (("scale_scalar", lambda y: m.scale_scalar(course.grid_for(n, 256), 256, x, y, 2.0, n)),
                             ("scale_vec4", lambda y: m.scale_vec4(course.grid_for(n // 4, 256), 256, x, y, 2.0, n // 4)),
                             ("scale_vec4_grid", lambda y: m.scale_vec4_grid(grid, 256, x, y, 2.0, n // 4))):
            y = cupy.full(n, cupy.nan, dtype=cupy.float32)
            launch(y)
            assert bool((y == want).all()), f"{name} wrong at n={n}"


def _check_row_scale(cupy, k):
    rng = cupy.random.default_rng(42)
    for rows, cols in ((1, 1), (1009, 37), (37, 1009), (300, 4099)):
        m = rng.random((rows, cols), dtype=cupy.float32)
        s = rng.random(rows, dtype=cupy.float32) + 0.5
        out = cupy.full_like(m, cupy.nan)
        grid, block = _row_scale_launch(rows, cols)
        k(grid, block, m, s, out, rows, cols)
        assert bool((out == m * s[:, None]).all()), f"{k.name} wrong at {rows} x {cols}"


def _scale_rows(ctx, cupy, course) -> list:
    m = course.lesson_cell(STEM, "scale_scalar").compile()
    _check_scales(cupy, course, m)
    x = cupy.random.default_rng(43).random(N, dtype=cupy.float32)
    y = cupy.empty_like(x)
    grid = course.device_info().sm_count * m.scale_vec4_grid.occupancy(256)
    vec = ctx.benchmark(lambda: m.scale_vec4_grid(grid, 256, x, y, 2.0, N // 4), name="scale_vec4_grid")
    sc = ctx.benchmark(lambda: m.scale_scalar(course.grid_for(N, 256), 256, x, y, 2.0, N), name="scale_scalar")
    return [ctx.row("coalesced scale, float4 grid-stride (ch04 scale_vec4_grid), 2^28 floats",
                    vec.gbps(8 * N), "GB/s", anchor="D2D copy (read+write), same run",
                    anchor_value=ctx.copy_gbps, target=0.90,
                    note=f"median {vec.median_ms:.3f} ms, IQR {100 * vec.rel_iqr:.1f}%"),
            ctx.row("coalesced scale, one float per thread (ch04 scale_scalar), 2^28 floats",
                    sc.gbps(8 * N), "GB/s", anchor="D2D copy (read+write), same run", anchor_value=ctx.copy_gbps,
                    note="4 bytes in flight per thread; compare the float4 row")]


def _stride_rows(ctx, cupy, course) -> list:
    """The stride-32 collapse: the same 2^24 elements touched at stride 1 and 32 (and shifted by one)."""
    from course.access import warp_access
    k = course.lesson_cell(STEM, "scale_strided").kernel()
    xs = cupy.random.default_rng(44).random(32 * STRIDE_M + 32, dtype=cupy.float32)
    ys = cupy.zeros_like(xs)
    useful = {}
    for stride, offset in ((1, 0), (32, 0), (1, 1)):
        def launch(stride=stride, offset=offset):
            k(course.grid_for(STRIDE_M, 256), 256, xs, ys, 2.0, STRIDE_M, stride, offset)
        ys.fill(0)
        launch()
        idx = cupy.arange(STRIDE_M) * stride + offset
        assert bool((ys[idx] == 2.0 * xs[idx]).all()), f"scale_strided wrong at stride {stride}"
        useful[stride, offset] = ctx.benchmark(launch, name=f"stride {stride}").gbps(8 * STRIDE_M)
    factor = useful[1, 0] / useful[32, 0]
    model = warp_access(lambda i: 32 * i).sectors_per_request / warp_access(lambda i: i).sectors_per_request
    return [ctx.row("stride-32 scale, useful GB/s (2^24 elements)", useful[32, 0], "GB/s",
                    anchor="stride-1 scale, same elements", anchor_value=useful[1, 0], target=0.25,
                    higher_is_better=False,
                    note=f"collapse factor {factor:.1f}x; the sector model predicts {model:.0f}x (32 sectors per "
                         "request instead of 4); more than that means DRAM moves more than a sector per miss"),
            ctx.row("stride-1 scale shifted by one float, useful GB/s", useful[1, 1], "GB/s",
                    anchor="stride-1 scale, aligned", anchor_value=useful[1, 0],
                    note="5 sectors per request instead of 4; the extra one is the next warp's, mostly from L2")]


def _row_scale_rows(ctx, cupy, course) -> list:
    """The graded exercise: the reference against the copy ceiling, the slow kernel against the reference."""
    ref = course.compile((SOLUTIONS / "row_scale.cu").read_text()).kernel("row_scale")
    # the exercise notebook's starting kernel: x walks the rows, so each warp reads down a column
    slow = course.notebook_cells(EXERCISE)["row_scale_slow"].kernel()
    _check_row_scale(cupy, ref)
    _check_row_scale(cupy, slow)
    rng = cupy.random.default_rng(45)
    mat = rng.random((ROWS, COLS), dtype=cupy.float32)
    s = rng.random(ROWS, dtype=cupy.float32) + 0.5
    res = cupy.empty_like(mat)
    grid, block = _row_scale_launch(ROWS, COLS)
    t = ctx.interleaved({"ref": lambda: ref(grid, block, mat, s, res, ROWS, COLS),
                         "slow": lambda: slow(grid, block, mat, s, res, ROWS, COLS)})
    nbytes = 8 * ROWS * COLS + 4 * ROWS
    return [ctx.row(f"reference row_scale (graded), {ROWS} x {COLS}", t["ref"].gbps(nbytes), "GB/s",
                    anchor="D2D copy (read+write), same run", anchor_value=ctx.copy_gbps, target=0.90,
                    note=f"median {t['ref'].median_ms:.3f} ms"),
            ctx.row(f"row_scale_slow (column walk) vs reference, {ROWS} x {COLS}", t["slow"].gbps(nbytes), "GB/s",
                    anchor="reference row_scale", anchor_value=t["ref"].gbps(nbytes), target=0.6,
                    higher_is_better=False, note="must stay well under the grader's 0.7 threshold")]


def _walk_rows(ctx, cupy, course) -> list:
    """Row sums: a thread per row (uncoalesced) against a warp per row."""
    w = course.lesson_cell(STEM, "row_sum_thread").compile()
    rows_, cols_ = 1 << 18, 256
    mm = cupy.random.default_rng(46).random((rows_, cols_), dtype=cupy.float32)
    sums = cupy.empty(rows_, dtype=cupy.float32)
    want = mm.sum(axis=1)
    g = {}
    for name, kern, grid in (("thread", w.row_sum_thread, course.grid_for(rows_, 256)),
                             ("warp", w.row_sum_warp, course.grid_for(32 * rows_, 256))):
        def launch(kern=kern, grid=grid):
            kern(grid, 256, mm, sums, rows_, cols_)
        sums.fill(cupy.nan)
        launch()
        assert bool(cupy.allclose(sums, want, rtol=1e-4)), f"row_sum_{name} wrong"
        g[name] = ctx.benchmark(launch, name=name).gbps(4 * rows_ * cols_)
    return [ctx.row("row sums, thread per row (lanes 256 floats apart), 2^18 x 256", g["thread"], "GB/s",
                    anchor="warp per row (coalesced)", anchor_value=g["warp"],
                    note="32 sectors per request; L1/L2 catch part of the reuse")]


def _path_rows(ctx, cupy, course) -> list:
    """The five load/store paths of section 6 on one stream, timed in one interleaved run."""
    m = course.lesson_cell(STEM, "hints").compile()
    n4 = 1 << 25
    x = cupy.random.default_rng(47).random(4 * n4, dtype=cupy.float32)
    y = cupy.empty_like(x)
    sms = course.device_info().sm_count
    launches = {}
    for name in ("stream_plain", "stream_restrict", "stream_ldg", "stream_cg", "stream_cs"):
        k = m.kernel(name)
        grid = sms * k.occupancy(256)
        launches[name] = lambda k=k, g=grid: k(g, 256, x, y, 3.0, n4)
        for size in (4, 4 * 300_007):   # one float4, then a length no grid divides
            xv, yv = x[:size], cupy.full(size, cupy.nan, dtype=cupy.float32)
            k(grid, 256, xv, yv, 3.0, size // 4)
            assert bool((yv[: size // 4 * 4] == 3.0 * xv[: size // 4 * 4]).all()), f"{name} wrong at {size}"
    t = ctx.interleaved(launches)
    plain = t["stream_plain"].gbps(32 * n4)
    return [ctx.row(f"load path {name}, 2^25 float4s", t[name].gbps(32 * n4), "GB/s",
                    anchor="stream_plain (ld.global/st.global), same run", anchor_value=plain,
                    note=f"median {t[name].median_ms:.3f} ms") for name in launches if name != "stream_plain"]


def rows(ctx) -> list:
    import cupy
    import course
    out = []
    # one function per section: its arrays are freed when it returns
    for section in (_scale_rows, _stride_rows, _row_scale_rows, _walk_rows, _path_rows):
        out += section(ctx, cupy, course)
        cupy.get_default_memory_pool().free_all_blocks()
    return out
