"""Chapter 06 helpers: the variants against the lesson cells, exact inputs, launch shapes, tree and scan
arithmetic, and (GPU) every kernel of the lesson, the three tables, and the three graded references at odd
sizes, launched twice to prove their state resets."""
from __future__ import annotations

import re

import numpy as np
import pytest

from repo_helpers import (QUOTE_NUMBER, REPO, chapter_markdown, check_quotes, fail_on, import_course, quote_close,
                          read_json_notebook, recorded_rows, recorded_sweep)

ARCHS = ("sm_75", "sm_80", "sm_90")
STEM = "06_building_blocks"
SOL = REPO / "solutions" / "06_building_blocks"


@pytest.fixture(scope="module")
def ch06():
    import_course()
    from course.lessons import ch06
    return ch06


def test_variants_numbered_and_defined(ch06):
    """Are the variants the reduceN kernels of the lesson cells, numbered 1..N in order, one header line each,
    and does every kernel a table needs come from a lesson cell?"""
    course = import_course()
    cells = course.lesson_cells(STEM)
    defined = sorted(k for k in cells if re.fullmatch(r"reduce\d_\w+", k) and k != "reduce6_final")
    assert list(ch06.REDUCE_VARIANTS) == defined
    for i, (name, (per_thread, tree, about)) in enumerate(ch06.REDUCE_VARIANTS.items(), 1):
        assert name.startswith(f"reduce{i}_") and about and per_thread in (0, 1, 2)
        assert f"// {i}:" in cells[name].source, f"variant {i} has no numbered comment in its cell"
        assert tree == ("extern __shared__" in cells[name].source), f"{name}: dynamic shared memory or not?"
    for name in (*ch06.REDUCE_KERNELS, *ch06.SCAN_KERNELS, *ch06.HIST_KERNELS, "vec_add4", "scan_block_warp"):
        assert name in cells[name].kernels


def test_exact_inputs_sum_exactly_in_any_order(ch06):
    """Do float32 sums and prefix sums of the exact inputs equal the integer ones, in several orders?"""
    x, want = ch06.exact_inputs(1_000_003, seed=3)
    assert x.dtype == np.float32 and np.abs(x).max() <= 4
    for order in (x, x[::-1], np.sort(x)):
        assert float(np.cumsum(order, dtype=np.float32)[-1]) == want
    assert np.array_equal(np.cumsum(x, dtype=np.float32), np.cumsum(x.astype(np.int64)).astype(np.float32))


def test_active_lanes(ch06):
    """Do the two trees count threads and warps per step as the lesson states (47 against 12 warp-steps)?"""
    inter, seq = ch06.active_lanes(256, "interleaved"), ch06.active_lanes(256, "sequential")
    assert sum(w for *_, w in inter) == 47 and sum(w for *_, w in seq) == 12
    assert [a for _, a, _ in inter] == [a for _, a, _ in seq] == [128, 64, 32, 16, 8, 4, 2, 1]
    with pytest.raises(ValueError, match="power of two"):
        ch06.active_lanes(100, "sequential")
    with pytest.raises(ValueError, match="variant"):
        ch06.active_lanes(256, "diagonal")


def test_hillis_steele(ch06):
    """Does the Hillis-Steele simulation end at the inclusive scan after ceil(log2 n) steps?"""
    for n in (1, 2, 7, 8, 33):
        v = np.arange(1, n + 1)
        steps = ch06.hillis_steele_steps(v)
        assert np.array_equal(steps[-1], np.cumsum(v)) and len(steps) - 1 == int(np.ceil(np.log2(n)))


def test_hist_inputs(ch06):
    """Do histogram inputs use exactly `distinct` bins inside 0..255?"""
    for d in (1, 2, 16, 256):
        h = ch06.hist_inputs(10_000, d, seed=d)
        assert h.dtype == np.int32 and len(np.unique(h)) == d and h.min() >= 0 and h.max() <= 255
    with pytest.raises(ValueError):
        ch06.hist_inputs(10, 300)


