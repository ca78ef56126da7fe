#!/usr/bin/env python3
"""Put the Colab set-up of course/colab.py into every chapter and exercise notebook (idempotent).

    python3 tools/add_colab_cell.py [--check] [NOTEBOOK ...]
    (default: chapters/*.ipynb and exercises/source/*/*.ipynb)

The first code cell becomes `course.colab.cell_source()`, with the address of `[tool.course] repo_url` in
pyproject.toml: the chapter's form (with the preflight) in a chapter, the exercise's form in an nbgrader
assignment (a notebook with nbgrader cells). An exercise's title cell, the first markdown cell after that
code cell, also gets the note on working in Colab (`course.colab.exercise_note()`), between its
`<!-- colab -->` markers, or under the title line the first time.

The first code cell is replaced when it is the plain set-up cell (`import course; course.preflight()`
and `%load_ext course`) or an older Colab cell; any other first code cell is reported, not touched,
since it would need merging by hand. Notebooks are written in their own JSON style. --check changes
nothing and exits 1 when a notebook differs. Standard library only, like the other tools.
"""
from __future__ import annotations

import json
import re
import runpy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import nbclean  # noqa: E402 - a sibling script: the fallback JSON layout is nbclean's

MARKER = "# On Colab"
PLAIN_SETUP = {"import course; course.preflight()", "import course", "course.preflight()", "%load_ext course"}


def colab_module() -> dict:
    # By path: course/__init__ needs the installed course, this tool needs only the standard library.
    return runpy.run_path(str(REPO / "course" / "colab.py"))


def colab_cell_source(kind: str = "chapter") -> str:
    return colab_module()["cell_source"](kind=kind)


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def is_setup_cell(text: str) -> bool:
    lines = {ln.strip() for ln in text.splitlines() if ln.strip()}
    return text.lstrip().startswith(MARKER) or (bool(lines) and lines <= PLAIN_SETUP)


def is_exercise(nb: dict) -> bool:
    """An nbgrader assignment (source or released): some cell carries nbgrader metadata."""
    return any(c.get("metadata", {}).get("nbgrader") for c in nb.get("cells", []))


def with_note(text: str, note: str, begin: str, end: str) -> str:
    """Markdown ``text`` with the block between ``begin`` and ``end`` replaced by ``note``, or, without
    one, ``note`` as the paragraph after its first line (the title)."""
    block = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if block.search(text):
        return block.sub(lambda _: note, text, count=1)
    title, _, rest = text.partition("\n")
    return f"{title}\n\n{note}\n\n{rest.lstrip(chr(10))}".rstrip("\n")


def set_source(cell: dict, text: str) -> None:
    """Keep the cell's own form of source: a list of lines or one string."""
    cell["source"] = text if isinstance(cell["source"], str) else text.splitlines(keepends=True)


def with_colab_cell(nb: dict, cell_source: str, note: tuple[str, str, str] | None = None) -> tuple[dict, str]:
    """The notebook with its first code cell set to ``cell_source`` and, given ``note`` as (text, begin
    marker, end marker), that note in the first markdown cell after it; and what happened: 'ok' (already
    so), 'updated', or 'refused' (the first code cell is something else, or no markdown cell follows)."""
    cells = nb["cells"]
    first = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"), None)
    if first is None or (source(cells[first]) != cell_source and not is_setup_cell(source(cells[first]))):
        return nb, "refused"
    changed = source(cells[first]) != cell_source
    set_source(cells[first], cell_source)
    if note is not None:
        title = next((c for c in cells[first + 1:] if c["cell_type"] == "markdown"), None)
        if title is None:
            return nb, "refused"
        text = with_note(source(title), *note)
        changed |= text != source(title)
        set_source(title, text)
    return nb, "updated" if changed else "ok"


def dumps_like(nb: dict, original: str) -> str:
    """``nb`` as JSON in the layout ``original`` was written in (indent, key order, escapes), else nbclean's."""
    m = re.match(r"\{\n( +)\"", original)
    indent = len(m.group(1)) if m else 1
    parsed = json.loads(original)
    for sort_keys in (True, False):
        for ensure_ascii in (False, True):
            if json.dumps(parsed, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n" == original:
                return json.dumps(nb, indent=indent, sort_keys=sort_keys, ensure_ascii=ensure_ascii) + "\n"
    return nbclean.dumps(nb)


def default_paths() -> list[Path]:
    return sorted((REPO / "chapters").glob("*.ipynb")) + sorted((REPO / "exercises" / "source").glob("*/*.ipynb"))


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"] or default_paths()
    colab = colab_module()
    note = (colab["exercise_note"](), colab["NOTE_BEGIN"], colab["NOTE_END"])
    bad = 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        nb = json.loads(text)
        exercise = is_exercise(nb)
        cell = colab["cell_source"](kind="exercise" if exercise else "chapter")
        nb, what = with_colab_cell(nb, cell, note if exercise else None)
        if what == "refused":
            bad += 1
            print(f"{path}: the first code cell is not the set-up cell, or no markdown cell follows it; put the "
                  f"Colab cell (python3 -c 'import runpy; print(runpy.run_path(\"course/colab.py\")"
                  f"[\"cell_source\"](kind=\"{'exercise' if exercise else 'chapter'}\"))') first by hand")
        elif what == "updated":
            if check:
                bad += 1
                print(f"{path}: the Colab set-up differs from course/colab.py and pyproject.toml's "
                      "[tool.course] repo_url (run python3 tools/add_colab_cell.py)")
            else:
                path.write_text(dumps_like(nb, text), encoding="utf-8")
                print(f"{path}: Colab set-up written")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
