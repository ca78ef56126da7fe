"""The batch's points and feedback into nbgrader's gradebook (any database URL nbgrader takes).

Each kernel exercise is the grade cell whose instructor source calls ``autograder.nbgrader_points(CH, EX)``
(found in the gradebook, as the nbgrader plugin finds it); its grade gets the grader's points as nbgrader's
automatic score, and the kernel's solution cell gets the grader's feedback as its automatic comment. A
submission the gradebook does not know yet is added, as `nbgrader autograde` would. A manual score an
instructor set in the formgrader wins in nbgrader's totals: it is kept and listed (or cleared with
``reset_overrides``), so a changed verdict never hides behind an old override unnoticed.
"""
from __future__ import annotations

import dataclasses

__all__ = ["WriteSummary", "write_gradebook", "kernel_cells"]


@dataclasses.dataclass
class WriteSummary:
    written: int = 0
    added_submissions: int = 0
    overrides: list = dataclasses.field(default_factory=list)   # (student, assignment, exercise, manual, grader)
    cleared: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)     # what could not be written, and why

    def lines(self) -> list:
        out = [f"gradebook: {self.written} kernel grade(s) written, {self.added_submissions} submission(s) added"]
        for s, a, e, manual, auto in self.overrides:
            out.append(f"  kept a manual score: {s} {a}/{e}: {manual:g} set by hand, the grader gives {auto:g} "
                       "(--reset-overrides clears it)")
        for s, a, e, manual, auto in self.cleared:
            out.append(f"  cleared a manual score: {s} {a}/{e}: was {manual:g}, now the grader's {auto:g}")
        out += [f"  not written: {m}" for m in self.missing]
        return out


def kernel_cells(gb, assignment: str) -> dict:
    """exercise -> (notebook, grade cell, solution cell or None) for one assignment of the gradebook."""
    from ..extract import cuda_cell_name, graded_call
    out = {}
    for nb in gb.find_assignment(assignment).notebooks:
        solutions = {}
        for cell in nb.source_cells:
            ex = cuda_cell_name(cell.source or "")
            if ex:
                solutions[ex] = cell.name
        for cell in nb.source_cells:
            target = graded_call(cell.source or "")
            if target and target[0] == assignment and cell.name in {g.name for g in nb.grade_cells}:
                out[target[1]] = (nb.name, cell.name, solutions.get(target[1]))
    return out


def write_gradebook(db_url: str, rows: list, *, reset_overrides: bool = False) -> WriteSummary:
    """Write the store ``rows`` (their points and feedback) into the gradebook at ``db_url``."""
    from nbgrader.api import Gradebook, MissingEntry
    summary = WriteSummary()
    cells = {}
    with Gradebook(db_url) as gb:
        for row in rows:
            student, assignment, exercise = row["student"], row["assignment"], row["exercise"]
            if not row.get("final", 1):  # a grader error or a lost worker: no verdict to give the student
                summary.missing.append(f"{student} {assignment}/{exercise}: not graded yet ({row['status']}); "
                                       "run grade-class again")
                continue
            if assignment not in cells:
                try:
                    cells[assignment] = kernel_cells(gb, assignment)
                except MissingEntry:
                    cells[assignment] = None
            if cells[assignment] is None:
                summary.missing.append(f"{student} {assignment}/{exercise}: the gradebook has no assignment "
                                       f"{assignment}; run `nbgrader generate_assignment {assignment}` first")
                continue
            where = cells[assignment].get(exercise)
            if where is None:
                summary.missing.append(f"{student} {assignment}/{exercise}: no test cell of {assignment} calls "
                                       f"autograder.nbgrader_points({assignment!r}, {exercise!r})")
                continue
            notebook, grade_cell, solution_cell = where
            gb.update_or_create_student(student)
            try:
                gb.find_submission(assignment, student)
            except MissingEntry:
                gb.add_submission(assignment, student)
                summary.added_submissions += 1
            grade = gb.find_grade(grade_cell, notebook, assignment, student)
            auto = min(max(float(row["points"]), 0.0), float(grade.max_score or row["max_points"]))
            grade.auto_score = auto
            grade.needs_manual_grade = False
            if grade.manual_score is not None and abs(float(grade.manual_score) - auto) > 1e-9:
                entry = (student, assignment, exercise, float(grade.manual_score), auto)
                if reset_overrides:
                    grade.manual_score = None
                    summary.cleared.append(entry)
                else:
                    summary.overrides.append(entry)
            if solution_cell:
                try:
                    gb.find_comment(solution_cell, notebook, assignment, student).auto_comment = row["feedback"]
                except MissingEntry:
                    pass
            summary.written += 1
        gb.db.commit()
    return summary
