"""Library-call exercises (chapter 10's cuBLAS calls): the call read as data, checked without a GPU, then
made case by case in grading children. Here the children use the NumPy model of cublasSgemm."""
import pytest

from ag_helpers import ROOT

from autograder import CallExercise, Status, get_exercise, grade_path, grade_source
from autograder.launchcfg import LaunchDataError, parse_call_cell

CH = "10_cublas"
SOLUTION = {name: (ROOT / "solutions" / CH / f"{name}.py").read_text() for name in ("sgemm_rowmajor", "linear_rowmajor")}


def call_text(**call):
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in call.items()) + "}"


RIGHT = dict(transa="N", transb="N", m="n", n="m", k="k", A="b", lda="ldb", B="a", ldb="lda", ldc="ldc")


def test_reference_calls_get_full_marks(fake_harness):
    """Does each reference call, made on every size case, earn all the exercise's points?"""
    for name, text in SOLUTION.items():
        r = grade_source(CH, name, text)
        assert r.status == Status.PASSED and r.points == r.max_points == 5, r.feedback()
        ex = get_exercise(CH, name)
        assert len(r.sizes) == len(ex.sizes) + ex.hidden_sizes and sum(s.hidden for s in r.sizes) == ex.hidden_sizes


@pytest.mark.parametrize("wrong, says", [
    # no operand swap: a's row pitch is not a column-major leading dimension of an m-row matrix
    (dict(RIGHT, m="m", n="n", A="a", lda="lda", B="b", ldb="ldb"), "cuBLAS refuses this"),
    # the row length where the row pitch belongs: right on tight rows, wrong on padded ones
    (dict(RIGHT, lda="n", ldb="k"), "results are wrong"),
    (dict(RIGHT, ldc="n"), "ldc"),
    # transposing the inputs instead of swapping: the column-major result does not fit the row-major c
    (dict(RIGHT, transa="T", transb="T", m="m", n="n", A="a", lda="lda", B="b", ldb="ldb"), "would write"),
])
def test_wrong_calls_fail_with_a_reason(fake_harness, wrong, says):
    """Does each classic mistake score zero, with a message that points at it?"""
    r = grade_source(CH, "sgemm_rowmajor", call_text(**wrong))
    assert r.points == 0 and r.status == Status.FAILED, r.feedback()
    assert says in r.reason, r.reason


def test_padded_rows_catch_a_size_used_as_pitch(fake_harness):
    """Is ld = row length (instead of the pitch) right on the tight cases and wrong only on padded ones?"""
    r = grade_source(CH, "sgemm_rowmajor", call_text(**dict(RIGHT, lda="n", ldb="k")))
    tight = [s.status for s in r.sizes if s.sizes["lda"] == s.sizes["k"] and s.sizes["ldb"] == s.sizes["n"]]
    assert tight and all(st == Status.PASSED for st in tight)
    assert any(s.status == Status.FAILED for s in r.sizes)


def test_call_reading_past_a_buffer_is_refused_before_the_gpu(fake_harness):
    """Does a call whose sizes describe more than the buffer holds fail with 'would read', not a fault?"""
    r = grade_source(CH, "sgemm_rowmajor", call_text(**dict(RIGHT, k="m")))
    assert r.points == 0
    assert any("would read" in s.message or "refuses" in s.message for s in r.sizes), r.feedback()


def test_driver_error_costs_one_case_and_the_rest_run(fake_harness):
    """Does an exception from the library at one case crash that case only, in a fresh child for the rest?"""
    r = grade_source(CH, "sgemm_rowmajor", call_text(**dict(RIGHT, ldc=4242)))
    statuses = [s.status for s in r.sizes]
    assert Status.CRASHED in statuses and r.points == 0
    assert "EXECUTION_FAILED" in r.reason


def test_out_of_memory_in_a_call_is_not_charged(fake_harness):
    """Does a call that runs out of device memory (the grader's buffers and cuBLAS's workspace, never the
    student's doing) give a grader error naming it, not a crash that costs the student?"""
    r = grade_source(CH, "sgemm_rowmajor", call_text(**dict(RIGHT, ldc=4343)))
    assert r.status == Status.ERROR and Status.CRASHED not in [s.status for s in r.sizes], r.feedback()
    assert "ran out of memory" in r.reason and "Not charged to you" in r.reason
    assert "close other programs" in r.reason and "batch" not in r.reason   # a lone grading: no regrade


def _lock_waiters(path) -> int:
    """How many processes wait in flock for the file at ``path`` ('->' lines of /proc/locks)."""
    import os
    ino = os.stat(path).st_ino
    with open("/proc/locks", encoding="ascii") as f:
        return sum(1 for p in map(str.split, f) if p[1:2] == ["->"] and p[6:7] and
                   p[6].rsplit(":", 1)[-1] == str(ino))


