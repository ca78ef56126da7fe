"""Find submissions and pull kernel sources and LAUNCH data out of them, without executing anything.

A notebook's kernel for exercise NAME is the last cell that is tagged ``kernel:NAME`` (``call:NAME`` for a
library-call exercise: the cell assigning its CALL dict, read as data later), or starts with
``%%cuda ... --name NAME``, or is an untagged ``%%cuda`` cell whose first kernel is NAME (the same key
`%%cuda` uses for `course.cell_sources`); when several cells hold one exercise, `Submission.notes` says
so. LAUNCH data comes from a Python cell tagged ``launch:NAME`` (read with ast) or a ``// LAUNCH = {...}``
comment in the kernel source.

Files come from students, so any of them may be malformed, huge or hostile: each one that cannot be read
becomes a `Submission` whose ``problems["*"]`` tells the student what is wrong and what to do, and the
rest of the folder is graded all the same.
"""
from __future__ import annotations

import ast

import dataclasses
import json
import os
import re
import shlex
from pathlib import Path

from .launchcfg import LaunchDataError, parse_launch_cell
from .spec import DATA_MAGICS

__all__ = ["Submission", "NotebookError", "MAX_FILE_BYTES", "cells_of", "extract_cells", "cuda_cell_name", "graded_call",
           "strip_magic", "body_first_line", "read_notebook", "collect_submissions", "find_submissions"]

# a notebook of kernels is a few hundred KiB; anything near this is outputs or an attack on memory
MAX_FILE_BYTES = 20 << 20
_CHAPTER = re.compile(r"^\d\d_[a-z0-9_]+$")
# shlex is pure Python: a multi-MiB first line would stall grading for a --name that is never that long
_MAGIC_LINE_CHARS = 4096
_SUFFIXES = (".ipynb", ".cu")
_REDOWNLOAD = ("Open it in JupyterLab to check that it loads, then download it again (File > Download) "
               "and submit that file.")


class NotebookError(ValueError):
    """A file that is not a notebook the grader (or nbgrader) can read; the message says what to do."""


@dataclasses.dataclass
class Submission:
    """One student's work for one chapter: kernel sources and LAUNCH data by exercise name."""

    label: str
    path: str
    chapter: str | None
    kernels: dict = dataclasses.field(default_factory=dict)
    launches: dict = dataclasses.field(default_factory=dict)
    problems: dict = dataclasses.field(default_factory=dict)  # exercise -> message ("*": the whole file)
    single_exercise: bool = False  # a .cu file: one kernel, named by the file or the folder
    notes: dict = dataclasses.field(default_factory=dict)  # exercise -> message that costs no points
    # exercise -> the cell line number of the kernel's first line (2 below a %%cuda line; absent: 1)
    first_lines: dict = dataclasses.field(default_factory=dict)


def _kind(value) -> str:
    """How a JSON value reads in a message to a student."""
    if isinstance(value, bool):
        return f"the value {str(value).lower()}"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return f"a number ({repr(value)[:40]})"
    return {dict: "an object", list: "a list", str: "a string"}.get(type(value), type(value).__name__)


def _not_notebook(detail: str) -> NotebookError:
    return NotebookError(f"this file is not a notebook nbgrader can read: {detail}. {_REDOWNLOAD}")


def _text(src, where: str) -> str:
    if src is None:
        return ""
    if isinstance(src, str):
        return src
    if isinstance(src, list) and all(isinstance(s, str) for s in src):
        return "".join(src)
    raise _not_notebook(f"the source of {where} is {_kind(src)}, where it should be text "
                        f"(a string or a list of strings)")


def cells_of(nb) -> list:
    """(cell_type, source, tags) for each cell of a notebook (nbformat 4 JSON).

    Accepts any JSON value: one that is not a notebook raises `NotebookError` naming the cell and the
    field, never another exception. Missing or null fields read as empty, as Jupyter treats them.
    """
    if not isinstance(nb, dict):
        raise _not_notebook(f"it holds {_kind(nb)}, where a notebook is a JSON object with a list of cells")
    cells = nb.get("cells")
    if cells is None:
        if "worksheets" in nb:
            raise NotebookError("this file is an old nbformat 3 notebook, which nbgrader cannot read. Open it in "
                                "JupyterLab, save it (that converts it to nbformat 4), and submit it again.")
        raise _not_notebook('it has no "cells" list')
    if not isinstance(cells, list):
        raise _not_notebook(f'its "cells" field is {_kind(cells)}, not a list of cells')
    out = []
    for i, cell in enumerate(cells, 1):
        where = f"cell {i} (counting from the top)"
        if not isinstance(cell, dict):
            raise _not_notebook(f"{where} is {_kind(cell)}, not a cell object")
        cell_type = cell.get("cell_type", "code")
        if not isinstance(cell_type, str):
            raise _not_notebook(f"the cell_type of {where} is {_kind(cell_type)}, not a string")
        meta = cell.get("metadata")
        meta = {} if meta is None else meta
        if not isinstance(meta, dict):
            raise _not_notebook(f"the metadata of {where} is {_kind(meta)}, not an object")
        tags = meta.get("tags")
        tags = [] if tags is None else tags
        if not isinstance(tags, list):
            raise _not_notebook(f"the tags of {where} are {_kind(tags)}, not a list of strings")
        if not all(isinstance(t, str) for t in tags):
            bad = next(t for t in tags if not isinstance(t, str))
            raise _not_notebook(f"{where} has a tag that is {_kind(bad)}, not a string")
        out.append((cell_type, _text(cell.get("source"), where), list(tags)))
    return out


