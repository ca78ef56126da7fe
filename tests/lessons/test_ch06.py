"""Chapter 06 helpers: variant bookkeeping, exact inputs, tree and scan arithmetic, and (GPU) every kernel
of the lesson and the three graded references at odd sizes, launched twice to prove their state resets."""
from __future__ import annotations

import json
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
    """Are the variants numbered 1..N in order, one header line each, and is every reduceN kernel listed?"""
    nums = [v.number for v in ch06.REDUCE_VARIANTS]
    assert nums == list(range(1, len(nums) + 1))
    assert ch06.header_lines() == [f"variant {v.number}: {v.header}" for v in ch06.REDUCE_VARIANTS]
    defined = set(re.findall(r"__global__ void (reduce\d_\w+)\(", ch06.REDUCE_SHARED_SRC + ch06.REDUCE_SHUFFLE_SRC))
    listed = {v.kernel for v in ch06.REDUCE_VARIANTS} | {"reduce6_final"}
    assert defined == listed
    for v in ch06.REDUCE_VARIANTS:
        assert f"// {v.number}:" in v.src, f"variant {v.number} has no numbered comment in its source"


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
    """Do all lesson sources and the graded references compile for sm_75..sm_90 without spilling?"""
    course = import_course()
    srcs = [ch06.VEC_ADD4_SRC, ch06.REDUCE_SHARED_SRC, ch06.REDUCE_SHUFFLE_SRC, ch06.SCAN_BLOCK_SRC,
            ch06.SCAN_FULL_SRC, ch06.HIST_SRC] + [p.read_text() for p in sorted(SOL.glob("*.cu"))]
    for src in srcs:
        for arch in ARCHS:
            prog = course.compile_for_arch(src, arch)
            assert all(r.spill_stores == 0 for r in prog.resources.values()), arch


def test_scan_tile_items_matches_spec(ch06):
    """Is the reference scan's tile (TILE_ITEMS x 256) the tile the grader launches with?"""
    import importlib.util
    spec = importlib.util.spec_from_file_location("s06", REPO / "autograder/specs/06_building_blocks.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    items = int(re.search(r"#define\s+TILE_ITEMS\s+(\d+)", (SOL / "scan_inclusive.cu").read_text()).group(1))
    assert items * 256 == m.SCAN_TILE
    assert "#define MAX_BLOCKS 1024" in (SOL / "reduce_sum.cu").read_text() and m.MAX_BLOCKS == 1024


def test_lesson_cells_are_the_module_sources(ch06):
    """Are the kernels the helpers run the same text as the notebook's %%cuda cells?"""
    nb = json.loads((REPO / "chapters" / "06_building_blocks.ipynb").read_text())
    cells = ["".join(c["source"]).split("\n", 1)[1] for c in nb["cells"]
             if c["cell_type"] == "code" and "".join(c["source"]).startswith("%%cuda")]
    for src in (ch06.VEC_ADD4_SRC, ch06.REDUCE_SHARED_SRC, ch06.REDUCE_SHUFFLE_SRC, ch06.SCAN_BLOCK_SRC,
                ch06.SCAN_FULL_SRC, ch06.HIST_SRC):
        assert src.rstrip("\n") in cells


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


@pytest.mark.gpu
@pytest.mark.parametrize("number", [1, 2, 3, 4, 5, 6])
def test_reduction_variants_exact(ch06, number):
    """Does every variant sum integer-valued inputs exactly, for several block sizes?"""
    for block in (64, 256, 1024):
        ch06.check_reduction(ch06.REDUCE_VARIANTS[number - 1], block, sizes=SIZES)


@pytest.mark.gpu
def test_lesson_scans_and_histograms(ch06):
    """Are the three-launch scan and both lesson histograms exact at odd sizes?"""
    import cupy
    course = import_course()
    for n in SIZES:
        xh, _ = ch06.exact_inputs(n, seed=n)
        assert np.array_equal(ch06.scan_full(cupy.asarray(xh)).get(), np.cumsum(xh.astype(np.int64)).astype(np.float32))
    m = course.compile(ch06.HIST_SRC)
    for n in SIZES:
        dh = ch06.hist_inputs(n, 37, seed=n)
        for name in ("hist_global", "hist_shared"):
            h = cupy.zeros(256, dtype=cupy.uint32)
            m.kernel(name)(min(-(-n // 256), 264), 256, cupy.asarray(dh), h, n)
            assert np.array_equal(h.get(), np.bincount(dh, minlength=256)), (name, n)


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
