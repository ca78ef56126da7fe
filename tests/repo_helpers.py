"""Helpers shared by the tests: the repository's paths, its notebooks, tools and course package.

Import them from here (`from repo_helpers import REPO`); tests/conftest.py re-exports them too.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # the packages under test are imported from this checkout
    sys.path.insert(0, str(REPO))


@functools.lru_cache(maxsize=None)
def gpu_status() -> tuple[bool, str]:
    """(a GPU is usable, why not) without ever raising."""
    if not (REPO / "course").is_dir():
        return False, "no CUDA GPU: course/ is not written yet, so none can be detected"
    try:
        import course
    except Exception as exc:  # a broken course/ is reported by the tests that import it
        return False, f"no CUDA GPU: course failed to import ({type(exc).__name__}: {exc})"
    if course.gpu_available():
        return True, ""
    return False, "no CUDA GPU: course.gpu_available() is False on this machine"


def import_course():
    """The course package, or a skip while course/ does not exist yet; a broken one errors."""
    if not (REPO / "course").is_dir():
        pytest.skip("course/ is not written yet")
    import course
    return course


def fail_on(problems, header: str = "") -> None:
    """Fail with the problems as a plain list: each names its file or cell, no assert rewriting."""
    problems = [p for p in problems if p]
    if problems:
        pytest.fail("\n".join(([header] if header else []) + list(problems)), pytrace=False)


def load_tool(name: str):
    """A script from tools/ as a module (tools/ is not a package: its scripts run stand-alone)."""
    path = REPO / "tools" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tools_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and pickling look modules up by name
    spec.loader.exec_module(module)
    return module


def chapter_notebooks() -> list[Path]:
    return sorted((REPO / "chapters").glob("*.ipynb"))


def exercise_notebooks() -> list[Path]:
    return sorted(p for p in (REPO / "exercises" / "source").glob("*/*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts)


def all_notebooks() -> list[Path]:
    return chapter_notebooks() + exercise_notebooks()


def rel(path: Path) -> str:
    """A path as the repository names it: the id of a parametrized test."""
    return path.relative_to(REPO).as_posix()


def read_json_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def cuda_cells(stem: str) -> list:
    """The CUDA source of each `%%cuda` cell of chapters/<stem>.ipynb, without the magic line."""
    nb = read_json_notebook(REPO / "chapters" / f"{stem}.ipynb")
    out = []
    for cell in nb["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and src.startswith("%%cuda"):
            out.append(src.split("\n", 1)[1])
    return out


# Issue #22: the chapter's text quotes recorded figures; each is checked against benchmarks/results to half a
# unit of its last printed digit ("about 55 times" within 0.5, "55.0 GB/s" within 0.05), so text and data
# cannot drift apart again.
QUOTE_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"


def recorded_rows(chapter: str, gpu: str = "nvidia-h100-80gb-hbm3") -> tuple:
    """(rows of ``chapter`` by name, the ceilings) from one GPU's results file (default the H100's;
    ``gpu="nvidia-h200"`` for the chapters only an H200 has run)."""
    data = json.loads((REPO / "benchmarks" / "results" / f"{gpu}.json").read_text())
    return {r["name"]: r for r in data["rows"] if r["chapter"] == chapter}, data["ceilings"]


def recorded_sweep(name: str) -> dict:
    """A recorded sweep (benchmarks/results/sweeps/<name>.json): tuple of its parameter values -> value."""
    data = json.loads((REPO / "benchmarks" / "results" / "sweeps" / f"{name}.json").read_text())
    return {tuple(p["values"][k] for k in data["params"]): p["value"] for p in data["points"]}


def quote_close(quoted: str, value: float) -> bool:
    """Does the number as printed equal ``value`` to half a unit of its last digit?"""
    digits = quoted.replace(",", "")
    half = 0.5 * 10.0 ** -(len(digits.split(".")[1]) if "." in digits else 0)
    return abs(float(digits) - value) <= max(half, 1e-3 * abs(value))


def chapter_markdown(stem: str) -> list:
    """The chapter's markdown cells, whitespace collapsed."""
    return [re.sub(r"\s+", " ", "".join(c["source"]))
            for c in read_json_notebook(REPO / "chapters" / f"{stem}.ipynb")["cells"] if c["cell_type"] == "markdown"]


def check_quotes(stem: str, quotes: list, source: str = "benchmarks/results/nvidia-h100-80gb-hbm3.json") -> None:
    """``quotes``: (phrase of the chapter, the recorded figures its numbers quote, in order), from ``source``."""
    text = " ".join(chapter_markdown(stem))
    problems = []
    for phrase, values in quotes:
        if phrase not in text:
            problems.append(f"the chapter no longer says {phrase!r}: update the test's quotes with the new wording")
            continue
        nums = re.findall(QUOTE_NUMBER, phrase)
        if len(nums) != len(values) or not all(quote_close(q, v) for q, v in zip(nums, values)):
            problems.append(f"{phrase!r} quotes {nums}; the recordings hold {[round(v, 3) for v in values]}")
    fail_on(problems, f"chapters/{stem}.ipynb against {source}:")


def nvrtc_or_skip():
    """The course package when NVRTC can compile here; the test is skipped where NVRTC cannot be loaded."""
    import pytest
    course = pytest.importorskip("course")
    try:
        course.compile_for_arch('extern "C" __global__ void k() {}', "sm_80")
    except course.CompileError as exc:
        if "could not be loaded" in str(exc):
            pytest.skip("no NVRTC here")
        raise
    return course