def strip_magic(source: str) -> str:
    """The cell body below a ``%%cuda`` line (what the magic compiles)."""
    if not isinstance(source, str):
        return ""
    lines = source.split("\n")
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    if i < len(lines) and lines[i].lstrip().startswith("%%"):
        return "\n".join(lines[i + 1:])
    return source


def body_first_line(source) -> int:
    """The cell line number (as Jupyter numbers a cell's lines, from 1) of the first line of
    ``strip_magic(source)``: 2 below a ``%%cuda`` first line, 1 for a cell without a magic line."""
    if not isinstance(source, str):
        return 1
    return source.count("\n") - strip_magic(source).count("\n") + 1


def cuda_cell_name(source) -> str | None:
    """The exercise key of a ``%%cuda`` cell (its --name, or its first kernel's name) or of a data cell
    ``%%cublas --name NAME`` or ``%%streams --name NAME`` (`spec.DATA_MAGICS`: a `CallExercise`'s); None otherwise
    (also for anything that is not a string)."""
    if not isinstance(source, str):
        return None
    first = source.lstrip().split("\n", 1)[0][:_MAGIC_LINE_CHARS]
    magic = next((m for m in ("%%cuda", "%%triton") + DATA_MAGICS if first.startswith(m)), None)
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
    if magic != "%%cuda":  # a %%triton cell, like a data cell, is named by its --name only
        return None
    from course.source import parse_kernels
    names = list(parse_kernels(strip_magic(source)))
    return names[0] if names else None


def _launch(source: str, name: str):
    """(config, None) or (None, problem) for a cell tagged launch:NAME."""
    try:
        cfg = parse_launch_cell(source, name)
    except LaunchDataError as exc:
        return None, str(exc)
    except (RecursionError, MemoryError, ValueError, SyntaxError):
        # Python's parser reports deep nesting as MemoryError or RecursionError, not as a syntax error
        return None, (f"the cell tagged launch:{name} could not be read as data (it nests too deeply or is not "
                      f"Python); it should assign a literal dict, e.g. LAUNCH = {{\"block\": 256}}")
    if cfg is None:
        return None, (f"the cell tagged launch:{name} should assign a literal dict, "
                      f"e.g. LAUNCH = {{\"block\": 256}}")
    return cfg, None


def _duplicate_note(name: str, holders: list) -> str:
    """``holders``: (cell number, tag or None) of every cell that held ``name``, in order."""
    numbers = [n for n, _ in holders]
    tags = {tag for _, tag in holders}
    if len(tags) == 1 and None not in tags:
        how = f"are tagged {next(iter(tags))}"
    elif tags == {None}:
        how = f"are %%cuda cells named {name}"
    else:
        how = f"hold {name}, tagged or named by %%cuda"
    shown = ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"
    return (f"{len(holders)} cells {how} (cells {shown}, counting from the top); the last one, cell "
            f"{numbers[-1]}, was graded. Keep only the cell you want graded.")


def _extract(cells) -> tuple:
    """(kernels, launches, problems, notes, first_lines) from (cell_type, source, tags) triples; later cells
    win. ``first_lines``: exercise -> the cell line of its kernel's first line (`body_first_line`)."""
    if not isinstance(cells, (list, tuple)):
        raise NotebookError(f"cells should be a list of (cell_type, source, tags), not {_kind(cells)}")
    kernels, launches, problems, holders, first_lines = {}, {}, {}, {}, {}
    for number, cell in enumerate(cells, 1):
        if not (isinstance(cell, (list, tuple)) and len(cell) == 3 and isinstance(cell[0], str)
                and isinstance(cell[1], str) and isinstance(cell[2], (list, tuple))
                and all(isinstance(t, str) for t in cell[2])):
            raise NotebookError(f"cell {number} should be (cell_type, source, tags) of strings, not {cell!r:.80}")
        cell_type, source, tags = cell
        if cell_type != "code":
            continue
        # a library-call exercise's "source" is its call cell (autograder.CallExercise)
        tagged = {t.split(":", 1)[1].strip(): t.strip() for t in tags if t.startswith(("kernel:", "call:"))}
        launch_tags = dict.fromkeys(t.split(":", 1)[1].strip() for t in tags if t.startswith("launch:"))
        if not tagged:
            magic_name = cuda_cell_name(source)
            tagged = {magic_name: None} if magic_name else {}
        for name, tag in tagged.items():
            kernels[name] = strip_magic(source)
            first_lines[name] = body_first_line(source)
            holders.setdefault(name, []).append((number, tag))
        for name in launch_tags:
            cfg, problem = _launch(source, name)
            if problem:
                problems[name] = problem
            else:
                launches[name] = cfg
                problems.pop(name, None)
    notes = {name: _duplicate_note(name, h) for name, h in holders.items() if len(h) > 1}
    return kernels, launches, problems, notes, first_lines


