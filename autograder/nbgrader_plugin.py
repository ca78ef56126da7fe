"""nbgrader preprocessors that put the isolated grader's points into the gradebook.

Kernel points are decided before any student Python runs and outside the student's kernel process:

1. `GradeKernels` runs in nbgrader's sanitize pass, after `OverwriteCells` has restored every locked cell
   from the gradebook. For each grade cell whose instructor source (read from the gradebook, never from
   the submission) calls ``autograder.nbgrader_points("NN_topic", "EXERCISE")``, it takes the kernel
   source from the submitted cell with the grade id of that exercise's solution cell, grades it with the
   isolated grader (compile and run children), keeps the result in the cell's metadata and replaces the
   cell's source by a comment, so `Execute` runs nothing of the grading in the student's kernel.
2. `WriteKernelPoints` runs right after `Execute`: it restores the cell's source and writes the grader's
   feedback and points as the cell's only outputs, whatever the student's Python did meanwhile;
   `SaveAutoGrades` then reads the points from there as usual.

Configured in exercises/nbgrader_config.py. This module imports nbgrader, so the grading children never
import it.
"""
from __future__ import annotations

import ast

from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import DeduplicateIds as _DeduplicateIds
from nbgrader.preprocessors import NbGraderPreprocessor

from .extract import cuda_cell_name, extract_cells, strip_magic
from .report import printable

__all__ = ["GradeKernels", "WriteKernelPoints", "DeduplicateIds", "graded_call", "METADATA_KEY", "PLACEHOLDER"]

METADATA_KEY = "course_grader"
PLACEHOLDER = ("# The course's grader graded this exercise outside this notebook, before any cell ran;\n"
               "# its feedback and points appear below.")
_SESSION = None


def graded_call(source: str):
    """(chapter, exercise) of the ``autograder.nbgrader_points("NN_topic", "EXERCISE")`` call in a test
    cell's source, or None; read with ast, never run."""
    try:
        tree = ast.parse(source or "")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            args = node.args
            if name == "nbgrader_points" and len(args) >= 2 and all(
                    isinstance(a, ast.Constant) and isinstance(a.value, str) for a in args[:2]):
                return args[0].value, args[1].value
    return None


def _session():
    """One grading session per nbgrader process: the GPU is probed and each reference compiled once."""
    global _SESSION
    if _SESSION is None:
        from .runner import Session
        _SESSION = Session()
    return _SESSION


class GradeKernels(NbGraderPreprocessor):
    """Grade every kernel exercise of the notebook with the isolated grader (sanitize pass, last)."""

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        try:
            with Gradebook(info["db_url"]) as gb:
                source_nb = gb.find_notebook(info["notebook"], info["assignment"])
                sources = {c.name: c.source for c in source_nb.source_cells}
                max_scores = {c.name: c.max_score for c in source_nb.grade_cells}
        except (KeyError, MissingEntry) as exc:
            self.log.warning("course grader: no gradebook entry for this notebook (%s); kernels not graded", exc)
            return nb, resources
        solution_of = {}
        for name, src in sources.items():
            ex = cuda_cell_name(src or "")
            if ex:
                solution_of[ex] = name
        # item access throughout: cells nbgrader adds back (a deleted test cell) hold plain dicts
        submitted = {c["metadata"]["nbgrader"]["grade_id"]: c for c in nb.cells
                     if utils.is_solution(c) or utils.is_grade(c) or utils.is_locked(c)}
        _, launches, _ = extract_cells(_cells(nb))
        for name, max_score in max_scores.items():
            target = graded_call(sources.get(name, ""))
            cell = submitted.get(name)
            if target is None or cell is None:
                continue
            chapter, exercise = target
            kernel_cell = submitted.get(solution_of.get(exercise, ""))
            source = strip_magic(kernel_cell["source"]) if kernel_cell is not None else None
            points, feedback = self._grade(chapter, exercise, source, launches.get(exercise),
                                           info.get("student", ""), float(max_score or 0))
            cell["metadata"][METADATA_KEY] = {"points": points, "feedback": feedback, "source": cell["source"]}
            cell["source"] = PLACEHOLDER
        return nb, resources

    def _grade(self, chapter, exercise, source, launch, student, max_score):
        from .report import Status
        from .runner import grade_source
        try:
            report = grade_source(chapter, exercise, source, launch=launch, submission=student,
                                  session=_session())
        except Exception as exc:  # a spec error: the instructor must see it; the student gets no points
            self.log.error("course grader: %s/%s could not be graded: %s", chapter, exercise, exc)
            return 0.0, f"{exercise}: the grader could not run ({type(exc).__name__}: {exc}). 0 points."
        feedback = report.feedback()
        if report.status == Status.NEEDS_GPU:
            feedback += ("\nRegrade on a machine with a GPU: nbgrader autograde there, or "
                         "python -m autograder grade <submissions>.")
        points = min(max(float(report.points), 0.0), float(report.max_points), max_score or float("inf"))
        self.log.info("course grader: %s %s/%s: %s, %g/%g", student, chapter, exercise, report.status, points,
                      report.max_points)
        return round(points, 4), feedback


def _cells(nb):
    return [(c["cell_type"], c["source"], list(c["metadata"].get("tags", []))) for c in nb.cells]


class WriteKernelPoints(NbGraderPreprocessor):
    """Write the grader's feedback and points into the graded cells (autograde pass, right after Execute)."""

    def preprocess_cell(self, cell, resources, index):
        result = cell.metadata.pop(METADATA_KEY, None)
        if result is None:
            return cell, resources
        from nbformat.v4 import new_output
        cell.source = result["source"]
        cell.outputs = [
            new_output("stream", name="stdout", text=printable(result["feedback"]) + "\n"),
            new_output("execute_result", data={"text/plain": repr(float(result["points"]))},
                       execution_count=cell.get("execution_count")),
        ]
        return cell, resources


class DeduplicateIds(_DeduplicateIds):
    """nbgrader's DeduplicateIds (the last cell with a grade id keeps it), then the emptied nbgrader
    metadata of the others removed: nbgrader 0.9's OverwriteCells reads ``grade_id`` from any cell that
    has the key, so one duplicated test cell made the whole autograde of that student fail."""

    def preprocess(self, nb, resources):
        nb, resources = super().preprocess(nb, resources)
        for cell in nb.cells:
            if "nbgrader" in cell.metadata and not cell.metadata["nbgrader"]:
                del cell.metadata["nbgrader"]
        return nb, resources
