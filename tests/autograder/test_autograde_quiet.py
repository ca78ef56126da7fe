"""Under `nbgrader autograde` (NBGRADER_EXECUTION=autograde) a notebook's previews and %%gpu self-checks do
nothing: the kernels were graded before the notebook ran, in the grader's own processes."""
from __future__ import annotations

import types

import pytest

import course._magic as magic
from autograder import nb


def test_preview_runs_no_grading_under_autograde(monkeypatch, capsys):
    """Does preview() print that it skipped, and start no grading process?"""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr(nb, "grade_in_subprocess", lambda *a, **k: pytest.fail("preview graded under autograde"))
    assert nb.preview("01_first_kernel", "saxpy", "__global__ void saxpy() {}") is None
    assert "preview skipped while the instructor autogrades" in capsys.readouterr().out


def test_preview_grades_outside_autograde(monkeypatch, capsys):
    """And without it, does preview() grade (the same call, so the test above can fail)?"""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    calls = []
    report = types.SimpleNamespace(feedback=lambda: "graded")
    monkeypatch.setattr(nb, "grade_in_subprocess", lambda *a, **k: calls.append(a) or report)
    assert nb.preview("01_first_kernel", "saxpy", "__global__ void saxpy() {}") is report
    assert len(calls) == 1 and "graded" in capsys.readouterr().out


@pytest.mark.parametrize("mode, runs", [("autograde", 0), ("validate", 1), (None, 1)])
def test_gpu_cell_runs_only_outside_autograde(monkeypatch, capsys, mode, runs):
    """Does a %%gpu cell run nothing under autograde, and run its code otherwise (on a GPU machine)?"""
    if mode is None:
        monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    else:
        monkeypatch.setenv("NBGRADER_EXECUTION", mode)
    import course._env as env
    monkeypatch.setattr(env, "gpu_available", lambda: True)
    ran = []
    magic.gpu_cell("check", "x = 1", types.SimpleNamespace(run_cell=ran.append))
    assert len(ran) == runs
    if runs == 0:
        assert "Not run while the instructor autogrades: check." in capsys.readouterr().out
