"""Notebooks are valid, committed clean, carry their nbgrader metadata, and run top to bottom."""
from __future__ import annotations

import os
import re

import pytest

from repo_helpers import (REPO, all_notebooks, chapter_notebooks, exercise_notebooks, fail_on,
                          load_tool, read_json_notebook, rel)

nbformat = pytest.importorskip("nbformat")

CELL_TIMEOUT_S = 120
PREFLIGHT = re.compile(r"\bcourse\.preflight\(\s*\)|^\s*preflight\(\s*\)", re.MULTILINE)
GRADE_ID = re.compile(r"^[A-Za-z0-9_\-]+$")  # what nbgrader accepts as a cell's grade_id


def source(cell) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def code_cells(nb) -> list[tuple[int, dict]]:
    return [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]


# ---- the checks, as functions of a notebook, so they can be shown to fail ----

def preflight_problems(nb) -> list[str]:
    cells = code_cells(nb)
    if not cells:
        return ["the chapter has no code cell"]
    index, first = cells[0]
    if PREFLIGHT.search(source(first)):
        return []
    return [f"the first code cell (cell {index}) should call course.preflight():\n{source(first)}"]


def nbgrader_problems(nb) -> list[str]:
    graded = [(i, c["metadata"]["nbgrader"]) for i, c in enumerate(nb["cells"])
              if c.get("metadata", {}).get("nbgrader")]
    ids = [meta.get("grade_id") for _, meta in graded]
    duplicates = sorted({g for g in ids if g is not None and ids.count(g) > 1})
    problems = [f"duplicate grade_id: {duplicates}"] if duplicates else []
    for i, meta in graded:
        if not GRADE_ID.match(str(meta.get("grade_id", ""))):
            problems.append(f"cell {i}: grade_id {meta.get('grade_id')!r} is missing or invalid")
        points = meta.get("points")
        if meta.get("grade") and not (isinstance(points, (int, float)) and points > 0):
            problems.append(f"cell {i}: grade cell {meta.get('grade_id')!r} has points "
                            f"{points!r}, expected > 0")
        if "schema_version" not in meta:
            problems.append(f"cell {i}: no nbgrader schema_version")
    if not any(meta.get("grade") for _, meta in graded):
        problems.append("no grade cell: the assignment would be worth nothing")
    return problems


def kernel_tag_problems(nb) -> list[str]:
    problems = []
    for i, cell in enumerate(nb["cells"]):
        for tag in cell.get("metadata", {}).get("tags", []):
            if not tag.startswith("kernel:"):
                continue
            name = re.escape(tag.split(":", 1)[1])
            first = source(cell).split("\n", 1)[0]
            if first.startswith("%%triton") and re.search(rf"--name[= ]{name}(\s|$)", first):
                continue  # a Triton exercise's cell (Python, run by the magic; the grader reads it as text)
            if not (first.startswith("%%cuda") and re.search(rf"--name[= ]{name}(\s|$)", first)
                    and "--no-run" in first):
                problems.append(f"cell {i} tagged {tag}: its first line should be "
                                f"`%%cuda --name {tag.split(':', 1)[1]} --no-run`, not {first!r}")
    return problems


def output_text(out) -> str:
    if out["output_type"] == "stream":
        text = out.get("text", "")
    else:
        text = "".join(str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
    return "".join(text) if isinstance(text, list) else text


def execution_problems(nb) -> list[str]:
    """Errors and printed tracebacks in an executed notebook, one entry per output."""
    problems = []
    for i, cell in code_cells(nb):
        for out in cell.get("outputs", []):
            if out["output_type"] == "error":
                tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.get("traceback", [])[-3:]))
                problems.append(f"cell {i}: {out['ename']}: {out['evalue']}\n{tb}")
            elif "Traceback" in output_text(out):
                problems.append(f"cell {i}: a traceback in its output:\n{output_text(out)[-800:]}")
    return problems


# ---- applied to the course ----

@pytest.mark.parametrize("path", all_notebooks(), ids=rel)
def test_valid_nbformat_v4(path):
    """Is the notebook valid nbformat version 4, as nbformat's own validator sees it?"""
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    assert nb.nbformat == 4, f"nbformat {nb.nbformat}, expected 4"
    nbformat.validate(nb)


@pytest.mark.parametrize("path", all_notebooks(), ids=rel)
def test_committed_clean(path):
    """Is the notebook free of outputs, execution counts and volatile metadata?"""
    reasons = load_tool("nbclean").dirt(read_json_notebook(path))
    fail_on([reasons and f"{rel(path)} has {', '.join(reasons)}: run python3 tools/nbclean.py"])


@pytest.mark.parametrize("path", chapter_notebooks(), ids=rel)
def test_chapter_starts_with_preflight(path):
    """Does the chapter's first code cell call course.preflight()?"""
    fail_on(preflight_problems(read_json_notebook(path)), f"{rel(path)}:")


@pytest.mark.parametrize("path", exercise_notebooks(), ids=rel)
def test_exercise_nbgrader_metadata(path):
    """Do the graded cells keep unique grade_ids, positive points and a schema version?"""
    fail_on(nbgrader_problems(read_json_notebook(path)), f"{rel(path)}:")


