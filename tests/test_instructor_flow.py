"""The instructor's nbgrader flow on the real course directory, with the real nbgrader command line:
generate, release, three students fetch and submit (reference, untouched stub, wrong kernels),
collect, autograde, the gradebook, feedback.

tests/autograder/test_nbgrader.py checks the grader's nbgrader glue on a one-cell notebook; this test
is the course as an instructor runs it, through the file exchange, on exercises/source/01_first_kernel.
Without a GPU every kernel gets 0 points and the feedback says it needs a GPU; with one (selected by
-m gpu) the reference gets full points and the stub and the wrong kernels none.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from repo_helpers import REPO, gpu_status

pytest.importorskip("nbgrader")

ASSIGNMENT = "01_first_kernel"
COURSE_ID = "cuda-course"  # exercises/nbgrader_config.py
STUDENTS = ("reference", "stub", "wrong")
# Bodies that compile and run but compute the wrong thing, keyed by the kernel a solution cell holds.
WRONG_BODIES = {
    "saxpy": "int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = a * x[i];  // forgot + y",
    "rgb_to_gray": ("int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;\n"
                    "    if (x < width && y < height) {\n"
                    "        int i = y * width + x;  // equal weights instead of BT.601\n"
                    "        gray[i] = (rgb[3 * i] + rgb[3 * i + 1] + rgb[3 * i + 2]) / 3;\n"
                    "    }"),
}
STUB = "// YOUR CODE HERE"  # exercises/nbgrader_config.py: ClearSolutions.code_stub


def nbgrader(*args, cwd, exchange):
    """`nbgrader ARGS` from ``cwd`` with the test's exchange; fails with nbgrader's log on error."""
    env = dict(os.environ)
    # nbgrader runs `alembic` by name, and the kernel must import this checkout's course/autograder.
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    cmd = [sys.executable, "-m", "nbgrader", *args, f"--Exchange.root={exchange}"]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=3000)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed ({proc.returncode}):\n{log[-4000:]}"
    return log


def solution_cells(nb) -> dict[str, dict]:
    """Solution cells by grade_id."""
    return {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def kernel_of(cell) -> str:
    tags = [t for t in cell["metadata"].get("tags", []) if t.startswith("kernel:")]
    assert tags, f"solution cell {cell['metadata']['nbgrader']['grade_id']} has no kernel:NAME tag"
    return tags[0].split(":", 1)[1]


def src(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def fill_in(released: dict, student: str, source_nb: dict) -> dict:
    """What each student hands in: the released notebook with its solution cells as the student left them."""
    nb = json.loads(json.dumps(released))
    reference = solution_cells(source_nb)
    for grade_id, cell in solution_cells(nb).items():
        if student == "reference":
            cell["source"] = src(reference[grade_id])
        elif student == "wrong":
            assert STUB in src(cell), f"released cell {grade_id} has no {STUB!r} to fill in"
            cell["source"] = src(cell).replace(STUB, WRONG_BODIES[kernel_of(cell)])
    return nb


@pytest.mark.slow
@pytest.mark.both_tiers
@pytest.mark.timeout(3600)
def test_generate_release_submit_collect_autograde_feedback(tmp_path):
    """Does the course directory take three students from release to feedback, with the kernel points
    the grader gives (0 and 'needs a GPU' without a GPU; full, 0, 0 with one)?"""
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    shutil.copytree(REPO / "exercises", course, ignore=shutil.ignore_patterns(
        "release", "submitted", "autograded", "feedback", "gradebook.db", ".nbgrader.log",
        ".ipynb_checkpoints"))
    exchange.mkdir()
    source_nb = json.loads((course / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())

    nbgrader("generate_assignment", ASSIGNMENT, cwd=course, exchange=exchange)
    nbgrader("release_assignment", ASSIGNMENT, cwd=course, exchange=exchange)
    student_side = [f"--CourseDirectory.course_id={COURSE_ID}"]
    for student in STUDENTS:
        home = tmp_path / "students" / student
        home.mkdir(parents=True)
        nbgrader("fetch_assignment", ASSIGNMENT, *student_side, cwd=home, exchange=exchange)
        path = home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        path.write_text(json.dumps(fill_in(json.loads(path.read_text()), student, source_nb)))
        nbgrader("submit", ASSIGNMENT, *student_side, f"--CourseDirectory.student_id={student}",
                 cwd=home, exchange=exchange)
    # Every submission here is owned by the one user running the test, not by the student it names.
    nbgrader("collect", ASSIGNMENT, "--ExchangeCollect.check_owner=False", cwd=course, exchange=exchange)
    assert sorted(p.name for p in (course / "submitted").iterdir()) == sorted(STUDENTS)

    nbgrader("autograde", ASSIGNMENT, "--create", cwd=course, exchange=exchange)
    from nbgrader.api import Gradebook
    tests = {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
             for c in source_nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        scores = {s: {t: gb.find_grade(t, ASSIGNMENT, ASSIGNMENT, s).score for t in tests} for s in STUDENTS}

    with_gpu = gpu_status()[0]
    zero = dict.fromkeys(tests, 0.0)
    if with_gpu:
        full = {t: float(points) for t, points in tests.items()}
        assert scores == {"reference": full, "stub": zero, "wrong": zero}, scores
    else:
        assert scores == dict.fromkeys(STUDENTS, zero), scores

    nbgrader("generate_feedback", ASSIGNMENT, cwd=course, exchange=exchange)
    nbgrader("release_feedback", ASSIGNMENT, cwd=course, exchange=exchange)
    for student in STUDENTS:
        page = html.unescape((course / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text())
        if not with_gpu:
            assert "needs a GPU" in page, f"{student}'s feedback does not say the grading needs a GPU"
        elif student == "reference":
            assert "saxpy: passed - 10 / 10 points" in page
        else:
            assert re.search(r"saxpy: (failed|compile error) - 0 / 10 points\n\n\S", page), \
                f"{student}'s feedback gives no reason"
    assert len(list((exchange / COURSE_ID / "feedback").glob("*.html"))) == len(STUDENTS)
