#!/usr/bin/env python3
"""Strip outputs, execution counts and volatile metadata from notebooks, keeping what matters.

    python3 tools/nbclean.py [--check] [PATH ...]    (default: chapters exercises/source)

Kept: cell sources, ids and attachments; the `nbgrader` cell metadata (the grader needs it), tags,
`jupyter.source_hidden` (answers hidden in collapsed cells), editable/deletable; the kernelspec,
the language name and Colab's GPU request. Everything else in the metadata is dropped: it records one
person's session (timings, scroll state, widget state, Python patch version) and churns in diffs.

--check changes nothing and exits 1 listing the notebooks that would change.
Standard library only, so it runs as a pre-commit hook without the course environment.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("chapters", "exercises/source")
CELL_KEYS = ("nbgrader", "tags", "editable", "deletable")
JUPYTER_KEYS = ("source_hidden",)
NOTEBOOK_KEYS = ("kernelspec", "nbgrader", "accelerator")
COLAB_KEYS = ("gpuType",)


def _keep(mapping: dict, keys) -> dict:
    return {k: mapping[k] for k in keys if k in mapping}


def clean_cell(cell: dict) -> dict:
    cell = dict(cell)
    meta = cell.get("metadata", {})
    kept = _keep(meta, CELL_KEYS)
    jupyter = _keep(meta.get("jupyter", {}), JUPYTER_KEYS)
    if jupyter:
        kept["jupyter"] = jupyter
    cell["metadata"] = kept
    if cell.get("cell_type") == "code":
        cell["outputs"] = []
        cell["execution_count"] = None
    return cell


def clean_notebook(nb: dict) -> dict:
    """A cleaned copy of a notebook given as parsed JSON."""
    nb = dict(nb)
    meta = nb.get("metadata", {})
    kept = _keep(meta, NOTEBOOK_KEYS)
    if "language_info" in meta:
        kept["language_info"] = _keep(meta["language_info"], ("name",))
    colab = _keep(meta.get("colab", {}), COLAB_KEYS)
    if colab:
        kept["colab"] = colab
    nb["metadata"] = kept
    nb["cells"] = [clean_cell(c) for c in nb.get("cells", [])]
    return nb


def dirt(nb: dict) -> list[str]:
    """What cleaning would remove, one short reason per kind; empty when the notebook is clean."""
    reasons = []
    code = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    if any(c.get("outputs") for c in code):
        reasons.append("outputs")
    if any(c.get("execution_count") is not None for c in code):
        reasons.append("execution counts")
    if any(c.get("metadata", {}) != clean_cell(c)["metadata"] for c in nb.get("cells", [])):
        reasons.append("cell metadata")
    if nb.get("metadata", {}) != clean_notebook(nb)["metadata"]:
        reasons.append("notebook metadata")
    return reasons


def dumps(nb: dict) -> str:
    # nbformat's own layout, so cleaning a notebook saved by Jupyter changes only what it strips.
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def notebooks(paths) -> list[Path]:
    found = []
    for p in map(Path, paths):
        if p.is_dir():
            found += [q for q in sorted(p.rglob("*.ipynb")) if ".ipynb_checkpoints" not in q.parts]
        elif p.suffix == ".ipynb":
            found.append(p)
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nbclean.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list dirty notebooks")
    parser.add_argument("paths", nargs="*")
    args = parser.parse_args(argv)
    paths = args.paths or [REPO / p for p in DEFAULT_PATHS]
    dirty = 0
    for path in notebooks(paths):
        nb = json.loads(path.read_text(encoding="utf-8"))
        reasons = dirt(nb)
        if not reasons:
            continue
        dirty += 1
        if args.check:
            print(f"{path}: {', '.join(reasons)}")
        else:
            path.write_text(dumps(clean_notebook(nb)), encoding="utf-8")
            print(f"cleaned {path} ({', '.join(reasons)})")
    if args.check and dirty:
        print(f"{dirty} notebook(s) need `python3 tools/nbclean.py`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