def extract_cells(cells) -> tuple:
    """(kernels, launches, problems) from (cell_type, source, tags) triples; later cells win.

    Raises `NotebookError` for anything that is not such a list, never another exception.
    """
    return _extract(cells)[:3]


def _read_capped(path: Path) -> bytes:
    """The file's bytes, refusing more than MAX_FILE_BYTES (checked again on reading: it may grow)."""
    size = os.stat(path).st_size
    with open(path, "rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if max(size, len(data)) > MAX_FILE_BYTES:
        mib, cap = max(size, len(data)) / (1 << 20), MAX_FILE_BYTES / (1 << 20)
        if Path(path).suffix.lower() == ".ipynb":
            raise NotebookError(
                f"this notebook is {mib:.1f} MiB, more than the {cap:g} MiB the grader reads, so it was not graded. "
                f"Big notebooks are big outputs (images, long printouts): clear them (Edit > Clear Outputs of All "
                f"Cells), save, and submit again.")
        raise NotebookError(f"this file is {mib:.1f} MiB, more than the {cap:g} MiB the grader reads, so it was "
                            f"not graded. Submit only your kernel's source.")
    return data


def _load(path: Path):
    """The JSON value of a notebook file; `NotebookError` (never another ValueError) if it is none."""
    data = _read_capped(path)
    try:
        text = data.decode("utf-8-sig")  # a BOM from a Windows editor is harmless
    except UnicodeDecodeError as exc:
        raise _not_notebook(f"it is not UTF-8 text (byte {exc.start} cannot be decoded)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _not_notebook(f"it is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                            f"was it cut short by an upload or edited outside Jupyter?") from None
    except RecursionError:
        raise _not_notebook("its JSON is nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise _not_notebook(f"its JSON holds a value that cannot be read ({str(exc)[:100]})") from None


def read_notebook(path) -> tuple:
    """(kernels, launches, problems) of a .ipynb file, read as JSON.

    Raises `NotebookError` (a ValueError) saying what to do for a file that is too big, not JSON or not a
    notebook, and OSError if it cannot be opened.
    """
    return extract_cells(cells_of(_load(Path(path))))


def _tell(name: str, known: dict) -> str | None:
    """The chapter stem that a file or folder name is, if it is one (case as nbgrader may have it)."""
    if known:
        return known.get(name.lower())
    return name.lower() if _CHAPTER.match(name.lower()) else None


def _names(f: Path) -> list:
    """The file's stem, then its folders from the nearest out: where its chapter may be written."""
    return [f.stem] + [p.name for p in f.parents]


def _chapter_named(where: Path, known: dict) -> str | None:
    return next((c for c in (_tell(n, known) for n in _names(where)) if c), None)


def _shown(name) -> str:
    """A path for a one-line message: control characters in student-chosen names are escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(name))


class _Folders:
    """What each folder is, looked up once per folder however many files it holds."""

    def __init__(self, known: dict):
        self.known, self._tree = known, {}

    def assignment_of(self, f: Path) -> Path | None:
        """The nearest folder above ``f`` named after a chapter, if nbgrader's layout puts it there."""
        folder = next((p for p in f.parents if _tell(p.name, self.known)), None)
        return folder if folder is not None and self.is_tree(folder) else None

    def is_tree(self, folder: Path) -> bool:
        # nbgrader's submitted/<student>/<assignment>/ holds <assignment>.ipynb and a timestamp.txt; a
        # folder that merely shares a chapter's name (loose notebooks collected by hand) holds neither
        if folder not in self._tree:
            try:
                names = {n.lower() for n in os.listdir(folder)}
            except OSError:
                names = set()
            self._tree[folder] = "timestamp.txt" in names or f"{folder.name.lower()}.ipynb" in names
        return self._tree[folder]


def _walk(root: Path) -> list:
    """.ipynb and .cu files under ``root``, sorted; hidden ones (.ipynb_checkpoints ...) are skipped."""
    found = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found += [Path(top) / n for n in files if not n.startswith(".") and Path(n).suffix.lower() in _SUFFIXES]
    # a symbolic link could point at any file the grader may read (another student's work, /etc/passwd),
    # whose text would come back in a compile error: links are never read
    return sorted(f for f in found if f.is_file() and not f.is_symlink())


def _submission(f: Path, label: str, chapter: str | None) -> Submission:
    """The Submission of one file that counts; a file that cannot be read becomes a problem row."""
    if f.suffix.lower() != ".ipynb":
        try:
            source = _read_capped(f).decode("utf-8", errors="replace")
        except (OSError, NotebookError) as exc:
            return Submission(label, str(f), chapter, problems={"*": _unreadable(exc)}, single_exercise=True)
        return Submission(label, str(f), chapter, {f.stem: source}, single_exercise=True)
    try:
        kernels, launches, problems, notes, first_lines = _extract(cells_of(_load(f)))
    except (OSError, NotebookError) as exc:
        return Submission(label, str(f), chapter, problems={"*": _unreadable(exc)})
    return Submission(label, str(f), chapter, kernels, launches, problems, notes=notes, first_lines=first_lines)


def _unreadable(exc: Exception) -> str:
    if isinstance(exc, NotebookError):
        return str(exc)
    return f"this file could not be read ({exc.strerror or type(exc).__name__}); submit it again."


def collect_submissions(path, *, chapter: str | None = None, known_chapters=(),
                        exercises_of=None) -> tuple:
    """(submissions, ignored): what to grade under ``path``, and one line per file left out, saying why.

    ``path`` is a notebook or a .cu file (always graded: it was named), or a folder, searched at any depth:

    - in nbgrader's ``submitted/<student>/<assignment>/`` (a folder named after a chapter that holds
      ``<assignment>.ipynb`` or nbgrader's timestamp.txt) only that notebook counts, as for nbgrader;
    - elsewhere each notebook whose chapter can be told (``chapter``, else a ``NN_topic`` file or folder
      name; ``known_chapters`` lists the valid ones) is a submission;
    - a .cu file counts if its stem or its folder names an exercise of its chapter (``exercises_of``:
      chapter -> exercise names; without it every .cu with a chapter counts);
    - with ``chapter``, files whose path names another chapter are left out;
    - hidden files and folders (.ipynb_checkpoints ...) are skipped without a line.

    A file that counts but cannot be read is a submission whose ``problems["*"]`` says what to do.
    """
    path = Path(path)
    known = {c.lower(): c for c in known_chapters}
    if path.is_file():
        ch = chapter or _chapter_named(Path(os.path.abspath(path)), known)
        return [_submission(path, path.stem, ch)], []
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is neither a notebook, a .cu file nor a folder")
    folders, exercises = _Folders(known), {}
    subs, ignored = [], []
    for f in _walk(path):
        rel = f.relative_to(path)
        where = Path(os.path.abspath(f))
        told = [c for c in (_tell(n, known) for n in _names(where)) if c]
        other = next((c for c in told if chapter and c != chapter), None)
        if other:
            ignored.append(f"{_shown(rel)}: belongs to {other}, not to --chapter {chapter}")
            continue
        ch = chapter or (told[0] if told else None)
        if ch is None:
            ignored.append(f"{_shown(rel)}: cannot tell its chapter (no NN_topic in its name or folders); "
                           f"pass --chapter")
            continue
        if f.suffix.lower() == ".cu":
            if exercises_of is not None:
                if ch not in exercises:
                    exercises[ch] = list(exercises_of(ch))
                if f.stem not in exercises[ch] and f.parent.name not in exercises[ch]:
                    ignored.append(f"{_shown(rel)}: not named after an exercise of {ch} "
                                   f"({', '.join(exercises[ch])}); name the file or its folder after one")
                    continue
            subs.append(_submission(f, str(rel.with_suffix("")), ch))
            continue
        home = folders.assignment_of(where)
        if home is None:
            subs.append(_submission(f, str(rel.with_suffix("")), ch))
        elif home == where.parent and f.stem.lower() == home.name.lower():
            subs.append(_submission(f, str(rel.parent) if str(rel.parent) != "." else rel.stem, ch))
        else:
            ignored.append(f"{_shown(rel)}: not the assignment's notebook; in nbgrader's layout only "
                           f"{_shown(home.name)}.ipynb in the {_shown(home.name)} folder is graded")
    return subs, ignored


def find_submissions(path, *, chapter: str | None = None, known_chapters=(), exercises_of=None) -> list:
    """The submissions of `collect_submissions` (what it ignored is not reported)."""
    return collect_submissions(path, chapter=chapter, known_chapters=known_chapters, exercises_of=exercises_of)[0]


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
