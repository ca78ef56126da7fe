"""What the student's cell magics ran: each cell's source by name, and where in its cell a source starts.

A module of its own because both the magics (which fill `cell_sources`) and `course.compile` (which numbers
a cell's compile errors as the cell does) read it, and the magics import the compile-and-load layer.
"""
from __future__ import annotations

import ast

__all__ = ["cell_sources", "CELL_FIRST_LINE", "first_line_of", "cell_literal", "MAX_DATA_CELL_CHARS"]

cell_sources: dict = {}
"""Sources of `%%cuda`, `%%cublas` and `%%streams` cells by --name (or first kernel name); the grader reads exercises
from here."""

CELL_FIRST_LINE = 2
"""The cell line number of the first line of a cell magic's body: Jupyter numbers the magic line 1. Compile
errors of a cell's source are numbered from here by the magic, `CudaCell`, `course.compile` and the
grader's previews, so that they name the lines the student sees."""


def first_line_of(source: str) -> int:
    """`CELL_FIRST_LINE` for the body of a cell magic run in this session, else 1 (text of no cell)."""
    return CELL_FIRST_LINE if any(source == s for s in cell_sources.values()) else 1


MAX_DATA_CELL_CHARS = 20_000
"""The longest data cell body `cell_literal` reads: a call or a schedule is a few hundred characters, and a cap
keeps the parser (and every message quoting the cell) small whatever is pasted in."""


def cell_literal(source: str, exercise: str, *, what: str, names: set, example: str, fill: str, error: type):
    """The literal a data cell (``%%cublas``, ``%%streams``) holds, read with ast and never run: its last bare
    expression or its last assignment to one of ``names``. Raises ``error`` saying what to write: the cell
    still has its stub line (``fill`` says with what to replace it), is not Python, holds nothing, or holds
    something other than literals, is longer than `MAX_DATA_CELL_CHARS` or repeats a key in one dict.
    ``what`` names the thing in messages ("call", "schedule")."""
    lines = (source or "").split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    body = "\n".join(lines[1:] if lines and lines[0].lstrip().startswith("%%") else lines)
    if "YOUR CODE HERE" in body:
        raise error(f"the {exercise} {what} is not filled in yet: replace the `// YOUR CODE HERE` line with {fill}.")
    if len(body) > MAX_DATA_CELL_CHARS:
        raise error(f"the {exercise} {what} cell holds {len(body):,} characters; the grader reads a data cell of "
                    f"at most {MAX_DATA_CELL_CHARS:,} (a {what} takes a few hundred). Write the dict itself, such as "
                    f"{example}, with nothing else in the cell.")
    try:
        tree = ast.parse(body)
    except SyntaxError as exc:
        at = f"line {exc.lineno}: " if exc.lineno else ""
        raise error(f"the {exercise} {what} is not a valid Python literal ({at}{exc.msg}); "
                    f"write a dict such as {example}") from None
    except (ValueError, MemoryError, RecursionError):   # a NUL byte; nesting too deep for the parser
        raise error(f"the {exercise} {what} could not be read as Python (nested too deeply, or a stray NUL "
                    f"character); write a flat dict such as {example}") from None
    found = None
    for node in tree.body:
        if isinstance(node, ast.Expr):
            found = node.value
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and node.targets[0].id in names):
            found = node.value
    if found is None:
        raise error(f"no {what} found for {exercise}: its cell should hold a dict such as {example}.")
    try:
        value = ast.literal_eval(found)
    except (ValueError, TypeError, MemoryError, RecursionError):   # TypeError: a list or dict used as a key
        raise error(f"the {exercise} {what} must be a literal dict (the grader reads it as data and runs none of "
                    "it) with strings as keys: no variables, calls or arithmetic, and no list or dict as a "
                    f"key. Write it as {example}") from None
    twice = _repeated_key(found)
    if twice is not None:
        raise error(f"the {exercise} {what} gives the key {twice!r} twice in one dict; Python keeps only the last, "
                    "so the first is silently lost. Give each key once.")
    return value


def _repeated_key(node):
    """The first constant key that one dict literal under ``node`` repeats, or None."""
    for d in ast.walk(node):
        if isinstance(d, ast.Dict):
            seen = set()
            for k in d.keys:
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    if k.value in seen:
                        return k.value
                    seen.add(k.value)
    return None