@pytest.mark.parametrize("path", exercise_notebooks(), ids=rel)
def test_kernel_cells_are_named_cuda_cells(path):
    """Is each cell tagged kernel:NAME a `%%cuda --name NAME --no-run` cell (a Triton exercise's: `%%triton --name
    NAME`), as the grader expects?"""
    fail_on(kernel_tag_problems(read_json_notebook(path)), f"{rel(path)}:")


@pytest.mark.both_tiers
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("path", chapter_notebooks(), ids=rel)
def test_chapter_executes(path):
    """Does the chapter run top to bottom with no error and no traceback in any output?

    Without a GPU this is the CPU story: each GPU cell must say so in a sentence, not fail. With a
    GPU (selected by -m gpu too) the same run produces real results. Cells tagged skip-execution
    are not run.
    """
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S, allow_errors=True,
                            resources={"metadata": {"path": str(REPO / "chapters")}}).execute()
    keep = os.environ.get("COURSE_EXECUTED_DIR")
    if keep:  # the executed copy, outputs and plots included, for a person to read
        os.makedirs(keep, exist_ok=True)
        nbformat.write(nb, os.path.join(keep, path.name))
    fail_on(execution_problems(nb), f"{rel(path)}:")


@pytest.mark.both_tiers
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("path", exercise_notebooks(), ids=rel)
def test_exercise_executes(path):
    """Does the exercise notebook, solutions in place, run top to bottom with no error and no traceback?

    Its preview and hidden-test cells grade each exercise in separate processes: without a GPU they say
    so in a sentence; with one, the solutions are graded for real.
    """
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S * 3, allow_errors=True,
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    keep = os.environ.get("COURSE_EXECUTED_DIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        nbformat.write(nb, os.path.join(keep, "exercise_" + path.name))
    fail_on(execution_problems(nb), f"{rel(path)}:")


# ---- the checks fail when they should ----

def sample(*cells) -> dict:
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def graded(grade_id, points=1, grade=True, schema=True):
    meta = {"grade": grade, "solution": not grade, "locked": grade, "grade_id": grade_id,
            "points": points}
    if schema:
        meta["schema_version"] = 3
    return nbformat.v4.new_code_cell("pass", metadata={"nbgrader": meta})


def test_preflight_check():
    """Is a chapter whose first code cell skips preflight caught, and the usual spellings accepted?"""
    code = nbformat.v4.new_code_cell
    assert preflight_problems(sample(code("import course\ncourse.preflight()"))) == []
    assert preflight_problems(sample(code("from course import preflight\npreflight()"))) == []
    assert preflight_problems(sample(code("import numpy"), code("course.preflight()")))
    assert preflight_problems(sample(nbformat.v4.new_markdown_cell("# only words")))


def test_nbgrader_check():
    """Are a duplicate grade_id, zero points, a missing schema and an ungraded notebook caught?"""
    assert nbgrader_problems(sample(graded("a"), graded("b", grade=False))) == []
    problems = nbgrader_problems(sample(graded("a"), graded("a", points=0), graded("b bad"),
                                        graded("c", schema=False)))
    assert problems[0] == "duplicate grade_id: ['a']"
    assert any("has points 0" in p for p in problems)
    assert any("'b bad' is missing or invalid" in p for p in problems)
    assert any("no nbgrader schema_version" in p for p in problems)
    assert nbgrader_problems(sample(graded("x", grade=False))) == [
        "no grade cell: the assignment would be worth nothing"]


def test_kernel_tag_check():
    """Is a kernel:NAME cell caught when it is not `%%cuda --name NAME --no-run`?"""
    def tagged(src):
        return nbformat.v4.new_code_cell(src, metadata={"tags": ["kernel:saxpy"]})
    assert kernel_tag_problems(sample(tagged("%%cuda --name saxpy --no-run\n..."))) == []
    assert kernel_tag_problems(sample(tagged("%%cuda --no-run --name=saxpy\n..."))) == []
    assert kernel_tag_problems(sample(tagged("%%cuda --name saxpy2 --no-run\n...")))
    assert kernel_tag_problems(sample(tagged("%%cuda --name saxpy\n...")))
    assert kernel_tag_problems(sample(tagged("x = 1")))


def test_execution_check():
    """Are an error output and a traceback printed to stderr both caught, and plain output not?"""
    cell = nbformat.v4.new_code_cell
    out = nbformat.v4.new_output
    ok = cell("print(1)", outputs=[out("stream", name="stdout", text="1\n")])
    error = cell("1/0", outputs=[out("error", ename="ZeroDivisionError", evalue="division by zero",
                                     traceback=["\x1b[31mZeroDivisionError\x1b[0m"])])
    printed = cell("log", outputs=[out("stream", name="stderr",
                                       text="Traceback (most recent call last):\n  ...\n")])
    assert execution_problems(sample(ok)) == []
    problems = execution_problems(sample(ok, error, printed))
    assert problems[0] == "cell 1: ZeroDivisionError: division by zero\nZeroDivisionError"
    assert problems[1].startswith("cell 2: a traceback in its output")
