"""A term's grading path end to end on a copy of the real course directory: two assignments released by
nbgrader, submissions collected, the class graded with `python -m autograder grade-class --gradebook`,
the kernel points in nbgrader's gradebook and in `nbgrader export`'s CSV, and `nbgrader autograde`
afterwards showing the same points (taken from the batch's results store, so no GPU is needed for them).

Without a GPU (CPU tier) the batch runs through the Python API with the fake grading harness, since the
real one can only say "needs a GPU" there; with -m gpu the documented command grades real kernels.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

from repo_helpers import REPO, gpu_status

pytest.importorskip("nbgrader")
pytest.importorskip("distributed")

ASSIGNMENTS = ("01_first_kernel", "04_coalescing")
FAKE_HARNESS_DIR = REPO / "tests" / "autograder"


def _env():
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), str(FAKE_HARNESS_DIR), str(REPO / "tests"),
                                                      env.get("PYTHONPATH")]))
    return env


def _run(*cmd, cwd):
    proc = subprocess.run(list(cmd), cwd=cwd, env=_env(), capture_output=True, text=True, timeout=1800)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{log[-4000:]}"
    return log


def _solution_ids(nb):
    return {c["metadata"]["nbgrader"]["grade_id"]: i for i, c in enumerate(nb["cells"])
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def _kernel_cells(gb, assignment):
    from autograder.batch.gradebook import kernel_cells
    return kernel_cells(gb, assignment)


@pytest.mark.both_tiers
@pytest.mark.slow
def test_two_assignments_graded_into_gradebook_csv_and_autograde(tmp_path):
    with_gpu = gpu_status()[0]
    course = tmp_path / "course"
    for a in ASSIGNMENTS:
        shutil.copytree(REPO / "exercises" / "source" / a, course / "source" / a)
    shutil.copy(REPO / "exercises" / "nbgrader_config.py", course / "nbgrader_config.py")
    for a in ASSIGNMENTS:
        _run(sys.executable, "-m", "nbgrader", "generate_assignment", a, cwd=course)

    for a in ASSIGNMENTS:
        source = json.loads((course / "source" / a / f"{a}.ipynb").read_text())
        released = json.loads((course / "release" / a / f"{a}.ipynb").read_text())
        src_ids = _solution_ids(source)
        for student in ("ref", "wrong"):
            nb = json.loads(json.dumps(released))
            for gid, i in _solution_ids(nb).items():
                if student == "ref":
                    nb["cells"][i]["source"] = source["cells"][src_ids[gid]]["source"]
                elif "%%cuda" in "".join(nb["cells"][i]["source"]):
                    # the untouched stub; the fake harness reads the flag, the real one runs the stub
                    nb["cells"][i]["source"] = "".join(nb["cells"][i]["source"]) + "\n// FAKE: fail@0\n"
            d = course / "submitted" / student / a
            d.mkdir(parents=True)
            (d / f"{a}.ipynb").write_text(json.dumps(nb))
            (d / "timestamp.txt").write_text("2026-11-20 10:00:00.000000 UTC")

    db = f"sqlite:///{course / 'gradebook.db'}"
    if with_gpu:
        _run(sys.executable, "-m", "autograder", "grade-class", "submitted", "--gradebook", db, "-q", cwd=course)
    else:
        _run(sys.executable, "-c", (
            "from autograder.batch import grade_class; import os, sys; "
            "r = grade_class('submitted', gradebook=sys.argv[1], harness='fake_harness', gpus=[], progress=False, "
            "worker_env={'PYTHONPATH': os.environ['PYTHONPATH'], 'FAKE_GPU': 'h100'}); "
            "print(r.gradebook.lines())"), db, cwd=course)

    from nbgrader.api import Gradebook
    expected = {}
    with Gradebook(db) as gb:
        for a in ASSIGNMENTS:
            cells = _kernel_cells(gb, a)
            assert cells, f"{a}: no kernel grade cells found in the gradebook"
            for ex, (notebook, cell, _) in cells.items():
                top = gb.find_grade_cell(cell, notebook, a).max_score
                for student, want in (("ref", top), ("wrong", 0.0)):
                    got = gb.find_grade(cell, notebook, a, student).score
                    assert got == want, f"{student} {a}/{ex}: {got} points in the gradebook, expected {want}"
                    expected[(student, a, ex)] = want

    _run(sys.executable, "-m", "nbgrader", "export", "--to", "grades.csv", cwd=course)
    with open(course / "grades.csv", newline="") as f:
        exported = {(r["student_id"], r["assignment"]): float(r["raw_score"]) for r in csv.DictReader(f)}
    for a in ASSIGNMENTS:
        kernel_total = sum(v for (s, aa, _), v in expected.items() if s == "ref" and aa == a)
        assert exported[("ref", a)] >= kernel_total > 0 and exported[("wrong", a)] == 0

    # nbgrader's own autograde afterwards: the kernel points come from the store, identical
    for a in ASSIGNMENTS:
        _run(sys.executable, "-m", "nbgrader", "autograde", a, "--force", cwd=course)
    with Gradebook(db) as gb:
        for (student, a, ex), want in expected.items():
            notebook, cell, _ = _kernel_cells(gb, a)[ex]
            assert gb.find_grade(cell, notebook, a, student).score == want, (student, a, ex)
    graded = json.loads((course / "autograded" / "ref" / ASSIGNMENTS[0] / f"{ASSIGNMENTS[0]}.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in graded["cells"] for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")
    assert "(graded on " in text  # the batch's result, with the GPU that graded it

    # a score set by hand in the formgrader: kept and listed by the next batch, noted in the feedback by
    # autograde, and cleared by --reset-overrides
    a = ASSIGNMENTS[0]
    ex = sorted(e for (s, aa, e) in expected if aa == a)[0]
    with Gradebook(db) as gb:
        notebook, cell, _ = _kernel_cells(gb, a)[ex]
        gb.find_grade(cell, notebook, a, "wrong").manual_score = 3.0
        gb.db.commit()
    kept = _batch_again(course, db, with_gpu, reset=False)
    assert f"kept a manual score: wrong {a}/{ex}: 3 set by hand, the grader gives 0" in kept
    with Gradebook(db) as gb:
        assert gb.find_grade(cell, notebook, a, "wrong").score == 3.0
    _run(sys.executable, "-m", "nbgrader", "autograde", a, "--force", cwd=course)
    graded = json.loads((course / "autograded" / "wrong" / a / f"{a}.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in graded["cells"] for o in c.get("outputs", [])
                   if o.get("output_type") == "stream")
    assert "set this exercise to 3 points by hand" in text
    cleared = _batch_again(course, db, with_gpu, reset=True)
    assert f"cleared a manual score: wrong {a}/{ex}: was 3, now the grader's 0" in cleared
    with Gradebook(db) as gb:
        grade = gb.find_grade(cell, notebook, a, "wrong")
        assert grade.manual_score is None and grade.score == 0.0


def _batch_again(course, db, with_gpu, reset: bool) -> str:
    """The class batch run again (everything reused from the store); what it printed."""
    if with_gpu:
        cmd = [sys.executable, "-m", "autograder", "grade-class", "submitted", "--gradebook", db, "-q"]
        return _run(*cmd, *(["--reset-overrides"] if reset else []), cwd=course)
    return _run(sys.executable, "-c", (
        "from autograder.batch import grade_class; import os, sys; "
        "r = grade_class('submitted', gradebook=sys.argv[1], harness='fake_harness', gpus=[], progress=False, "
        f"reset_overrides={reset}, worker_env={{'PYTHONPATH': os.environ['PYTHONPATH'], 'FAKE_GPU': 'h100'}}); "
        "print('\\n'.join(r.gradebook.lines()))"), db, cwd=course)
