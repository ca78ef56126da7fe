"""Chapter 04's second exercise, aos_to_soa: the NumPy reference on a case worked by hand, the launch and the
numbers the exercise text quotes (from the spec and the sector model), and (GPU) the reference kernel with
the grader's grid and with grids far too small, which only a correct tile loop survives."""
from __future__ import annotations

import json

import numpy as np
import pytest

from repo_helpers import REPO, import_course

STEM = "04_coalescing"
EXERCISE_NB = REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb"


@pytest.fixture(scope="module")
def ex():
    import_course()
    from autograder import get_exercise
    return get_exercise(STEM, "aos_to_soa")


def _section_text() -> str:
    """The markdown of the aos_to_soa section, from its `## ` heading to the next one, with each run of
    whitespace made one space (the text wraps wherever it likes)."""
    cells = json.loads(EXERCISE_NB.read_text(encoding="utf-8"))["cells"]
    md = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    start = next(i for i, s in enumerate(md) if s.startswith("## ") and "particle" in s)
    end = next((i for i in range(start + 1, len(md)) if md[i].startswith("## ")), len(md))
    return " ".join(" ".join(md[start:end]).split())


def test_reference_on_a_hand_made_case(ex):
    """Do three particles (1, 2, 3), (4, 5, 6), (7, 8, 9) become the planes (1, 4, 7), (2, 5, 8), (3, 6, 9),
    whether the records come as an (n, 3) array or flat?"""
    src = np.arange(1, 10, dtype=np.float32)
    for shaped in (src.reshape(3, 3), src):
        got = ex.reference({"n": np.int32(3), "src": shaped})
        assert sorted(got) == ["xs", "ys", "zs"]
        np.testing.assert_array_equal(got["xs"], [1, 4, 7])
        np.testing.assert_array_equal(got["ys"], [2, 5, 8])
        np.testing.assert_array_equal(got["zs"], [3, 6, 9])
        assert all(a.dtype == np.float32 and a.flags.c_contiguous for a in got.values())


def test_reference_on_one_particle(ex):
    """Is n = 1 one record to three one-element planes?"""
    got = ex.reference({"n": np.int32(1), "src": np.array([[0.5, -0.25, 2.0]], np.float32)})
    assert (got["xs"].tolist(), got["ys"].tolist(), got["zs"].tolist()) == ([0.5], [-0.25], [2.0])


def test_launch_caps_the_grid_where_the_text_says(ex):
    """Is the block 256 threads, and does the grid stop growing exactly after the particle count the exercise
    text names (so a kernel without a loop fails at the public 1,000,003)?"""
    cap, block, _ = ex.launch({"n": 1 << 30}, {})
    assert block == 256, "the exercise's shared tile is sized for 256 threads"
    assert ex.launch({"n": 1}, {}) == (1, block, 0)
    assert ex.launch({"n": block + 1}, {}) == (2, block, 0)
    last_uncapped = block * cap
    assert ex.launch({"n": last_uncapped}, {})[0] == cap and ex.launch({"n": last_uncapped + 1}, {})[0] == cap
    assert any(s.get("n") == 1_000_003 for s in ex.sizes) and 1_000_003 > last_uncapped
    text = _section_text()
    assert f"from {last_uncapped + 1:,} particles on" in text, "the text should name where the loop starts to matter"
    assert f"blocks of **{block} threads**" in text and f"{cap})` blocks" in text


def test_quoted_access_counts_match_the_models():
    """Are the sector and bank counts the text and the reference's comments quote what course.access says:
    a naive load 12 sectors in 3 lines (33%), a staged load 4, the tile read tile[3t] conflict-free?"""
    import_course()
    import course.access as access
    naive = access.warp_access(lambda lane: 3 * lane)
    assert (naive.sectors_per_request, naive.lines.size, round(100 * naive.efficiency)) == (12, 3, 33)
    assert access.warp_access(lambda lane: lane).sectors_per_request == 4
    assert access.bank_access(lambda lane: 3 * lane).degree == 1
    assert access.bank_access(lambda lane: 2 * lane).degree == 2   # why an odd stride matters
    text = _section_text()
    assert "12 sectors in 3 lines" in text
    assert "384 bytes" in text and "128 bytes" in text


def test_correctness_only_and_the_text_says_why(ex):
    """No speed points (the naive kernel the notebook gives measured too close to the staged one on an H100),
    and does the exercise text say so, with the ratio the spec's comment records?"""
    assert ex.points.speed == 0 and ex.points.correctness == 8
    text = " ".join(_section_text().split())
    assert "Speed earns none here" in text and "about 0.94 of the staged one" in text
    spec = (REPO / "autograder" / "specs" / f"{STEM}.py").read_text()
    assert "(naive.cu) 0.935" in spec   # 0.935 as recorded, quoted as "about 0.94"


@pytest.mark.gpu
def test_reference_any_grid():
    """Is the reference exact at awkward sizes with the grader's grid, with one block and with three (each block
    then loops over many tiles, and the last tile is partial)?"""
    import cupy
    course = import_course()
    src_text = (REPO / "solutions" / STEM / "aos_to_soa.cu").read_text()
    k = course.compile(src_text).kernel("aos_to_soa")
    rng = cupy.random.default_rng(5)
    for n in (1, 2, 31, 255, 256, 257, 1023, 1024, 1025, 4099, 1_000_003):
        src = rng.random((n, 3), dtype=cupy.float32)
        for grid in (min(-(-n // 256), 2048), 1, 3):
            planes = [cupy.full(n, cupy.nan, dtype=cupy.float32) for _ in range(3)]
            k(grid, 256, src, *planes, n)
            for c, plane in enumerate(planes):
                assert bool((plane == src[:, c]).all()), (n, grid, "xyz"[c])
