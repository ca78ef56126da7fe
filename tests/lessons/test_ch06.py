"""Chapter 06 helpers: the variants against the lesson cells, exact inputs, launch shapes, tree and scan
arithmetic, and (GPU) every kernel of the lesson, the three tables, and the three graded references at odd
sizes, launched twice to prove their state resets."""
from __future__ import annotations

import re

import numpy as np
import pytest

from repo_helpers import REPO, import_course

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
