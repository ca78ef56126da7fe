"""Find submissions and pull kernel sources and LAUNCH data out of them, without executing anything.

A notebook's kernel for exercise NAME is the last cell that is tagged ``kernel:NAME`` (``call:NAME`` for a
library-call exercise: the cell assigning its CALL dict, read as data later), or starts with
``%%cuda ... --name NAME``, or is an untagged ``%%cuda`` cell whose first kernel is NAME (the same key
`%%cuda` uses for `course.cell_sources`). LAUNCH data comes from a Python cell tagged ``launch:NAME``
(read with ast) or a ``// LAUNCH = {...}`` comment in the kernel source.
"""
from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

from .launchcfg import LaunchDataError, parse_launch_cell

__all__ = ["Submission", "cells_of", "extract_cells", "cuda_cell_name", "strip_magic", "read_notebook",
           "find_submissions"]

_CHAPTER = re.compile(r"^\d\d_[a-z0-9_]+$")


@dataclasses.dataclass
class Submission:
    """One student's work for one chapter: kernel sources and LAUNCH data by exercise name."""

    label: str
    path: str
    chapter: str | None
    kernels: dict = dataclasses.field(default_factory=dict)
    launches: dict = dataclasses.field(default_factory=dict)
    problems: dict = dataclasses.field(default_factory=dict)  # exercise -> message (bad LAUNCH cell ...)
    single_exercise: bool = False  # a .cu file: one kernel, named by the file or the folder


def _text(src) -> str:
    return "".join(src) if isinstance(src, list) else (src or "")


def cells_of(nb: dict) -> list:
    """(cell_type, source, tags) for each cell of a notebook dict (nbformat 4 JSON)."""
    out = []
    for cell in nb.get("cells", []):
        tags = list((cell.get("metadata") or {}).get("tags") or [])
        out.append((cell.get("cell_type", "code"), _text(cell.get("source")), tags))
    return out


def strip_magic(source: str) -> str:
    """The cell body below a ``%%cuda`` line (what the magic compiles)."""
    lines = source.split("\n")
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].lstrip().startswith("%%"):
        return "\n".join(lines[i + 1:])
    return source


def cuda_cell_name(source: str) -> str | None:
    """The exercise key of a ``%%cuda`` cell (its --name, or its first kernel's name) or of a
    ``%%cublas --name NAME`` cell; None otherwise."""
    first = source.lstrip().split("\n", 1)[0]
    magic = next((m for m in ("%%cuda", "%%cublas") if first.startswith(m)), None)
    if magic is None:
        return None
    try:
        args = shlex.split(first[len(magic):])
    except ValueError:
        args = first.split()[1:]
    for i, a in enumerate(args):
        if a == "--name" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--name="):
            return a.split("=", 1)[1]
    if magic == "%%cublas":
        return None
    from course._signature import parse_kernels
    names = list(parse_kernels(strip_magic(source)))
    return names[0] if names else None


def extract_cells(cells) -> tuple:
    """(kernels, launches, problems) from (cell_type, source, tags) triples; later cells win."""
    kernels, launches, problems = {}, {}, {}
    for cell_type, source, tags in cells:
        if cell_type != "code":
            continue
        # a library-call exercise's "source" is its call cell (autograder.CallExercise)
        tagged = [t.split(":", 1)[1].strip() for t in tags if t.startswith(("kernel:", "call:"))]
        launch_tags = [t.split(":", 1)[1].strip() for t in tags if t.startswith("launch:")]
        for name in tagged or ([cuda_cell_name(source)] if cuda_cell_name(source) else []):
            kernels[name] = strip_magic(source)
        for name in launch_tags:
            try:
                cfg = parse_launch_cell(source, name)
            except LaunchDataError as exc:
                problems[name] = str(exc)
                continue
            if cfg is None:
                problems[name] = (f"the cell tagged launch:{name} should assign a literal dict, "
                                  f"e.g. LAUNCH = {{\"block\": 256}}")
            else:
                launches[name] = cfg
                problems.pop(name, None)
    return kernels, launches, problems


def read_notebook(path) -> tuple:
    """(kernels, launches, problems) of a .ipynb file, read as JSON."""
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    return extract_cells(cells_of(nb))


def _chapter_of(path: Path, known, default) -> str | None:
    for part in [path.stem] + [p.name for p in path.parents]:
        if part in known or (not known and _CHAPTER.match(part)):
            return part
    return default


def find_submissions(path, *, chapter: str | None = None, known_chapters=()) -> list:
    """Submissions under ``path``: a notebook, a .cu file, or a folder of them (any depth).

    The chapter comes from ``chapter``, else from the notebook name or a folder name (nbgrader's
    submitted/<student>/<assignment>/ uses the assignment name, which is the chapter stem here).
    """
    path = Path(path)
    known = set(known_chapters)
    if path.is_file():
        files, root = [path], path.parent
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in (".ipynb", ".cu")
                       and ".ipynb_checkpoints" not in p.parts and p.is_file())
        root = path
    else:
        raise FileNotFoundError(f"{path} is neither a notebook, a .cu file nor a folder")
    subs = []
    for f in files:
        rel = f.relative_to(root) if f != path else Path(f.name)
        ch = chapter or _chapter_of(f.resolve(), known, None)
        if f.suffix == ".ipynb":
            try:
                kernels, launches, problems = read_notebook(f)
            except (OSError, ValueError) as exc:
                subs.append(Submission(str(rel), str(f), ch, problems={"*": f"unreadable notebook: {exc}"}))
                continue
            label = str(rel.parent) if str(rel.parent) != "." else rel.stem
            subs.append(Submission(label, str(f), ch, kernels, launches, problems))
        else:
            source = f.read_text(encoding="utf-8", errors="replace")
            subs.append(Submission(str(rel.with_suffix("")), str(f), ch, {f.stem: source},
                                   single_exercise=True))
    return subs
