"""Class batches (autograder.batch) on the CPU with the fake harness in the grading children: every job
graded once and stored as it finishes, a rerun grades only what changed, a batch killed with SIGKILL
loses nothing it finished, a bad submission costs only its own row, the gradebook gets the points, and
nbgrader's autograde afterwards takes them from the store."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from ag_helpers import ROOT, make_notebook

CH = "01_first_kernel"
HERE = os.path.dirname(os.path.abspath(__file__))
SAXPY = (ROOT / "solutions" / CH / "saxpy.cu").read_text()
GRAY = (ROOT / "solutions" / CH / "rgb_to_gray.cu").read_text()
WORKER_ENV = {"PYTHONPATH": os.pathsep.join([HERE, str(ROOT / "tests"), str(ROOT)]), "FAKE_GPU": "h100"}

pytest.importorskip("distributed")


def _submit(root, student, saxpy_flags="", gray_flags="", chapter=CH):
    d = root / student / chapter
    d.mkdir(parents=True, exist_ok=True)
    make_notebook([("code", "%load_ext course", []),
                   ("code", f"%%cuda --name saxpy --no-run\n{SAXPY}\n// FAKE: {saxpy_flags}", []),
                   ("code", f"%%cuda --name rgb_to_gray --no-run\n{GRAY}\n// FAKE: {gray_flags}", [])],
                  d / f"{chapter}.ipynb")


def _grade(submitted, **kw):
    from autograder.batch import grade_class
    kw.setdefault("gpus", [])
    kw.setdefault("per_gpu", 3)
    return grade_class(submitted, harness="fake_harness", worker_env=WORKER_ENV, progress=False,
                       log=lambda *a: None, **kw)


def _rows(result):
    return {(r["student"], r["exercise"]): r for r in result.rows}


@pytest.fixture
def submitted(tmp_path):
    root = tmp_path / "submitted"
    _submit(root, "alice")
    _submit(root, "bob", saxpy_flags="fail@3")
    _submit(root, "dan", gray_flags="die@1")  # the child dies at one size: that grading's row only
    carol = root / "carol" / CH
    carol.mkdir(parents=True)
    (carol / f"{CH}.ipynb").write_text("{ this is not json")
    return root


def test_batch_grades_each_job_once_and_resumes(submitted, tmp_path):
    first = _grade(submitted)
    rows = _rows(first)
    assert len(rows) == 8 and first.graded == 8 and first.reused == 0 and first.lost == 0
    assert rows[("alice", "saxpy")]["status"] == "passed" and rows[("alice", "saxpy")]["points"] == 10
    assert rows[("bob", "saxpy")]["status"] == "failed" and rows[("bob", "saxpy")]["points"] == 0
    assert rows[("bob", "rgb_to_gray")]["points"] == 10
    assert rows[("dan", "rgb_to_gray")]["status"] == "crashed" and rows[("dan", "saxpy")]["points"] == 10
    assert rows[("carol", "saxpy")]["status"] == "failed" and "notebook" in rows[("carol", "saxpy")]["feedback"]
    assert {r["gpu"] for r in first.rows if r["student"] != "carol"} == {"Fake GPU"}
    store = submitted.parent / "grading" / "results.sqlite"
    assert store.is_file()

    again = _grade(submitted)
    assert again.graded == 0 and again.reused == 8
    assert _rows(again) == rows  # the same stored rows, graded_at included

    _submit(submitted, "bob")  # bob fixes saxpy: only that job is graded again
    third = _grade(submitted)
    assert third.graded == 2 - 1 and third.reused == 7  # rgb_to_gray's source did not change
    assert _rows(third)[("bob", "saxpy")]["points"] == 10
    assert _rows(third)[("alice", "saxpy")]["graded_at"] == rows[("alice", "saxpy")]["graded_at"]


def test_chapter_selects_that_assignment_only(submitted):
    _submit(submitted, "alice", chapter="07_staged_gemm")
    result = _grade(submitted, chapters=[CH], exercise="saxpy")
    assert {r["assignment"] for r in result.rows} == {CH} and {r["exercise"] for r in result.rows} == {"saxpy"}
    assert len(result.rows) == 4


def test_report_files(submitted, tmp_path):
    out = tmp_path / "report"
    result = _grade(submitted, report_dir=str(out))
    data = json.loads((out / "results.json").read_text())
    assert len(data["results"]) == len(result.rows) == 8
    csv_lines = (out / "results.csv").read_text().splitlines()
    assert csv_lines[0].startswith("student,assignment,exercise,status,points") and len(csv_lines) == 9
    assert "01_first_kernel/saxpy" in (out / "summary.txt").read_text()
    assert (out / "distributions.png").stat().st_size > 1000


_KILLED_RUN = textwrap.dedent("""
    import sys
    from autograder.batch import grade_class
    grade_class(sys.argv[1], harness="fake_harness", worker_env={env!r}, gpus=[], per_gpu=1, progress=False)
