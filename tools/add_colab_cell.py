#!/usr/bin/env python3
"""Make every chapter's first code cell the Colab set-up cell of course/colab.py (idempotent).

    python3 tools/add_colab_cell.py [--check] [NOTEBOOK ...]     (default: chapters/*.ipynb)

The first code cell is replaced when it is the plain set-up cell (`import course; course.preflight()`
and `%load_ext course`) or an older Colab cell; any other first code cell is reported, not touched,
since it would need merging by hand. --check changes nothing and exits 1 when a notebook differs.
Standard library only, like the other tools.
"""
from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import nbclean  # noqa: E402 - a sibling script: the notebooks are written exactly as nbclean writes them

MARKER = "# On Colab"
PLAIN_SETUP = {"import course; course.preflight()", "import course", "course.preflight()", "%load_ext course"}


def colab_cell_source() -> str:
    # By path: course/__init__ needs the installed course, this tool needs only the standard library.
    return runpy.run_path(str(REPO / "course" / "colab.py"))["cell_source"]()


def source(cell: dict) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def is_setup_cell(text: str) -> bool:
    lines = {ln.strip() for ln in text.splitlines() if ln.strip()}
    return text.lstrip().startswith(MARKER) or (bool(lines) and lines <= PLAIN_SETUP)


def with_colab_cell(nb: dict, cell_source: str) -> tuple[dict, str]:
    """The notebook with its first code cell set to ``cell_source``, and what happened:
    'ok' (already so), 'updated', or 'refused' (the first code cell is something else)."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if code and source(code[0]) == cell_source:
        return nb, "ok"
    if not code or not is_setup_cell(source(code[0])):
        return nb, "refused"
    code[0]["source"] = cell_source.splitlines(keepends=True)
    return nb, "updated"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"] or sorted((REPO / "chapters").glob("*.ipynb"))
    cell = colab_cell_source()
    bad = 0
    for path in paths:
        nb = json.loads(path.read_text(encoding="utf-8"))
        nb, what = with_colab_cell(nb, cell)
        if what == "refused":
            bad += 1
            print(f"{path}: the first code cell is not the set-up cell; put the Colab cell "
                  "(python -c 'import course.colab as c; print(c.cell_source())') first by hand")
        elif what == "updated":
            if check:
                bad += 1
                print(f"{path}: the first code cell is not the Colab cell (run tools/add_colab_cell.py)")
            else:
                path.write_text(nbclean.dumps(nb), encoding="utf-8")
                print(f"{path}: Colab cell written")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
