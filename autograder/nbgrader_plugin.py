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

When `python -m autograder grade-class` graded the class first, `GradeKernels` takes each kernel's result
from its results store (``GradeKernels.results_store``, default ``grading/results.sqlite`` in the course
directory) when the store holds one for exactly this kernel source, LAUNCH data and spec version: the points
and feedback are the batch's, and autograde costs no GPU time for them. Anything else is graded here.

Configured in exercises/nbgrader_config.py. This module imports nbgrader, so the grading children never
import it.
"""
from __future__ import annotations

import os

from nbgrader import utils
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import DeduplicateIds as _DeduplicateIds
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from nbgrader.preprocessors import ClearSolutions as _ClearSolutions
from nbgrader.preprocessors import OverwriteCells as _OverwriteCells
from traitlets import Unicode

from .extract import body_first_line, cuda_cell_name, extract_cells, graded_call, strip_magic
from .report import printable

__all__ = ["GradeKernels", "WriteKernelPoints", "DeduplicateIds", "OverwriteCells", "ClearSolutions", "graded_call", "METADATA_KEY",
           "PLACEHOLDER"]

METADATA_KEY = "course_grader"
PLACEHOLDER = ("# The course's grader graded this exercise outside this notebook, before any cell ran;\n"
               "# its feedback and points appear below.")
_SESSION = None


def _session():
    """One grading session per nbgrader process: the GPU is probed and each reference compiled once."""
    global _SESSION
    if _SESSION is None:
        from .runner import Session
        _SESSION = Session()
    return _SESSION


class GradeKernels(NbGraderPreprocessor):
    """Grade every kernel exercise of the notebook with the isolated grader (sanitize pass, last)."""

    results_store = Unicode("grading/results.sqlite", help=(
        "The results store of `python -m autograder grade-class` (relative to the directory nbgrader runs "
        "in); a stored result for the same kernel, LAUNCH data and spec version is used instead of grading "
        "again. Empty: always grade.")).tag(config=True)

    def preprocess(self, nb, resources):
        info = resources.get("nbgrader", {})
        try:
            with Gradebook(info["db_url"]) as gb:
                source_nb = gb.find_notebook(info["notebook"], info["assignment"])
                sources = {c.name: c.source for c in source_nb.source_cells}
                max_scores = {c.name: c.max_score for c in source_nb.grade_cells}
                manual = _manual_scores(gb, info, max_scores)
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
            first_line = body_first_line(kernel_cell["source"]) if kernel_cell is not None else 1
            points, feedback = self._stored(chapter, exercise, source, launches.get(exercise), float(max_score or 0),
                                            first_line)
            if points is None:
                points, feedback = self._grade(chapter, exercise, source, launches.get(exercise),
                                               info.get("student", ""), float(max_score or 0), first_line)
            if manual.get(name) is not None:
                feedback += (f"\nYour instructor set this exercise to {manual[name]:g} points by hand in the "
                             "formgrader; that score counts instead of the grader's.")
            cell["metadata"][METADATA_KEY] = {"points": points, "feedback": feedback, "source": cell["source"]}
            cell["source"] = PLACEHOLDER
        return nb, resources

    def _stored(self, chapter, exercise, source, launch, max_score, first_line=1):
        """(points, feedback) from the class batch's results store, or (None, None): a result stored for the
        same kernel numbered from the same cell line, with no note about another notebook's cells."""
        path = self.results_store and os.path.abspath(self.results_store)
        if not path or not os.path.isfile(path) or source is None:
            return None, None
        try:
            from .batch.store import ResultStore
            from .versions import content_key, spec_version
            with ResultStore(path) as store:
                row = store.lookup(chapter, exercise, content_key(chapter, exercise, source, launch, first_line=first_line),
                                   spec_version(chapter))
        except Exception as exc:  # an unreadable store: grade here instead
            self.log.warning("course grader: results store %s not used: %s", path, exc)
            return None, None
        if row is None:
            return None, None
        points = min(max(float(row["points"]), 0.0), float(row["max_points"]), max_score or float("inf"))
        self.log.info("course grader: %s/%s from the results store (%s, %s)", chapter, exercise, row["gpu"],
                      row["graded_at"])
        return round(points, 4), row["feedback"] + f"\n(graded on {row['gpu']}, {row['graded_at'][:16]} UTC)"

    def _grade(self, chapter, exercise, source, launch, student, max_score, first_line=1):
        from .report import Status
        from .runner import grade_source
        try:
            report = grade_source(chapter, exercise, source, launch=launch, submission=student,
                                  session=_session(), first_line=first_line)
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


def _manual_scores(gb, info, names) -> dict:
    """grade cell -> the manual score an instructor set for this student, where the gradebook has one."""
    out = {}
    for name in names:
        try:
            out[name] = gb.find_grade(name, info["notebook"], info["assignment"], info["student"]).manual_score
        except (KeyError, MissingEntry):
            pass
    return out


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


class OverwriteCells(_OverwriteCells):
    """nbgrader's OverwriteCells, silent about a locked cell that the student left as released.

    nbgrader checks a submitted locked cell against the instructor's cell in the gradebook, which still
    holds the ``### BEGIN HIDDEN TESTS`` region that generate_assignment cleared; so it warned "Attribute
    'checksum' for cell ... has changed!" for every kernel exercise's test cell of every student. Here a
    cell equal to its released form is restored without the warning; a locked cell the student did edit
    is still reported. Either way the instructor's cell replaces it, as in nbgrader.
    """

    def preprocess_cell(self, cell, resources, index):
        self._cell, self._released = cell, None
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id is not None:
            try:
                released = self.gradebook.find_source_cell(grade_id, self.notebook_id, self.assignment_id)
                probe = type("Cell", (), {"source": released.source})()
                ClearHiddenTests(parent=self)._remove_hidden_test_region(probe)
                self._released = probe.source
            except (MissingEntry, RuntimeError):  # RuntimeError: unbalanced hidden-test markers
                pass
        return super().preprocess_cell(cell, resources, index)

    def report_change(self, name, attr, old, new):
        if attr == "checksum" and self._released is not None and self._cell.source == self._released:
            self.log.debug("cell %s is as released (its hidden tests were cleared); restored", name)
            return
        super().report_change(name, attr, old, new)


class ClearSolutions(_ClearSolutions):
    """nbgrader's, with a stub that keeps a Triton exercise's cell Python. A ``%%cuda`` cell's solution region becomes
    the configured ``// YOUR CODE HERE``; a ``%%triton`` cell's (Python) gets a comment and ``pass`` instead, so the
    released notebook still runs top to bottom (and the untouched stub compiles, runs, writes nothing, and scores
    zero)."""

    def _replace_solution_region(self, cell, language):
        if cell.cell_type == "code" and cell.source.lstrip().startswith("%%triton"):
            saved = self.code_stub
            self.code_stub = {**saved, language: "# YOUR CODE HERE\npass"}
            try:
                return super()._replace_solution_region(cell, language)
            finally:
                self.code_stub = saved
        return super()._replace_solution_region(cell, language)