def test_call_grading_takes_the_gpu_lock(fake_harness, tmp_path, monkeypatch):
    """Among gradings sharing a GPU, does a library-call grading hold the GPU lock shared around each case's
    driver call: waiting while another grading times alone, then running every case under the lock?"""
    import os
    import threading
    import time
    from autograder.gpulock import GpuLock
    from autograder.runner import Session
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("AUTOGRADER_TRACE", str(trace))  # the children's lock holds land here
    session = Session(shared_gpu=True)
    timer = GpuLock(session.gpu_lock())  # another grading's timed pass
    out = {}
    grading = threading.Thread(target=lambda: out.update(r=grade_source(
        CH, "sgemm_rowmajor", SOLUTION["sgemm_rowmajor"], session=session)))
    with timer.exclusive():
        grading.start()
        deadline = time.monotonic() + 60
        while grading.is_alive() and time.monotonic() < deadline and not _lock_waiters(
                os.path.join(session.lock_dir, "turnstile")):
            time.sleep(0.05)
        time.sleep(0.3)
        assert grading.is_alive(), "the call grading made its calls while another grading had the GPU alone"
    grading.join(120)
    r = out["r"]
    assert r.status == Status.PASSED and r.points == r.max_points, r.feedback()
    import json
    holds = [json.loads(line) for line in trace.read_text().splitlines()]
    shared = [e for e in holds if e.get("ev") == "lock" and e.get("kind") == "shared"]
    assert len(shared) == len(r.sizes), f"{len(shared)} shared holds for {len(r.sizes)} cases"
    assert max(e["wait"] for e in shared) >= 0.3  # the first case waited for the timed pass to end


@pytest.mark.parametrize("text, says", [
    ("{\n    // YOUR CODE HERE\n}", "not filled in"),
    ("CALL = dict(transa='N')", "literal"),
    ("{'transa': 'N'}", "missing"),
    (call_text(**dict(RIGHT, transa="X")), '"N"'),
    (call_text(**dict(RIGHT, A="c")), "inputs"),
    (call_text(**dict(RIGHT, m="rows")), "sizes"),
    ("import os\nos.system('true')", "literal"),
    ("x = 1", "no call"),
    ('{"transa": "N", [1]: 2}', "no list or dict as a key"),   # TypeError in literal_eval, not a grader error
    ('{"transa": "N", "transa": "T"}', "gives the key 'transa' twice"),
])
def test_malformed_calls_are_refused_without_running(fake_harness, text, says):
    """Is a malformed or unfinished call scored 0 in the parent, with what to write, and nothing run?"""
    r = grade_source(CH, "sgemm_rowmajor", text)
    assert r.points == 0 and r.status == Status.FAILED and not r.sizes, r.feedback()
    assert says in r.reason, r.reason


def test_call_is_read_from_a_tagged_notebook_cell(fake_harness, tmp_path):
    """Does grading a notebook pick the call from its `%%cublas` cell tagged call:NAME?"""
    import json
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        {"cell_type": "code", "metadata": {"tags": ["call:linear_rowmajor"]}, "outputs": [], "execution_count": None,
         "source": "%%cublas --name linear_rowmajor\n" + SOLUTION["linear_rowmajor"]}]}
    path = tmp_path / f"{CH}.ipynb"
    path.write_text(json.dumps(nb))
    rep = grade_path(path, chapter=CH, exercise="linear_rowmajor")
    assert [(e.exercise, e.points) for e in rep.exercises] == [("linear_rowmajor", 5.0)]


def test_parse_call_cell_accepts_bare_dicts_and_assignments():
    assert parse_call_cell("# comment\n" + call_text(**RIGHT), "sgemm_rowmajor") == RIGHT
    assert parse_call_cell("CALL = " + call_text(**RIGHT), "sgemm_rowmajor") == RIGHT
    with pytest.raises(LaunchDataError):
        parse_call_cell("{'m': 1.5}", "sgemm_rowmajor")


def test_call_exercise_spec_is_validated():
    """Does the loader hold the reference call to the checker (a broken reference fails at load)?"""
    import dataclasses
    from pathlib import Path

    from autograder.loader import validate
    from autograder.spec import SpecError
    ex = get_exercise(CH, "sgemm_rowmajor")
    assert isinstance(ex, CallExercise)
    with pytest.raises(SpecError, match="driver"):
        validate(dataclasses.replace(ex, driver="drivers.cublas_calls:nope"), Path(f"{CH}.py"))
    with pytest.raises(SpecError, match="points"):
        validate(dataclasses.replace(ex, points=dataclasses.replace(ex.points, speed=2)), Path(f"{CH}.py"))
    with pytest.raises(SpecError, match="checker"):
        validate(dataclasses.replace(ex, solution_file="linear_rowmajor.py"), Path(f"{CH}.py"))


@pytest.mark.parametrize("magic", ["%%cuda", "%%nope", "cublas"])
def test_a_call_exercise_takes_only_a_data_magic(magic):
    """Is a CallExercise's magic held to spec.DATA_MAGICS, the magics that extract.py finds data cells by?"""
    import dataclasses
    from pathlib import Path

    from autograder.loader import validate
    from autograder.spec import DATA_MAGICS, SpecError
    ex = get_exercise(CH, "sgemm_rowmajor")
    with pytest.raises(SpecError, match="one of " + ", ".join(DATA_MAGICS)):
        validate(dataclasses.replace(ex, magic=magic), Path(f"{CH}.py"))
    with pytest.raises(SpecError, match="grader_owned"):
        validate(dataclasses.replace(ex, grader_owned="yes"), Path(f"{CH}.py"))


def test_data_magics_are_the_course_magics_and_the_extraction_uses_them(monkeypatch):
    """Is each data magic one the course registers (course/_magic.py), and does the extraction find a data cell
    by spec.DATA_MAGICS (one list), not a list of its own?"""
    from autograder import extract
    from autograder.spec import DATA_MAGICS
    from course import _magic
    assert all(f"{m[2:]}_cell" in _magic.__all__ for m in DATA_MAGICS)
    assert extract.cuda_cell_name("%%newdata --name x\n{}") is None
    monkeypatch.setattr(extract, "DATA_MAGICS", DATA_MAGICS + ("%%newdata",))
    assert extract.cuda_cell_name("%%newdata --name x\n{}") == "x"