def test_kernels_compile(ch06):
    """Do all lesson cells and the graded references compile for sm_75..sm_90 without spilling?"""
    course = import_course()
    srcs = {c.source for c in course.lesson_cells(STEM).values()} | {p.read_text() for p in SOL.glob("*.cu")}
    for src in srcs:
        for arch in ARCHS:
            prog = course.compile_for_arch(src, arch)
            assert all(r.spill_stores == 0 for r in prog.resources.values()), arch


def test_reference_launches_match_spec(ch06):
    """Is the reference scan's tile (TILE_ITEMS x 256) the tile the grader and the lesson launch with, and do
    the lesson's reference launches agree with the grader's?"""
    import importlib.util
    spec = importlib.util.spec_from_file_location("s06", REPO / "autograder/specs/06_building_blocks.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    items = int(re.search(r"#define\s+TILE_ITEMS\s+(\d+)", (SOL / "scan_inclusive.cu").read_text()).group(1))
    assert items * 256 == m.SCAN_TILE == ch06.SCAN_TILE
    assert "#define MAX_BLOCKS 1024" in (SOL / "reduce_sum.cu").read_text() and m.MAX_BLOCKS == 1024
    for n in (1, 4097, 1 << 26):
        grader = m.scan_launch({"n": n}, {"tile": m.SCAN_TILE, "block": 256})
        assert ch06.reference_launch("scan_inclusive", n) == grader[:2]
    with pytest.raises(ValueError, match="reduce_sum"):
        ch06.reference_launch("scan", 10)


class _FakeKernel:
    """Records launches instead of making them."""

    def __init__(self, name, calls):
        self.name, self.calls = name, calls

    def __call__(self, grid, block, *args, shared_mem=0):
        self.calls.append((self.name, grid, block, shared_mem))


def test_reduce_launch_shapes(ch06, monkeypatch):
    """Does each variant launch as the lesson says: one thread per element (1, 2) or per two (3, 4) with a tree
    in dynamic shared memory for 1-3, one wave of blocks for 5 and 6, and 6 in two launches?"""
    calls = []
    ks = ch06.lesson_kernels(ch06.REDUCE_KERNELS, [_FakeKernel(k, calls) for k in ch06.REDUCE_KERNELS])
    monkeypatch.setattr(ch06, "reduction_grid", lambda block, kernel=None, **kw: 264)
    x, partials = np.zeros(1_000_003, np.float32), np.zeros(1024, np.float32)
    for name in ch06.REDUCE_VARIANTS:
        ch06.reduce_launch(ks, name, x, None, 256, partials)
    assert calls == [("reduce1_interleaved", 3907, 256, 1024), ("reduce2_sequential", 3907, 256, 1024),
                     ("reduce3_first_add", 1954, 256, 1024), ("reduce4_shuffle", 1954, 256, 0),
                     ("reduce5_grid_stride", 264, 256, 0), ("reduce6_partials", 264, 256, 0),
                     ("reduce6_final", 1, 1024, 0)]
    with pytest.raises(ValueError, match="power-of-two"):
        ch06.reduce_launch(ks, "reduce1_interleaved", x, None, 96)


def test_plots_and_sweeps_without_gpu(ch06):
    """Do the tree and scan drawings work on a CPU, and the sweeps build there?"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ch06.plot_active_lanes(128)
    ax = ch06.plot_scan_steps((1, 2, 3, 4, 5))
    assert "3 steps" in ax.get_title()
    plt.close("all")
    assert ch06.reduce_sweep(record=False).params["variant"] == [1, 2, 3, 4, 5, 6]
    assert ch06.hist_sweep(record=False).params["kernel"] == ["global", "shared"]


# --- figures: no legend over a line ----------------------------------------------------------------

def legend_problems(ax, pad_px: float = 2.0) -> list:
    """Why the legend of ``ax`` hides data, or is cut off: each line's points, and points along its
    segments (a line can cross a legend between two markers), in display coordinates, against the legend's
    box; and the box against the figure's."""
    fig = ax.figure
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent(fig.canvas.get_renderer()).padded(pad_px)
    problems = [] if fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1) else [
        f"the legend {box.bounds} reaches outside the figure {fig.bbox.bounds}"]
    t = np.linspace(0.0, 1.0, 41)[:, None]
    for line in ax.get_lines():
        xy = line.get_transform().transform(np.column_stack([np.asarray(d, float) for d in line.get_data()]))
        pts = np.concatenate([xy] + [a + t * (b - a) for a, b in zip(xy[:-1], xy[1:])])
        hit = pts[(pts[:, 0] >= box.x0) & (pts[:, 0] <= box.x1) & (pts[:, 1] >= box.y0) & (pts[:, 1] <= box.y1)]
        if len(hit):
            problems.append(f"line {line.get_label()!r} runs under the legend at display point {hit[0].round(1)}")
    return problems