""")


def test_sigkill_mid_batch_loses_nothing_it_finished(tmp_path):
    root = tmp_path / "submitted"
    for i in range(8):  # each grading hangs at one size for 0.5 s: the batch takes a while
        _submit(root, f"s{i}", saxpy_flags="hang@1", gray_flags="hang@1")
    store = tmp_path / "grading" / "results.sqlite"
    env = dict(os.environ, PYTHONPATH=WORKER_ENV["PYTHONPATH"])
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN.format(env=WORKER_ENV), str(root)], env=env,
                            cwd=str(ROOT), start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    committed = []
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(committed) < 3:
        time.sleep(0.5)
        if store.is_file():
            try:
                with sqlite3.connect(str(store)) as db:
                    committed = db.execute("SELECT student, exercise, graded_at FROM results").fetchall()
            except sqlite3.OperationalError:  # the file exists, its table not yet
                continue
    os.killpg(proc.pid, signal.SIGKILL)  # the client, its Dask workers and their grading children
    proc.wait(60)
    assert 3 <= len(committed) < 16, f"{len(committed)} results before the kill"
    result = _grade(root)
    assert result.reused >= len(committed) and result.graded + result.reused == 16
    rows = {(r["student"], r["exercise"]): r["graded_at"] for r in result.rows}
    for student, exercise, graded_at in committed:
        assert rows[(student, exercise)] == graded_at  # kept, not graded again
    assert all(r["status"] == "timed out" for r in result.rows)


def test_store_keys_change_with_the_spec_version(submitted, monkeypatch):
    first = _grade(submitted, chapters=[CH], exercise="saxpy")
    from autograder.batch import jobs as jobs_module
    monkeypatch.setattr(jobs_module, "spec_version", lambda ch: "another-version")
    second = _grade(submitted, chapters=[CH], exercise="saxpy")
    assert second.reused == 0 and second.graded == len(first.rows)


def test_batch_feedback_numbers_lines_as_the_cell(tmp_path):
    """Does grade-class number a source problem by the student's cell lines (the %%cuda line is 1), as
    `grade`, `preview` and nbgrader's autograde do? (The fake harness compiles nothing: a refused #include,
    found before compiling, carries the line number here.)"""
    from autograder.batch.jobs import discover
    root = tmp_path / "submitted"
    d = root / "erin" / CH
    d.mkdir(parents=True)
    source = '// my saxpy\n#include "/etc/passwd"\n' + SAXPY
    make_notebook([("code", "%load_ext course", []), ("code", f"%%cuda --name saxpy --no-run\n{source}", []),
                   ("code", f"%%cuda --name rgb_to_gray --no-run\n{GRAY}", [])], d / f"{CH}.ipynb")
    jobs = discover(root)[0]
    assert {j.exercise: j.first_line for j in jobs} == {"saxpy": 2, "rgb_to_gray": 2}
    row = _rows(_grade(root))[("erin", "saxpy")]
    assert row["status"] == "compile error" and "line 3" in row["feedback"], row["feedback"]  # cell line 3


def test_gradebook_gets_no_points_for_a_result_that_is_not_final(tmp_path):
    """A grader error or a lost worker is no verdict: is it left out of nbgrader's gradebook (not written as
    0 points with an internal error as feedback) and listed as not graded yet?"""
    pytest.importorskip("nbgrader")
    from autograder.batch.gradebook import write_gradebook
    row = {"student": "erin", "assignment": CH, "exercise": "saxpy", "status": "grader error", "final": 0,
           "points": 0.0, "max_points": 10.0, "feedback": "not graded: KilledWorker"}
    summary = write_gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}", [row])
    assert summary.written == 0
    assert summary.missing and "not graded yet (grader error)" in summary.missing[0]


def test_out_of_memory_is_graded_again_alone_then_final(tmp_path):
    """A grading that runs out of device memory beside others is graded once more with the GPU to itself:
    does a kernel that runs out every time get a final "crashed" row (not a grader error graded on every
    run), and one that ran out only beside other gradings its real verdict?"""
    root = tmp_path / "submitted"
    _submit(root, "olga", saxpy_flags="oom@1")        # its own launch: out of memory every time
    _submit(root, "sam", saxpy_flags="oomshared@1")   # the others' memory: fine with the GPU to itself
    _submit(root, "tia")
    result = _grade(root, exercise="saxpy")
    rows = _rows(result)
    olga = rows[("olga", "saxpy")]
    assert (olga["status"], olga["final"], olga["points"]) == ("crashed", 1, 0), olga["feedback"]
    reason = json.loads(olga["report"])["reason"]
    assert "out of memory" in reason and "no other grading on the GPU" in reason, reason
    assert (rows[("sam", "saxpy")]["status"], rows[("sam", "saxpy")]["final"]) == ("passed", 1)
    assert rows[("tia", "saxpy")]["status"] == "passed"
    assert _grade(root, exercise="saxpy").reused == 3  # final: the next run grades none of them again


def test_a_grading_alone_waits_for_the_others_and_holds_new_ones_back():
    """`Gradings`: does `alone` wait until the gradings under way have finished, and does a grading that
    starts meanwhile wait until the lone one is done?"""
    import threading
    from autograder.batch.work import Gradings
    gate, log = Gradings(), []
    running, finish = threading.Event(), threading.Event()

    def beside(name, started=None, until=None):
        with gate.beside():
            log.append(f"{name} in")
            if started:
                started.set()
            if until:
                until.wait(10)
            log.append(f"{name} out")

    def alone():
        with gate.alone():
            log.append("alone in")
            time.sleep(0.1)
            log.append("alone out")

    first = threading.Thread(target=beside, args=("first", running, finish))
    first.start()
    assert running.wait(10)
    lone = threading.Thread(target=alone)
    lone.start()
    time.sleep(0.1)
    late = threading.Thread(target=beside, args=("late",))
    late.start()
    time.sleep(0.1)
    assert log == ["first in"], "a grading ran beside one that was still under way, or overtook the lone one"
    finish.set()
    for t in (first, lone, late):
        t.join(10)
    assert log == ["first in", "first out", "alone in", "alone out", "late in", "late out"]


def test_a_session_alone_copies_every_field_but_the_lock():
    """Is the session a grading alone runs in the original with every field (those added later too) but
    the GPU lock: dataclasses.replace, not a copy by hand?"""
    import dataclasses

    from autograder.batch.work import _alone
    from autograder.runner import Session

    @dataclasses.dataclass
    class Later(Session):
        added_later: int = 0

    s = Later(seed=5, device="H100 (sm_90)", gpu={"name": "H100"}, shared_gpu=True, added_later=7)
    s.references["k"] = "program"
    a = _alone(s)
    assert type(a) is Later and a.added_later == 7 and a.seed == 5 and a.gpu == s.gpu
    assert a.references is s.references and a.device == s.device
    assert not a.shared_gpu and a.gpu_lock() is None and a._lock is not s._lock


RING = (ROOT / "solutions" / "16_multi_gpu" / "ring_step.cu").read_text()


@pytest.mark.parametrize("gpus,status,points", [("2", "passed", 10), ("1", "skipped", 0)])
def test_a_ring_exercise_is_graded_on_every_gpu_after_the_workers(tmp_path, monkeypatch, gpus, status, points):
    """A ring job needs every GPU of the host, which no one-GPU worker has: the batch grades it after the workers'
    jobs, in its own process with the batch's GPUs visible, as serial grading would (FAKE_GPUS: the fake machine's
    GPU count). The saxpy job beside it still goes to a worker."""
    monkeypatch.setenv("FAKE_GPUS", gpus)
    monkeypatch.setenv("FAKE_GPU", "h100")
    root = tmp_path / "submitted"
    for chapter, name, src in (("16_multi_gpu", "ring_step", RING), (CH, "saxpy", SAXPY)):
        d = root / "erin" / chapter
        d.mkdir(parents=True)
        make_notebook([("code", "%load_ext course", []), ("code", f"%%cuda --name {name} --no-run\n{src}\n// FAKE: ok", [])],
                      d / f"{chapter}.ipynb")
    res = _grade(root, chapters=["16_multi_gpu", CH], exercise=None)
    rows = _rows(res)
    ring = rows[("erin", "ring_step")]
    assert ring["status"] == status and ring["points"] == points, ring["feedback"]
    assert ring["worker"].endswith("(all GPUs)")
    assert not rows[("erin", "saxpy")]["worker"].endswith("(all GPUs)") and rows[("erin", "saxpy")]["points"] == 10
