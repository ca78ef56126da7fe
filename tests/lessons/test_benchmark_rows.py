"""The benchmark suite's rows (benchmarks/rows/NN_topic.py): importable everywhere; on a GPU they run and meet
their targets (the suite itself, `python -m benchmarks`, records them)."""
from __future__ import annotations

import importlib

import pytest

from repo_helpers import REPO, import_course

STEMS = tuple(sorted(p.stem for p in (REPO / "benchmarks" / "rows").glob("[0-9][0-9]_*.py")))


@pytest.mark.parametrize("stem", STEMS)
def test_rows_module_imports_without_a_gpu(stem):
    """Does benchmarks/rows/<stem>.py import without touching CUDA and expose rows(ctx)?"""
    import_course()
    mod = importlib.import_module(f"benchmarks.rows.{stem}")
    assert callable(mod.rows)


def test_there_is_a_rows_module_per_chapter():
    """Does every chapter notebook have its benchmark rows?"""
    assert STEMS == tuple(sorted(p.stem for p in (REPO / "chapters").glob("*.ipynb")))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_rows_run_and_meet_targets(stem):
    """On a GPU, does every row come out finite, and does every row with a target meet it?"""
    course = import_course()
    from benchmarks._suite import Context
    rows = importlib.import_module(f"benchmarks.rows.{stem}").rows(Context(course.ceilings(), stem))
    assert rows
    for r in rows:
        assert r.value == r.value and r.value > 0, f"{r.name}: {r.value}"
    missed = [f"{r.name}: ratio {r.ratio:.3f}, target {r.target}" for r in rows if r.ok is False]
    assert not missed, "; ".join(missed)


def test_graded_launches_match_the_specs():
    """Do the benchmark rows launch the graded references with the grader's own geometry?"""
    import_course()
    from autograder import get_exercise
    b04 = importlib.import_module("benchmarks.rows.04_coalescing")
    ex = get_exercise("04_coalescing", "row_scale")
    for rows, cols in ((1, 1), (16384, 4099), (1009, 37)):
        grid, block, _smem = ex.launch({"rows": rows, "cols": cols}, dict(ex.launch_defaults))
        assert (grid, block) == b04._row_scale_launch(rows, cols)
    b06 = importlib.import_module("benchmarks.rows.06_building_blocks")
    ex = get_exercise("06_building_blocks", "histogram256")
    for n in (1, 1_000_003, 1 << 26):
        grid, block, _smem = ex.launch({"n": n}, dict(ex.launch_defaults))
        assert (grid, block) == b06._hist_launch(n)
