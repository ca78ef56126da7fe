"""Keep each exercise notebook in step with its spec and its reference solutions: `python -m autograder sync`.

What the notebook must say, and who owns it:

- a solution cell (tagged ``kernel:NAME``, or ``call:NAME`` for a library call) is its magic line
  (``%%cuda --name NAME --no-run``, with ``--arch sm_90a`` for an exercise pinned to that target, /
  ``%%cublas --name NAME``) and then ``solutions/<chapter>/<file>``, without the file's trailing newlines; the
  file is the one truth;
- the hidden test cell (grade id ``NAME_test``) is worth the exercise's points;
- in the exercise's section (from its ``## `` heading to the next one) three phrases carry the numbers of
  the spec: the heading's closing parenthesis (``(10 points: 6 for correctness, 4 for speed)``), the speed
  phrase (``full speed points at 0.8 x the reference's speed or better, half at 0.5 x``) and, for a
  pipeline, the overlap phrase (``all 4 overlap points when the pipeline takes at most 0.64 of the time
  without overlap, 2 at most 0.85, none above``). The prose around them is the author's.

Sync rewrites all of these from the spec; ``--check`` reports them. What it cannot place (a missing cell,
a missing speed phrase, another number quoted beside "x the reference") is reported for the author.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

from . import loader
from .spec import CallExercise

__all__ = ["Problem", "notebook_path", "live_exercises", "points_phrase", "speed_phrase", "pipeline_phrase",
           "solution_file", "solution_cell_source", "notebook_problems", "sync_chapter", "add_parser", "run"]

_NUM = r"\d+(?:\.\d+)?"
# Phrases the sync owns, matched across the line breaks of wrapped prose
_SPEED = re.compile(rf"full\s+speed\s+points\s+at\s+{_NUM}\s+x\s+the\s+reference's\s+speed\s+or\s+better"
                    rf"(?:,\s+(?:half|a\s+quarter|three\s+quarters|{_NUM}%)\s+at\s+{_NUM}\s+x)*")
_OVERLAP = re.compile(rf"all\s+{_NUM}\s+overlap\s+points\s+when\s+the\s+pipeline\s+takes\s+at\s+most\s+{_NUM}\s+"
                      rf"of\s+the\s+time\s+without\s+overlap,\s+{_NUM}\s+at\s+most\s+{_NUM},\s+none\s+above")
_HEADING = re.compile(r"^(##[ \t].*?)(?:[ \t]*\(([^()\n]*\bpoints?\b[^()\n]*)\))?[ \t]*$", re.M)
# numbers quoted outside the owned phrases that must still agree with the spec
_RATIO_QUOTE = re.compile(rf"({_NUM})\s+x\s+(?:the\s+reference|its\s+speed)")
_POINTS_QUOTE = re.compile(rf"({_NUM})\s+(correctness|speed|overlap)\s+points")
_FRACTIONS = {0.5: "half", 0.25: "a quarter", 0.75: "three quarters"}


@dataclasses.dataclass(frozen=True)
class Problem:
    """One way a chapter's spec, reference solutions or notebook are broken, for the author.

    ``where`` is a file (and cell) relative to the repository; ``message`` says what was expected, what was
    found and what to do; ``fixable`` is True when `python -m autograder sync` fixes it.
    """

    where: str
    message: str
    exercise: str = ""
    kind: str = ""
    fixable: bool = False
    chapter: str = ""

    def summary(self) -> str:
        """Where and what, without the advice to run the sync (for the sync's own report)."""
        who = f"exercise {self.exercise!r}: " if self.exercise else ""
        return f"{self.where}: {who}{self.message}"

    def __str__(self) -> str:
        if not self.fixable:
            return self.summary()
        return f"{self.summary()}. `python -m autograder sync {self.chapter}` writes this"


def _g(x) -> str:
    return f"{float(x):g}"


def points_phrase(ex) -> str:
    """The heading's parenthesis: ``10 points: 6 for correctness, 4 for speed``."""
    if isinstance(ex, CallExercise) and ex.pipeline is None:
        return f"{_g(ex.max_points)} points"
    parts = [f"{_g(ex.points.correctness)} for correctness"]
    if ex.points.speed:
        parts.append(f"{_g(ex.points.speed)} for speed")
    if ex.pipeline is not None:
        parts.append(f"{_g(ex.pipeline.points)} for overlap")
    if len(parts) == 1:
        return f"{_g(ex.max_points)} points, correctness only"
    return f"{_g(ex.max_points)} points: " + ", ".join(parts)


def speed_phrase(ex) -> str | None:
    """``full speed points at 0.8 x the reference's speed or better, half at 0.5 x``; None without speed points."""
    if isinstance(ex, CallExercise) or not ex.points.speed:
        return None
    text = f"full speed points at {_g(ex.speed_threshold)} x the reference's speed or better"
    for ratio, fraction in ex.tiers[1:]:
        text += f", {_FRACTIONS.get(fraction, f'{100 * fraction:g}%')} at {_g(ratio)} x"
    return text


def pipeline_phrase(ex) -> str | None:
    pl = getattr(ex, "pipeline", None)
    if pl is None:
        return None
    return (f"all {_g(pl.points)} overlap points when the pipeline takes at most {_g(pl.full_at)} of the time "
            f"without overlap, {_g(pl.points / 2)} at most {_g(pl.half_at)}, none above")


def notebook_path(chapter: str) -> Path:
    return loader.ROOT / "exercises" / "source" / chapter / f"{chapter}.ipynb"


def live_exercises(chapter: str) -> tuple:
    """The exercises of the live spec file (the one authors edit and notebooks show), else of the frozen one."""
    path = loader.SPECS_DIR / f"{chapter}.py"
    if path.is_file():
        return tuple(loader.load_spec_file(path))
    return loader.load_chapter(chapter)  # no live file: its SpecError names the chapters there are


def _shown(path: Path) -> str:
    try:
        return Path(path).relative_to(loader.ROOT).as_posix()
    except ValueError:
        return str(path)


def solution_file(ex) -> Path:
    folder = Path(ex.solutions_dir or loader.SOLUTIONS_DIR / ex.chapter)  # a frozen snapshot has its own copies
    return folder / (ex.solution_file if isinstance(ex, CallExercise) else ex.source_file)


def solution_cell_source(ex) -> str:
    """What the exercise's solution cell must hold: the magic line, then the reference file without its
    trailing newlines (a cell has none)."""
    if getattr(ex, "language", "cuda") == "triton":  # Python, run by the magic; its LAUNCH is in the file
        return f"%%triton --name {ex.name}\n" + solution_file(ex).read_text(encoding="utf-8").rstrip("\n")
    magic = f"{ex.magic} --name {ex.name}" if isinstance(ex, CallExercise) else f"%%cuda --name {ex.name} --no-run"
    if getattr(ex, "arch", None):  # the magic compiles for the GPU's own arch, where wgmma does not exist
        magic += f" --arch {ex.arch}"
    return magic + "\n" + solution_file(ex).read_text(encoding="utf-8").rstrip("\n")


class _Notebook:
    """A notebook's JSON, written back in the file's own style (indent, key order, escapes, line lists)."""

    def __init__(self, path: Path):
        self.path, self.shown = path, _shown(path)
        self.text = path.read_text(encoding="utf-8")
        self.data = json.loads(self.text)
        m = re.match(r"\{\n( +)\"", self.text)
        self.indent = len(m.group(1)) if m else 1
        self.style = next((s for s in ((False, False), (False, True), (True, False), (True, True))
                           if self._dump(*s) == self.text), (False, False))
        self.cells = self.data.get("cells", [])

    def _dump(self, ensure_ascii: bool, sort_keys: bool) -> str:
        return json.dumps(self.data, indent=self.indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys) + "\n"

    def dumps(self) -> str:
        return self._dump(*self.style)

    def source(self, i: int) -> str:
        src = self.cells[i].get("source", "")
        return "".join(src) if isinstance(src, list) else src

    def set_source(self, i: int, text: str) -> None:
        cell = self.cells[i]
        cell["source"] = text.splitlines(keepends=True) if isinstance(cell.get("source"), list) else text

    def where(self, i: int) -> str:
        return f"{self.shown} cell {i}"

    def tagged(self, tag: str) -> list:
        return [i for i, c in enumerate(self.cells) if tag in (c.get("metadata", {}).get("tags") or [])]

    def graded(self, grade_id: str) -> list:
        return [i for i, c in enumerate(self.cells)
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id]

    def is_heading(self, i: int) -> bool:
        return self.cells[i].get("cell_type") == "markdown" and bool(re.search(r"^##[ \t]", self.source(i), re.M))


def _first_difference(have: str, want: str) -> str:
    if have.rstrip() == want.rstrip():
        extra = len(have) - len(have.rstrip())
        return (f"they differ only at the end: the cell ends with {extra} whitespace character(s) the file does "
                "not have" if extra else "they differ only at the end: the file has trailing blanks the cell "
                "lacks")
    a, b = have.split("\n"), want.split("\n")
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    cell_line = a[n] if n < len(a) else "(the cell ends)"
    file_line = b[n] if n < len(b) else "(the file ends)"
    return (f"first difference at line {n + 1} of the cell: the file has {file_line[:120]!r}, the cell "
            f"{cell_line[:120]!r}")


def _reconcile_solution(nb, chapter, ex, k, problems) -> None:
    path = solution_file(ex)
    if not path.is_file():
        problems.append(Problem(_shown(path), "does not exist, so the solution cell has nothing to equal",
                                ex.name, "solution-cell"))
        return
    want = solution_cell_source(ex)
    if "BEGIN SOLUTION" not in want or "END SOLUTION" not in want:
        problems.append(Problem(_shown(path), "has no BEGIN SOLUTION / END SOLUTION region, so nbgrader would "
                                "replace the whole cell, magic line included: mark the part students write with "
                                "`// BEGIN SOLUTION` and `// END SOLUTION` (`# ...` in a %%cublas cell)",
                                ex.name, "solution-cell"))
    have = nb.source(k)
    if have != want:
        problems.append(Problem(nb.where(k), f"the solution cell should be {want.partition(chr(10))[0]!r} and then "
                                f"{_shown(path)}, and is not ({_first_difference(have, want)}); edit the file, not "
                                "the cell (a change made in the cell belongs in the file first)", ex.name,
                                "solution-cell", True, chapter))
        nb.set_source(k, want)
    want_meta = {"grade": False, "grade_id": f"{ex.name}_solution", "locked": False, "schema_version": 3,
                 "solution": True}
    meta = nb.cells[k].setdefault("metadata", {})
    if meta.get("nbgrader") != want_meta:
        problems.append(Problem(nb.where(k), f"the solution cell's nbgrader metadata should be {want_meta}; found "
                                f"{meta.get('nbgrader')}", ex.name, "notebook", True, chapter))
        meta["nbgrader"] = want_meta


def _reconcile_test_cell(nb, chapter, ex, problems) -> None:
    cells = nb.graded(f"{ex.name}_test")
    call = f'autograder.nbgrader_points("{chapter}", "{ex.name}")'
    if len(cells) != 1:
        problems.append(Problem(nb.shown, f"expected one hidden test cell with grade id {ex.name}_test; found "
                                f"{len(cells)}{' (cells ' + ', '.join(map(str, cells)) + ')' if cells else ''}. "
                                f"It holds `{call}` between ### BEGIN HIDDEN TESTS and ### END HIDDEN TESTS "
                                "(autograder/SPEC_FORMAT.md, 'In the exercise notebook')", ex.name, "notebook"))
        return
    t = cells[0]
    meta = nb.cells[t]["metadata"]["nbgrader"]
    points = int(ex.max_points) if float(ex.max_points).is_integer() else ex.max_points
    if meta.get("points") != points:
        problems.append(Problem(nb.where(t), f"the hidden test cell is worth {meta.get('points')!r} points, the "
                                f"spec's {ex.name} {points} ({points_phrase(ex)}): nbgrader would score it out of "
                                "the wrong total", ex.name, "points", True, chapter))
        meta["points"] = points
    if not (meta.get("grade") is True and meta.get("locked") is True):
        problems.append(Problem(nb.where(t), "the hidden test cell should be graded and locked (nbgrader metadata "
                                f"grade and locked true); found grade={meta.get('grade')!r}, "
                                f"locked={meta.get('locked')!r}", ex.name, "notebook", True, chapter))
        meta["grade"] = meta["locked"] = True
    src = nb.source(t)
    lines = [ln for ln in src.strip().split("\n") if ln.strip() and not ln.strip().startswith("#")]
    if not lines or lines[-1] != call:
        problems.append(Problem(nb.where(t), f"the hidden test cell's last expression should be `{call}` (its value "
                                f"is the points); found {lines[-1] if lines else 'nothing'!r}", ex.name, "notebook"))
    elif not (0 <= src.find("### BEGIN HIDDEN TESTS") < src.find("nbgrader_points") < src.find("### END HIDDEN "
                                                                                               "TESTS")):
        problems.append(Problem(nb.where(t), f"`{call}` should stand between ### BEGIN HIDDEN TESTS and ### END "
                                "HIDDEN TESTS, so students do not see it", ex.name, "notebook"))


def _section(nb, k: int) -> tuple:
    """(heading cell, markdown cells of the section) of the exercise whose solution cell is ``k``."""
    heading = next((i for i in range(k, -1, -1) if nb.is_heading(i)), None)
    if heading is None:
        return None, []
    end = next((i for i in range(k + 1, len(nb.cells)) if nb.is_heading(i)), len(nb.cells))
    return heading, [i for i in range(heading, end) if nb.cells[i].get("cell_type") == "markdown"]


def _reconcile_phrase(nb, chapter, ex, cells, pattern, want, what, problems) -> None:
    found = [(i, m) for i in cells for m in pattern.finditer(nb.source(i))]
    where = nb.where(cells[0]) if len(cells) == 1 else f"{nb.shown} cells {cells[0]}-{cells[-1]}"
    if want is None:
        for i, m in found:
            problems.append(Problem(nb.where(i), f"quotes {' '.join(m.group(0).split())!r}, but the spec gives no "
                                    f"{what} points: remove it", ex.name, "text"))
        return
    if not found:
        problems.append(Problem(where, f"the exercise's section never states its {what} thresholds as the sync "
                                f"can find them: put the phrase {want!r} in a sentence of it (sync keeps its "
                                "numbers equal to the spec's from then on)", ex.name, "text"))
    elif len(found) > 1:
        problems.append(Problem(where, f"the {what} phrase appears {len(found)} times (cells "
                                f"{', '.join(str(i) for i, _ in found)}); keep one, so that there is one place "
                                "that says it", ex.name, "text"))
    else:
        i, m = found[0]
        if " ".join(m.group(0).split()) != want:
            problems.append(Problem(nb.where(i), f"says {' '.join(m.group(0).split())!r}; the spec says {want!r}",
                                    ex.name, "text", True, chapter))
            src = nb.source(i)
            nb.set_source(i, src[:m.start()] + want + src[m.end():])


def _reconcile_text(nb, chapter, ex, k, problems) -> None:
    heading, cells = _section(nb, k)
    if heading is None:
        problems.append(Problem(nb.where(k), "has no `## ` heading above it: each exercise starts with one, "
                                f"ending in its points, e.g. `## Exercise 1: ... ({points_phrase(ex)})`",
                                ex.name, "text"))
        return
    src = nb.source(heading)
    m = _HEADING.search(src)
    want = points_phrase(ex)
    if m.group(2) is None or " ".join(m.group(2).split()) != want:
        found = f"({m.group(2)})" if m.group(2) is not None else "no points in parentheses"
        problems.append(Problem(nb.where(heading), f"the heading {m.group(0).strip()!r} should end in ({want}); "
                                f"found {found}", ex.name, "points", True, chapter))
        nb.set_source(heading, src[:m.start()] + f"{m.group(1)} ({want})" + src[m.end():])
    _reconcile_phrase(nb, chapter, ex, cells, _SPEED, speed_phrase(ex), "speed", problems)
    _reconcile_phrase(nb, chapter, ex, cells, _OVERLAP, pipeline_phrase(ex), "overlap", problems)
    ratios = {float(r) for r, _ in ex.tiers} if speed_phrase(ex) else set()
    points = {"correctness": ex.points.correctness, "speed": ex.points.speed,
              "overlap": ex.pipeline.points if getattr(ex, "pipeline", None) else 0}
    for i in cells:
        text = _OVERLAP.sub("", _SPEED.sub("", nb.source(i)))
        for q in _RATIO_QUOTE.finditer(text):
            if float(q.group(1)) not in ratios:
                allowed = ", ".join(_g(r) for r in sorted(ratios, reverse=True)) or "none: no speed points"
                problems.append(Problem(nb.where(i), f"quotes {' '.join(q.group(0).split())!r}, but the spec's speed "
                                        f"ratios are {allowed}: correct the number, or say it once through the "
                                        "synced speed phrase", ex.name, "text"))
        for q in _POINTS_QUOTE.finditer(text):
            if float(q.group(1)) != float(points[q.group(2)]):
                problems.append(Problem(nb.where(i), f"quotes {' '.join(q.group(0).split())!r}; the spec gives "
                                        f"{_g(points[q.group(2)])} {q.group(2)} points", ex.name, "text"))


def _reconcile(nb, chapter: str, exercises) -> list:
    problems = []
    from course.colab import cell_source  # standard library only; it reads pyproject's [tool.course]
    if not nb.cells or nb.source(0) != cell_source(kind="exercise"):
        problems.append(Problem(nb.where(0), "the first cell should be the set-up cell of course/colab.py (on "
                                "Colab it installs the course; then `%load_ext course`, so that the %%cuda cells "
                                "work when the notebook runs top to bottom), with pyproject.toml's [tool.course] "
                                "repo_url in it: run python3 tools/add_colab_cell.py", "", "notebook"))
    names = {ex.name for ex in exercises}
    for i, c in enumerate(nb.cells):
        for tag in c.get("metadata", {}).get("tags") or []:
            kind, _, name = tag.partition(":")
            if kind in ("kernel", "call") and name not in names:
                problems.append(Problem(nb.where(i), f"is tagged {tag}, but the spec has no exercise {name!r} "
                                        f"(its exercises: {', '.join(sorted(names))}): rename the tag or add the "
                                        "exercise to the spec", name, "notebook"))
    previews = [nb.source(i) for i, c in enumerate(nb.cells) if c.get("cell_type") == "code"]
    for ex in exercises:
        tag = f"{'call' if isinstance(ex, CallExercise) else 'kernel'}:{ex.name}"
        cells = nb.tagged(tag)
        if not cells:
            magic = solution_cell_source(ex).partition("\n")[0]
            problems.append(Problem(nb.shown, f"no cell is tagged {tag}. Add the student's solution cell, a code cell "
                                    f"`{magic}` tagged {tag} under a `## ` heading (autograder/SPEC_FORMAT.md, 'In the "
                                    "exercise notebook'); then `python -m autograder sync` fills in the solution",
                                    ex.name, "notebook"))
        elif len(cells) > 1:
            problems.append(Problem(nb.shown, f"cells {', '.join(map(str, cells))} are all tagged {tag}; tag only "
                                    "the solution cell", ex.name, "notebook"))
        if cells:
            _reconcile_solution(nb, chapter, ex, cells[0], problems)
        _reconcile_test_cell(nb, chapter, ex, problems)
        preview = f'autograder.preview("{chapter}", "{ex.name}")'
        if not any(preview in src for src in previews):
            problems.append(Problem(nb.shown, f"no cell calls `{preview}`, so students cannot see their grade "
                                    "before submitting: add one after the self-check", ex.name, "notebook"))
        if cells:
            _reconcile_text(nb, chapter, ex, cells[0], problems)
    return problems


def _open(chapter: str):
    path = notebook_path(chapter)
    if not path.is_file():
        return None, [Problem(_shown(path), f"chapter {chapter} has a spec but no exercise notebook here",
                              "", "notebook")]
    try:
        return _Notebook(path), []
    except (ValueError, OSError) as exc:
        return None, [Problem(_shown(path), f"cannot be read as a notebook ({type(exc).__name__}: {exc})",
                              "", "notebook")]


def notebook_problems(chapter: str, exercises=None) -> list:
    """Every way the chapter's notebook disagrees with its spec and solutions (nothing is written)."""
    nb, problems = _open(chapter)
    if nb is None:
        return problems
    return _reconcile(nb, chapter, live_exercises(chapter) if exercises is None else exercises)


def sync_chapter(chapter: str, *, write: bool = True) -> list:
    """Write the spec's numbers and the solution files into the chapter's notebook (``write=False``: only
    say what would change). Returns every problem found: the ``fixable`` ones are fixed when writing."""
    nb, problems = _open(chapter)
    if nb is None:
        return problems
    problems = _reconcile(nb, chapter, live_exercises(chapter))
    out = nb.dumps()
    if write and out != nb.text:
        nb.path.write_text(out, encoding="utf-8")
    return problems


def add_parser(sub) -> None:
    s = sub.add_parser("sync", help="write solutions/*.cu and the specs' points and thresholds into the exercise "
                                    "notebooks (--check: only report what differs)")
    s.add_argument("chapters", nargs="*", help="chapter stems (default: every chapter with a spec)")
    s.add_argument("--check", action="store_true", help="change nothing; list what differs and exit 1 if anything")


def run(args: argparse.Namespace) -> int:
    """Exit 0 when the notebooks agree with the specs (after writing), 1 when something differs (--check) or
    is left that sync cannot write; a spec that does not load raises `SpecError` (exit 2)."""
    from .report import printable
    names = args.chapters or loader.chapters()
    for chapter in names:  # a misspelt chapter fails before anything is written, with a "did you mean"
        if not (loader.SPECS_DIR / f"{chapter}.py").is_file():
            loader.load_chapter(chapter)
    left = 0
    for chapter in names:
        problems = sync_chapter(chapter, write=not args.check)
        fixed = [p for p in problems if p.fixable and not args.check]
        rest = [p for p in problems if p not in fixed]
        left += len(rest)
        if fixed:
            print(f"{chapter}: wrote {notebook_path(chapter).name}:")
            for p in fixed:
                print(printable(f"  fixed: {p.summary()}"))
        if rest:
            print(f"{chapter}: {len(rest)} difference(s){'' if args.check else ' sync cannot write'}:")
            for p in rest:
                print(printable(f"  - {p.summary()}{' [sync writes this]' if p.fixable else ''}"))
        if not problems:
            print(f"{chapter}: in step with its spec")
    return 1 if left else 0
