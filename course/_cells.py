"""The notebooks are the one home of the lesson kernels: `%%cuda` cells read back by name.

A helper, a benchmark row or a test that needs a lesson kernel asks for the cell that teaches it, so what
a student sees in the notebook is what every table and plot measures. In a notebook session, a cell the
student ran (and perhaps edited) wins over the saved file: the next table measures the edit.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

from ._errors import CourseError

__all__ = ["CudaCell", "lesson_cell", "lesson_cells", "notebook_cells", "solution_source", "REPO"]

REPO = Path(__file__).resolve().parent.parent


@dataclasses.dataclass(frozen=True)
class CudaCell:
    """One `%%cuda` cell: its key (``--name``, else its first kernel), source, kernels and flags."""

    notebook: str             # the notebook's path relative to the repository
    key: str
    source: str               # the CUDA C++ without the magic line
    kernels: tuple            # names of the __global__ functions it defines, in order
    options: tuple = ()       # --options, split as the magic splits them
    requires: str | None = None
    index: int = 0            # position among the notebook's cells (for messages)
    includes: tuple = ()      # --include: cells of the same notebook compiled ahead of this one
    arch: str | None = None   # --arch: a target the cell is pinned to (sm_90a for wgmma), else the GPU's
    headers: tuple = ()       # --headers: header-only libraries it includes (cute), found by course._headers

    def prelude(self) -> dict:
        """``prelude`` and ``prelude_name`` for the compilers: the ``--include``d cells' sources, in order (in a
        notebook session, as they last ran)."""
        if not self.includes:
            return {}
        from ._magic import cell_sources
        cells = notebook_cells(REPO / self.notebook)
        missing = [n for n in self.includes if n not in cells]
        if missing:
            raise CourseError(f"{self.notebook}: cell {self.key!r} includes {', '.join(missing)}, which no %%cuda cell "
                              f"of the notebook defines (by --name)")
        text = "\n".join(cell_sources.get(n, cells[n].source) for n in self.includes)
        return {"prelude": text, "prelude_name": "+".join(self.includes)}

    def all_options(self, options=()) -> tuple:
        """The options it compiles with: its --headers libraries' (FeatureUnavailable, saying what to install,
        where one is missing), its --options, then ``options``."""
        from ._headers import library_options
        return (*library_options(self.headers), *self.options, *options)

    def compile(self, *, options=(), arch=None):
        """The cell compiled for this GPU (or ``arch``) with its own options plus ``options``: a Module."""
        from ._launch import compile as compile_
        from ._sources import CELL_FIRST_LINE
        return compile_(self.source, options=self.all_options(options), arch=arch or self.arch,
                        name=f"{self.key}.cu", first_line=CELL_FIRST_LINE, **self.prelude())

    def kernel(self, name: str | None = None, *, options=()):
        """One kernel of the cell (default: the cell's only or first kernel), compiled: a `course.Kernel`."""
        return self.compile(options=options).kernel(name or self.kernels[0])

    def compile_for_arch(self, arch: str, *, options=()):
        """NVRTC only (no GPU): a `course.Program` for ``arch``."""
        from ._compile import compile_for_arch
        from ._sources import CELL_FIRST_LINE
        return compile_for_arch(self.source, arch, options=self.all_options(options), name=f"{self.key}.cu",
                                first_line=CELL_FIRST_LINE, **self.prelude())


def _magic_flags(line: str) -> dict:
    """The flags of a ``%%cuda`` line, read by the magic's own parser (an unreadable line gives none)."""
    from ._magic import _parser
    try:
        return vars(_parser.parse_args(shlex.split(line)[1:]))
    except (SystemExit, ValueError):
        return {}


_CACHE: dict = {}


def notebook_cells(path) -> dict:
    """key -> `CudaCell` for every `%%cuda` cell of the notebook at ``path``, in order. Each cell is also
    reachable by the name of every kernel it defines (the key wins where names clash)."""
    from ._signature import parse_kernels
    path = Path(path)
    stamp = (path.resolve(), path.stat().st_mtime_ns)
    if stamp in _CACHE:
        return _CACHE[stamp]
    nb = json.loads(path.read_text(encoding="utf-8"))
    try:
        shown = path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        shown = str(path)
    cells, aliases = {}, {}
    for index, cell in enumerate(nb.get("cells", ())):
        text = "".join(cell["source"]) if isinstance(cell.get("source"), list) else cell.get("source", "")
        if cell.get("cell_type") != "code" or not text.startswith("%%cuda"):
            continue
        line, _, body = text.partition("\n")
        flags = _magic_flags(line)
        kernels = tuple(parse_kernels(body))
        key = flags.get("name") or (kernels[0] if kernels else f"cell{index}")
        includes = tuple(n for n in (flags.get("include") or "").split(",") if n)
        cells[key] = CudaCell(shown, key, body, kernels, tuple(shlex.split(flags.get("options") or "")),
                              flags.get("requires") or None, index, includes, flags.get("arch") or None,
                              tuple(n for n in (flags.get("headers") or "").split(",") if n))
        for k in kernels:
            aliases.setdefault(k, cells[key])
    out = {**aliases, **cells}
    _CACHE[stamp] = out
    return out


def _chapter_path(chapter: str) -> Path:
    path = REPO / "chapters" / f"{chapter}.ipynb"
    if not path.is_file():
        known = sorted(p.stem for p in (REPO / "chapters").glob("*.ipynb"))
        near = [k for k in known if k.startswith(str(chapter)[:2])]
        raise CourseError(f"there is no chapter {chapter!r}: expected chapters/{chapter}.ipynb"
                          + (f"; did you mean {near[0]!r}?" if near else f"; the chapters are {', '.join(known)}"))
    return path


def lesson_cells(chapter: str) -> dict:
    """key -> `CudaCell` of chapters/<chapter>.ipynb (see `notebook_cells`)."""
    return notebook_cells(_chapter_path(chapter))


def lesson_cell(chapter: str, name: str) -> CudaCell:
    """The `%%cuda` cell of chapters/<chapter>.ipynb named ``name`` (its ``--name``, or a kernel it defines).

    In a notebook session where that cell has run, its source is the one that ran (the student's edit,
    if any), not the saved file's.
    """
    cells = lesson_cells(chapter)
    if name not in cells:
        raise CourseError(f"chapters/{chapter}.ipynb has no %%cuda cell named {name!r} (by --name or by a kernel "
                          f"it defines); its cells define: {', '.join(sorted(cells))}")
    cell = cells[name]
    from ._magic import cell_sources
    live = cell_sources.get(cell.key)
    if live is not None and live != cell.source:
        from ._signature import parse_kernels
        kernels = tuple(parse_kernels(live)) or cell.kernels
        cell = dataclasses.replace(cell, source=live, kernels=kernels)
    return cell


def solution_source(chapter: str, name: str) -> str | None:
    """Text of solutions/<chapter>/<name> (``.cu`` added when no suffix is given), or None where the
    solutions are not shipped (a student's copy of the course)."""
    p = REPO / "solutions" / chapter / (name if Path(name).suffix else f"{name}.cu")
    return p.read_text() if p.is_file() else None


def triton_cell_source(chapter: str, name: str) -> str:
    """The source of the ``%%triton --name NAME`` cell of chapters/<chapter>.ipynb; the one run in this session
    wins over the file's."""
    import json

    from ._sources import cell_sources
    if name in cell_sources:
        return cell_sources[name]
    path = _chapter_path(chapter)
    for c in json.loads(path.read_text(encoding="utf-8")).get("cells", ()):
        text = "".join(c["source"]) if isinstance(c.get("source"), list) else c.get("source", "")
        first, _, body = text.partition("\n")
        if first.startswith("%%triton") and _name_of(first) == name:
            return body
    raise CourseError(f"chapters/{chapter}.ipynb has no %%triton cell named {name!r}")


def _name_of(line: str):
    try:
        args = shlex.split(line)
        return args[args.index("--name") + 1]
    except (ValueError, IndexError):
        return None