@pytest.fixture
def recorded_only(monkeypatch):
    """Sweeps replay the recordings, even on a machine with a GPU (these tests read the recorded data)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from course import _env
    monkeypatch.setattr(_env, "_probe", lambda: (None, "no driver"))
    yield
    plt.close("all")


def test_active_lanes_legend_covers_no_line(ch06, recorded_only):
    """Issue #16 item 3: does the tree-steps chart keep its legend off every line, inside the figure, where
    matplotlib's "best" placement put it over the interleaved curve?"""
    ax = ch06.plot_active_lanes(256)
    fail_on(legend_problems(ax), "chapter 06, warps per tree step:")
    ax.legend(fontsize=8, loc="best")           # the old placement: the check must see it
    assert legend_problems(ax), "the overlap check missed the legend placement that issue #16 reported"


def test_reduce_sweep_figure(ch06, recorded_only):
    """Does the block-size figure draw every variant from the recording, the two atomic lines at the fitted
    ns, and keep its legend off every line?"""
    ax = ch06.plot_reduce_sweep()
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels[:6] == [f"{i}: {k}" for i, k in enumerate(ch06.REDUCE_VARIANTS, 1)]
    assert sum("one atomic per" in lab for lab in labels) == 2 and "recorded on NVIDIA H100" in ax.get_title()
    fail_on(legend_problems(ax), "chapter 06, sum by block size:")


# --- the text against the recordings --------------------------------------------------------------

def _rows() -> tuple:
    """(GB/s of each recorded row of the chapter by name, the copy ceiling)."""
    rows, ceilings = recorded_rows(STEM)
    return {k: r["value"] for k, r in rows.items()}, ceilings["copy_gbps"]


def test_reduce_sweep_shows_the_atomic_limit(ch06):
    """Does the recorded block-size sweep say what the lesson says: one constant near 1.9 ns per block fits
    variants 1-4 at small blocks; 3 and 4 agree within 1% and double from 32 to 256 threads; variant 1 leaves
    the line at 256; the shuffles win only at 512 and 1,024; 5 and 6 stay fast at every block?"""
    rates = recorded_sweep("06_building_blocks_reduce")        # (block, variant) -> GB/s
    fit = ch06.atomic_fit(rates)
    assert 1.8 <= fit <= 2.0, fit
    ns = ch06.atomic_ns(rates)
    assert set(v for _b, v in ns) == {1, 2, 3, 4}
    assert all(abs(ns[b, v] / fit - 1) < 0.1 for b in (32, 64, 128) for v in (1, 2, 3, 4))
    for b in (32, 64, 128, 256):
        assert abs(rates[b, 3] / rates[b, 4] - 1) < 0.01, b
    for v in (2, 3, 4):
        for b in (32, 64, 128):
            assert 1.8 < rates[2 * b, v] / rates[b, v] < 2.1, (v, b)
    assert ns[256, 1] > 1.3 * fit and ns[256, 2] < 1.1 * fit
    assert rates[256, 1] > rates[512, 1] > rates[1024, 1]
    assert ns[512, 4] < 1.1 * fit < ns[512, 3] and rates[1024, 4] > 1.3 * rates[1024, 3]
    assert min(rates[b, v] for b in (32, 64, 128, 256, 512, 1024) for v in (5, 6)) > max(
        rates[b, v] for b in (32, 64, 128, 256, 512, 1024) for v in (1, 2, 3, 4))


