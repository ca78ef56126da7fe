"""The benchmark rows of chapters 01-03: importable everywhere; on a GPU they run and meet their targets."""
from __future__ import annotations

import importlib

import pytest

from conftest import import_course

STEMS = ("01_first_kernel", "02_memory_transfer", "03_streams")


@pytest.mark.parametrize("stem", STEMS)
def test_rows_module_imports_without_a_gpu(stem):
    """Does benchmarks/chapters/<stem>.py import without touching CUDA and expose rows(ctx)?"""
    import_course()
    mod = importlib.import_module(f"benchmarks.chapters.{stem}")
    assert callable(mod.rows)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("stem", STEMS)
def test_rows_run_and_meet_targets(stem):
    """On a GPU, does every row come out finite, and does every row with a target meet it?"""
    course = import_course()
    from benchmarks._suite import Context
    rows = importlib.import_module(f"benchmarks.chapters.{stem}").rows(Context(course.ceilings(), stem))
    assert rows
    for r in rows:
        assert r.value == r.value and r.value > 0, f"{r.name}: {r.value}"
    missed = [f"{r.name}: ratio {r.ratio:.3f}, target {r.target}" for r in rows if r.ok is False]
    assert not missed, "; ".join(missed)
