"""What the student's cell magics ran: each cell's source by name, and where in its cell a source starts.

A module of its own because both the magics (which fill `cell_sources`) and `course.compile` (which numbers
a cell's compile errors as the cell does) read it, and the magics import the compile-and-load layer.
"""
from __future__ import annotations

__all__ = ["cell_sources", "CELL_FIRST_LINE", "first_line_of"]

cell_sources: dict = {}
"""Sources of `%%cuda` and `%%cublas` cells by --name (or first kernel name); the grader reads exercises
from here."""

CELL_FIRST_LINE = 2
"""The cell line number of the first line of a cell magic's body: Jupyter numbers the magic line 1. Compile
errors of a cell's source are numbered from here by the magic, `CudaCell`, `course.compile` and the
grader's previews, so that they name the lines the student sees."""


def first_line_of(source: str) -> int:
    """`CELL_FIRST_LINE` for the body of a cell magic run in this session, else 1 (text of no cell)."""
    return CELL_FIRST_LINE if any(source == s for s in cell_sources.values()) else 1