def test_histogram_sweep_is_flat_past_one_value():
    """Does the recorded histogram sweep say what the lesson says: global atomics flat from 2 to 256 distinct
    values, a single value clearly worse, the privatized kernel far faster and nearly flat throughout?"""
    rates = recorded_sweep("06_building_blocks_histogram")     # (distinct, kernel) -> GB/s
    spread = [rates[d, "global"] for d in (2, 4, 8, 16, 32, 64, 128, 256)]
    assert max(spread) < 2 * min(spread) and rates[1, "global"] < 0.6 * min(spread)
    shared = [rates[d, "shared"] for d in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    assert max(shared) < 1.2 * min(shared) and min(shared) > 50 * max(spread)


def _quotes(ch06):
    """(phrase of the chapter, the recorded figures its numbers quote, in order)."""
    rows, copy = _rows()
    row = {k.split(": ")[-1]: v for k, v in rows.items()}
    red, hist = recorded_sweep("06_building_blocks_reduce"), recorded_sweep("06_building_blocks_histogram")
    glob = [hist[d, "global"] for d in (2, 4, 8, 16, 32, 64, 128, 256)]
    shared = [hist[d, "shared"] for d in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    fast = [red[b, v] for b in (32, 64, 128, 256, 512, 1024) for v in (5, 6)]
    return [
        ("roughly 3,000 GB/s the benchmark suite records for a copy", [copy]),
        ("978.5 against 1093 GB/s", [row["reduce3_first_add"], row["reduce4_shuffle"]]),
        ("994 against 998 GB/s", [red[256, 3], red[256, 4]]),
        ("at about 1.9 ns per atomic", [ch06.atomic_fit(red)]),
        ("(139, 270, 526 and 998 GB/s", [red[b, 4] for b in (32, 64, 128, 256)]),
        ("(71 to 527 GB/s)", [red[32, 2], red[256, 2]]),
        ("(358, 307 and 254 GB/s", [red[b, 1] for b in (256, 512, 1024)]),
        ("still on its line (1,999 GB/s)", [red[512, 4]]),
        ("has left it (1,424 GB/s)", [red[512, 3]]),
        ("it keeps 1,806 against 1,166 GB/s", [red[1024, 4], red[1024, 3]]),
        ("between 2,235 and 2,713 GB/s", [min(fast), max(fast)]),
        ("The sweep recorded 270.7 GB/s", [red[128, 2]]),
        ("(between 9.6 and 15.5 GB/s)", [min(glob), max(glob)]),
        ("clearly worse (5.4 GB/s)", [hist[1, "global"]]),
        ("(between 1,638 and 1,798 GB/s)", [min(shared), max(shared)]),
    ]


def test_quoted_figures_match_the_recordings(ch06):
    """Issue #22: is every figure the chapter quotes from a recording present and equal to what
    benchmarks/results holds (to its last printed digit), so the text cannot drift from the data?"""
    check_quotes(STEM, _quotes(ch06))


def test_every_rate_in_the_text_is_recorded_or_derived(ch06):
    """Is every "N GB/s" of the chapter's text a recorded figure (a row, a sweep point, the copy ceiling) or
    one of its few stated derivations (the atomic limit, micro-exercise answers)?"""
    rows, copy = _rows()
    red = recorded_sweep("06_building_blocks_reduce")
    recorded = [*rows.values(), *red.values(), *recorded_sweep("06_building_blocks_histogram").values(), copy]
    fit = ch06.atomic_fit(red)
    derived = {"1,100": 2048 / fit, "270": 512 / 1.9, "1,800": 0.9 * 3000 * 8 / 12, "2,700": 0.9 * 3000}
    text = " ".join(chapter_markdown(STEM))
    problems = []
    for q in re.findall(rf"({QUOTE_NUMBER}) GB/s", text):
        if q in derived:
            ok = abs(float(q.replace(",", "")) / derived[q] - 1) < 0.03
        else:
            ok = any(quote_close(q, v) for v in recorded if v)
        if not ok:
            problems.append(f"{q} GB/s is neither recorded in benchmarks/results nor a stated derivation")
    fail_on(problems, "chapters/06_building_blocks.ipynb:")


def test_bank_claims_of_the_two_trees():
    """Do the text's bank claims hold: variant 1 (`tid % (2 step) == 0`, reading s[tid] and s[tid + step])
    puts a warp's lanes in distinct banks at every step, while the strided index 2 * step * tid puts two lanes
    in a bank at the first step and four at the second?"""
    def worst(addresses):
        return max(np.bincount(np.asarray(addresses) % 32, minlength=32)) if len(addresses) else 0

    for step in (1, 2, 4, 8, 16):
        for warp in range(8):
            tids = [t for t in range(32 * warp, 32 * warp + 32) if t % (2 * step) == 0]
            assert worst(tids) == 1 and worst([t + step for t in tids]) == 1, (step, warp)
    strided = {step: worst([2 * step * t for t in range(32) if 2 * step * t < 256]) for step in (1, 2)}
    assert strided == {1: 2, 2: 4}


def test_launch_bounds_cap_the_registers(ch06):
    """Does `__launch_bounds__(1024, 2)`, as the lesson says, cap a thread at 65,536 / (2 x 1,024) = 32
    registers, on a lesson kernel that uses more without it?"""
    course = import_course()
    src = course.lesson_cell(STEM, "vec_add4").source
    free = course.compile_for_arch(src, "sm_90").resources["vec_add4"].registers
    bounded = course.compile_for_arch(src.replace("void vec_add4", "void __launch_bounds__(1024, 2) vec_add4"),
                                      "sm_90").resources["vec_add4"].registers
    assert bounded <= 32 < free, (free, bounded)


# --- GPU ---------------------------------------------------------------------------------------

SIZES = (1, 33, 4097, 1_000_003, (1 << 22) + 5)


@pytest.fixture(scope="module")
def kernels(ch06):
    """Every kernel the tables launch, compiled from the lesson cells."""
    return ch06.lesson_kernels(ch06.REDUCE_KERNELS + ch06.SCAN_KERNELS + ch06.HIST_KERNELS)


@pytest.mark.gpu
@pytest.mark.parametrize("number", [1, 2, 3, 4, 5, 6])
def test_reduction_variants_exact(ch06, kernels, number):
    """Does every variant sum integer-valued inputs exactly, for several block sizes?"""
    for block in (64, 256, 1024):
        assert ch06.check_reduction(kernels, list(ch06.REDUCE_VARIANTS)[number - 1], block, sizes=SIZES)


@pytest.mark.gpu
@pytest.mark.parametrize("shift", [(0, 0, 0), (1, 1, 1), (2, 0, 0), (0, 3, 0), (0, 0, 1)])
def test_vec_add4_on_misaligned_views(shift):
    """Does vec_add4 add exactly from views that start 0-3 floats past a 16-byte boundary, one pointer or all
    three (issue #22: it cast them to float4 untested, and a float4 access to such an address faults)?"""
    import cupy
    course = import_course()
    k = course.lesson_cell(STEM, "vec_add4").kernel("vec_add4")
    n = 1_000_003
    rng = cupy.random.default_rng(7)
    x, y = rng.random(n + 3, dtype=cupy.float32), rng.random(n + 3, dtype=cupy.float32)
    z = cupy.full(n + 3, cupy.nan, dtype=cupy.float32)
    xs, ys, zs = x[shift[0]:shift[0] + n], y[shift[1]:shift[1] + n], z[shift[2]:shift[2] + n]
    k(264, 256, xs, ys, zs, n)
    cupy.cuda.Device().synchronize()
    course.assert_close(zs, xs + ys, rtol=0, atol=0, name=f"vec_add4 on views shifted by {shift} floats")


@pytest.mark.gpu
def test_reduction_check_catches_a_lost_element(ch06, kernels):
    """Does the exact check fail a sum that drops one element (the last, a 2 in those inputs, by launching on
    n - 1 elements)?"""
    course = import_course()
    with pytest.raises(course.CheckError, match="wrong at n=33"):
        ch06.check_exact("sum", lambda x, out: ch06.reduce_launch(kernels, "reduce5_grid_stride", x[:-1], out),
                         "dropped", sizes=(33,))


@pytest.mark.gpu
def test_lesson_scans_and_histograms(ch06, kernels):
    """Are the three-launch scan and both lesson histograms exact at odd sizes and skewed inputs?"""
    import cupy
    assert ch06.check_exact("scan", lambda x, y: ch06.scan_full(kernels, x, y), "three launches", SIZES)
    for name in ch06.HIST_KERNELS:
        assert ch06.check_exact("hist", lambda d, h: ch06.hist_launch(kernels[name], d, h), name, SIZES)
        dh = ch06.hist_inputs(1_000_003, 37, seed=3)
        h = cupy.zeros(256, dtype=cupy.uint32)
        ch06.hist_launch(kernels[name], cupy.asarray(dh), h)
        assert np.array_equal(h.get(), np.bincount(dh, minlength=256)), name


@pytest.mark.gpu
@pytest.mark.slow
def test_tables_check_then_time(ch06, kernels):
    """Do the three lesson tables check and time every row against their CuPy anchor, the references included?"""
    names = {"sum": ["cupy.sum"] + [f"{i}: {k}" for i, k in enumerate(ch06.REDUCE_VARIANTS, 1)]
             + ["reference reduce_sum"],
             "scan": ["cupy.cumsum", "three launches (reduce, then scan)", "single pass (decoupled look-back)"],
             "hist": ["cupy.bincount", "global atomics", "shared-memory privatized", "reference (exercise)"]}
    for kind, table in (("sum", ch06.reduction_table(kernels, n=1 << 24, verbose=False)),
                        ("scan", ch06.scan_table(kernels, n=1 << 24, verbose=False)),
                        ("hist", ch06.histogram_table(kernels, n=1 << 24, verbose=False))):
        assert [r["name"] for r in table] == names[kind]
        assert all(r["rate"] > 0 for r in table)
        assert all(r["anchor"] == names[kind][0] for r in table[1:])


@pytest.mark.gpu
def test_reference_reduce_sum(ch06):
    """Is the single-launch two-stage sum exact at odd sizes, twice in a row, for the grader's grids?"""
    import cupy
    course = import_course()
    k = course.compile((SOL / "reduce_sum.cu").read_text()).kernel("reduce_sum")
    out = cupy.empty(1, dtype=cupy.float32)
    for n in SIZES:
        xh, want = ch06.exact_inputs(n, seed=n)
        x = cupy.asarray(xh)
        for block in (32, 256, 1024):
            for _ in range(2):
                out.fill(cupy.nan)
                k(min(-(-n // (16 * block)), 1024), block, x, out, n)
                assert float(out.get()[0]) == want, (n, block)


@pytest.mark.gpu
def test_reference_scan(ch06):
    """Is the single-pass scan exact at odd sizes, on repeated launches, small grids and unaligned views?"""
    import cupy
    course = import_course()
    k = course.compile((SOL / "scan_inclusive.cu").read_text()).kernel("scan_inclusive")
    for n in SIZES + ((1 << 25) + 7,):
        xh, _ = ch06.exact_inputs(n, seed=n)
        want = np.cumsum(xh.astype(np.int64)).astype(np.float32)
        x = cupy.asarray(xh)
        for grid in (-(-n // 4096), 3):          # one block per tile, and a few blocks looping over tiles
            y = cupy.full(n, cupy.nan, dtype=cupy.float32)
            k(grid, 256, x, y, n)
            assert np.array_equal(y.get(), want), (n, grid)
    xh, _ = ch06.exact_inputs(10_001, seed=9)
    x, y = cupy.asarray(xh), cupy.full(10_001, cupy.nan, dtype=cupy.float32)
    k(3, 256, x[1:], y[1:], 10_000)
    assert np.array_equal(y[1:].get(), np.cumsum(xh[1:].astype(np.int64)).astype(np.float32))


@pytest.mark.gpu
def test_reference_histogram(ch06):
    """Is the privatized histogram exact at odd sizes, on a skewed input and an unaligned view with
    out-of-range values?"""
    import cupy
    course = import_course()
    k = course.compile((SOL / "histogram256.cu").read_text()).kernel("histogram256")
    for n in SIZES:
        for distinct in (1, 256):
            dh = ch06.hist_inputs(n, distinct, seed=n)
            h = cupy.zeros(256, dtype=cupy.uint32)
            k(max(1, min(-(-n // 8192), 512)), 512, cupy.asarray(dh), h, n)
            assert np.array_equal(h.get(), np.bincount(dh, minlength=256)), (n, distinct)
    dh = np.random.default_rng(1).integers(-50, 300, 10_001).astype(np.int32)
    h = cupy.zeros(256, dtype=cupy.uint32)
    k(2, 512, cupy.asarray(dh)[1:], h, 10_000)
    keep = dh[1:][(dh[1:] >= 0) & (dh[1:] < 256)]
    assert np.array_equal(h.get(), np.bincount(keep, minlength=256))


def test_exercise_histogram_expectation_quotes_the_recordings():
    """Issue #16 item 5: does the histogram exercise say what more than the lesson's hist_shared full speed
    points need, quoting both kernels' recorded figures and their ratio as benchmarks/results holds them?"""
    nb = read_json_notebook(REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb")
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    rows, _ = _rows()
    lesson = next(v for k, v in rows.items() if "lesson hist_shared" in k)
    reference = next(v for k, v in rows.items() if k.startswith("reference histogram256"))
    assert f"records {lesson:,.0f} GB/s against the reference's {reference:,.0f} GB/s" in text
    assert f"{lesson / reference:.2f}x, under the 0.8x for full speed points" in text


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_compiler_aggregates_the_plain_compaction_atomic(arch):
    """Issue #22 (warp-aggregated atomics): as the lesson says, does ptxas aggregate compact_atomic's
    same-address atomicAdd by itself (one ATOMG with a VOTEU ballot and a SHFL broadcast), and does the
    hand-written compact_warp hold a ballot and a single atomic on sm_90, as the printed counts show?"""
    course = import_course()
    ops = course.sass_opcodes(course.lesson_cell(STEM, "compact_atomic").compile_for_arch(arch).sass())
    plain, by_hand = ops["compact_atomic"], ops["compact_warp"]
    assert plain["ATOMG"] == 1 and plain["VOTEU"] >= 1 and plain["SHFL"] >= 1, plain
    assert by_hand["VOTE"] >= 1 and by_hand["SHFL"] >= 1, by_hand
    if arch == "sm_90":
        assert by_hand["ATOMG"] == 1, by_hand
    text = " ".join(chapter_markdown(STEM))
    assert "On sm_90 both kernels hold a single `ATOMG`" in text and "sm_75 and sm_80" in text


@pytest.mark.gpu
def test_compactions_keep_every_positive_element(ch06):
    """Do both lesson compactions keep exactly the positive elements (in any order) at odd sizes, for a
    capped grid that loops and for blocks of 32 and 256 threads?"""
    import cupy
    course = import_course()
    cell = course.lesson_cell(STEM, "compact_atomic")
    for name in ("compact_atomic", "compact_warp"):
        k = cell.kernel(name)
        for n in SIZES:
            xh = np.random.default_rng(n).standard_normal(n, dtype=np.float32)
            x = cupy.asarray(xh)
            for grid, block in ((-(-n // 256), 256), (3, 32)):
                out, count = cupy.full(n, cupy.nan, dtype=cupy.float32), cupy.zeros(1, dtype=cupy.uint32)
                k(grid, block, x, out, count, n)
                got = np.sort(out[:int(count.get()[0])].get())
                assert np.array_equal(got, np.sort(xh[xh > 0])), (name, n, grid, block)
