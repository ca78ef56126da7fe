"""Grading from inside a notebook: `preview` for students, `nbgrader_points` for hidden test cells.

Both hand the kernel source to a separate ``python -m autograder grade-source`` process, which spawns
the grading children: nothing of the grading runs in the notebook's kernel, and nothing reaches the
cell's stderr (nbgrader gives zero points to a test cell that writes to stderr).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

from .loader import ROOT, get_exercise
from .report import ExerciseReport, Status

__all__ = ["preview", "nbgrader_points", "grade_in_subprocess"]

_SUBPROCESS_TIMEOUT_S = 1800


def _cell_source(exercise: str) -> str | None:
    try:
        import course
        sources = course.cell_sources
    except Exception:
        return None
    return sources.get(exercise)


def _first_line(source: str | None) -> int:
    """Where ``source`` starts in the student's cell (`course.first_line_of`); 1 without the course."""
    try:
        from course import first_line_of
    except Exception:
        return 1
    return first_line_of(source) if source is not None else 1


def grade_in_subprocess(chapter: str, exercise: str, source: str | None, launch: dict | None = None,
                        speed: bool = True, first_line: int = 1) -> ExerciseReport:
    """Run ``python -m autograder grade-source`` on ``source``; its report (never raises). Compile errors
    are numbered from ``first_line``, the line of the student's cell where ``source`` starts."""
    ex = get_exercise(chapter, exercise)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "autograder", "grade-source", "--chapter", chapter, "--exercise", exercise]
    if not speed:
        cmd.append("--no-speed")
    payload = json.dumps({"source": source or "", "launch": launch, "first_line": first_line})
    try:
        proc = subprocess.run(cmd, input=payload, capture_output=True, text=True, env=env,
                              timeout=_SUBPROCESS_TIMEOUT_S, cwd=str(ROOT))
    except subprocess.TimeoutExpired:
        return ExerciseReport(chapter=chapter, exercise=exercise, status=Status.ERROR, points=0.0,
                              max_points=ex.max_points, reason="grading took longer than 30 minutes")
    try:
        return ExerciseReport.from_dict(json.loads(proc.stdout))
    except (ValueError, TypeError, KeyError):
        tail = (proc.stderr or proc.stdout or "").strip()[-2000:]
        return ExerciseReport(chapter=chapter, exercise=exercise, status=Status.ERROR, points=0.0,
                              max_points=ex.max_points,
                              reason=f"the grader failed (exit code {proc.returncode}): {tail}")


def preview(chapter: str, exercise: str, source: str | None = None, *, launch: dict | None = None,
            speed: bool = True) -> ExerciseReport:
    """Grade your kernel the way the instructor will, and print what to fix.

    ``source`` defaults to the last ``%%cuda --name EXERCISE`` cell you ran; compile errors in a cell's
    source are numbered as the cell's lines are (its ``%%cuda`` line is line 1). Without a GPU the
    kernel is still compiled: a compile error is reported as such, and only a kernel that compiles
    gets "needs a GPU".
    """
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        # nbgrader autograde: the kernels were graded before this notebook ran (autograder.nbgrader_plugin)
        print(f"{exercise}: preview skipped while the instructor autogrades; the grader's points are in the "
              "exercise's test cell.")
        return None
    source = source if source is not None else _cell_source(exercise)
    report = grade_in_subprocess(chapter, exercise, source, launch, speed, _first_line(source))
    print(report.feedback())
    return report


def nbgrader_points(chapter: str, exercise: str, *, launch: dict | None = None) -> float:
    """Your points as the grader sees them: prints the feedback and returns the points.

    Under ``nbgrader autograde`` this cell is not run: `autograder.nbgrader_plugin` grades the kernel
    cell before any student code runs and writes these points into the gradebook itself, so nothing
    a notebook does in its own process can change them. Run by hand, it is a preview.

    nbgrader 0.9 reads a test cell's partial credit from its execute_result (text/plain parsed as a
    float) as long as the cell wrote nothing to stderr and raised nothing; so this never raises and
    never writes to stderr. With no GPU it prints why and returns 0.
    """
    try:
        source = _cell_source(exercise)
        report = grade_in_subprocess(chapter, exercise, source, launch, first_line=_first_line(source))
    except Exception as exc:  # a spec error: print it for the instructor, give no points
        print(f"{exercise}: the grader could not run ({type(exc).__name__}: {exc}). 0 points.")
        return 0.0
    print(report.feedback())
    if report.status == Status.NEEDS_GPU:
        print("Regrade on a machine with a GPU: python -m autograder grade <submissions> (exit code 3 here).")
    return round(float(min(max(report.points, 0.0), report.max_points)), 4)
