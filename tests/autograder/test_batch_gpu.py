"""GPU tier for the class batch's grader guarantees: a kernel that runs out of device memory every time gets
its final "crashed" verdict after one more grading with the GPU to itself, and library-call gradings hold
the GPU lock like kernel gradings (each case's cuBLAS work shared, so never during another's timed pass).

Run on a GPU machine:  python -m pytest tests/autograder/test_batch_gpu.py -m gpu -v
"""
from __future__ import annotations

import json

import pytest

from ag_helpers import ROOT, make_notebook
from autograder import CallExercise, get_exercise, load_chapter

pytestmark = pytest.mark.gpu
pytest.importorskip("distributed")

CH = "01_first_kernel"
OOM = ROOT / "tests" / "autograder" / "corpus" / CH / "saxpy" / "local_memory_oom.cu"


def _grade(root, **kw):
    from autograder.batch import grade_class
    return grade_class(root, progress=False, log=lambda *a: None, **kw)


def test_out_of_memory_every_time_is_the_kernels_final_verdict(tmp_path):
    """Among students graded side by side, does a kernel whose every launch runs out of memory get "crashed"
    (final, with the out-of-memory explanation of a grading alone) and everyone else their own verdict?"""
    root = tmp_path / "submitted"
    for student in ("oom", "s1", "s2", "s3"):
        saxpy = OOM.read_text() if student == "oom" else (ROOT / "solutions" / CH / "saxpy.cu").read_text()
        d = root / student / CH
        d.mkdir(parents=True)
        make_notebook([("code", "%load_ext course", []), ("code", f"%%cuda --name saxpy --no-run\n{saxpy}", [])],
                      d / f"{CH}.ipynb")
    result = _grade(root, chapters=[CH], exercise="saxpy", per_gpu=4)
    rows = {r["student"]: r for r in result.rows}
    oom = rows["oom"]
    reason = json.loads(oom["report"])["reason"]
    assert (oom["status"], oom["final"], oom["points"]) == ("crashed", 1, 0), reason
    assert "out of memory" in reason and "no other grading on the GPU" in reason, reason
    for s in ("s1", "s2", "s3"):
        assert rows[s]["status"] == "passed", rows[s]["feedback"]


def test_call_gradings_hold_the_gpu_lock(tmp_path):
    """Do library-call gradings in a batch pass, each case's driver call holding the GPU lock shared once
    (the grading children's lock events, recorded with AUTOGRADER_TRACE)?"""
    ch = "10_cublas"
    ex = next(e for e in load_chapter(ch) if isinstance(e, CallExercise))
    text = (ROOT / "solutions" / ch / ex.solution_file).read_text()
    root = tmp_path / "submitted"
    students = ("a", "b", "c")
    for student in students:
        d = root / student / ch
        d.mkdir(parents=True)
        make_notebook([("code", "%load_ext course", []),
                       ("code", f"%%cublas --name {ex.name}\n{text}", [f"call:{ex.name}"])], d / f"{ch}.ipynb")
    trace = tmp_path / "trace.jsonl"
    result = _grade(root, chapters=[ch], exercise=ex.name, per_gpu=3, worker_env={"AUTOGRADER_TRACE": str(trace)})
    assert [r["status"] for r in result.rows] == ["passed"] * len(students), [r["feedback"] for r in result.rows]
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    shared = [e for e in events if e.get("ev") == "lock" and e.get("kind") == "shared"]
    cases = len(get_exercise(ch, ex.name).sizes) + ex.hidden_sizes
    assert len(shared) == len(students) * cases, f"{len(shared)} shared holds for {len(students)} x {cases} cases"
