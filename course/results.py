"""What the benchmark suite recorded (benchmarks/results/<gpu>.json), for plots and tables without a GPU.

Every chapter shows a table measured live on a GPU, and the same rows as the suite recorded them where
there is none; these read them.
"""
from __future__ import annotations

import json
from pathlib import Path

from ._table import print_table
from .plots import vs_ceiling

__all__ = ["recorded_rows", "rows_of", "show_recorded", "plot_recorded"]


def _suite_records(folder):
    """(path, data) of every benchmark-suite record in ``folder``: the JSON files whose rows are the suite's
    (each with a name and a unit); the same folder keeps other records with rows of their own, such as the
    grading cost per chapter."""
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        rows = data.get("rows") if isinstance(data, dict) else None
        if isinstance(rows, list) and all(isinstance(r, dict) and "name" in r and "unit" in r for r in rows):
            yield path, data


def recorded_rows(chapter: str, contains: str = "") -> tuple:
    """(rows of ``chapter`` from the benchmark results, GPU name, ceilings dict) for CPU-only display.

    Reads the first benchmarks/results/*.json that has rows of this chapter whose name has ``contains``;
    ``([], None, {})`` if none does.
    """
    from ._ceilings import results_dir
    for f, data in _suite_records(results_dir()):
        rows = [r for r in data["rows"] if r.get("chapter") == chapter and contains in r["name"]]
        if rows:
            return rows, data.get("device", {}).get("name", f.stem), data.get("ceilings", {})
    return [], None, {}


def plot_recorded(chapter: str, contains: str = "", ax=None):
    """Bars of the recorded GB/s rows of ``chapter`` against the recorded copy ceiling (CPU-only view).

    Returns the axes, or None (with a sentence) when nothing is recorded yet.
    """
    rows, gpu, ceil = recorded_rows(chapter, contains)
    rows = [r for r in rows if r["unit"] == "GB/s"]
    if not rows or not ceil.get("copy_gbps"):
        print(f"No recorded GB/s results of {chapter} yet; `python -m benchmarks --only {chapter}` on a GPU "
              "records them.")
        return None
    ax = vs_ceiling({r["name"]: r["value"] for r in rows}, ceil["copy_gbps"], ax=ax,
                         title=f"{chapter}: recorded on {gpu} (benchmarks/results)")
    return ax


def show_recorded(chapter: str, contains: str = "") -> None:
    """Print the benchmark suite's recorded rows of ``chapter`` (those whose name has ``contains``)."""
    rows, gpu, _c = recorded_rows(chapter, contains)
    if not rows:
        what = f"rows of {chapter} named '{contains}'" if contains else f"results of {chapter}"
        print(f"No recorded {what} yet; `python -m benchmarks --only {chapter}` on a GPU records them.")
        return
    print(f"Recorded on {gpu} by the benchmark suite (benchmarks/results):")
    table = []
    for r in rows:
        ratio = "" if r.get("ratio") is None else f"{r['ratio']:.2f}"
        table.append({"row": r["name"], "value": f"{r['value']:.4g} {r['unit']}", "vs": r.get("anchor") or "",
                      "ratio": ratio, "note": r.get("note", "")})
    print_table(table)


def rows_of(chapters, results_dir=None) -> list:
    """Rows of ``chapters`` from every benchmarks/results/*.json (every GPU), each with its ``gpu`` name."""
    from ._ceilings import results_dir as default_dir
    out = []
    for path, data in _suite_records(results_dir or default_dir()):
        gpu = data.get("device", {}).get("name", path.stem)
        out += [dict(r, gpu=gpu) for r in data["rows"] if r.get("chapter") in chapters]
    return out
