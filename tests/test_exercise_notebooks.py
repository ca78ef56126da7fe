"""Every exercise notebook matches their solution files and grader specs, and release well.

nbgrader's release replaces each `### BEGIN SOLUTION` .. `### END SOLUTION` region with the stub
`// YOUR CODE HERE`; what is left must still compile (and the grader then gives it zero).
"""
from __future__ import annotations

import json
import re

import pytest

from repo_helpers import REPO, import_course

CHAPTERS = sorted(p.name for p in (REPO / "exercises" / "source").iterdir() if p.is_dir())
STUB = "// YOUR CODE HERE"


def cells(stem: str) -> list:
    nb = json.loads((REPO / "exercises" / "source" / stem / f"{stem}.ipynb").read_text(encoding="utf-8"))
    for c in nb["cells"]:
        if isinstance(c["source"], list):
            c["source"] = "".join(c["source"])
    return nb["cells"]


def kernel_cells(stem: str, kind: str = "kernel") -> dict:
    """Cells tagged ``kernel:NAME`` (``kind="call"``: ``call:NAME``, the `%%cublas` cells) by NAME."""
    out = {}
    for c in cells(stem):
        for tag in c.get("metadata", {}).get("tags", []):
            if tag.startswith(kind + ":"):
                out[tag.split(":", 1)[1]] = c
    return out


def _solution_cells(stem: str) -> dict:
    return {**kernel_cells(stem), **kernel_cells(stem, "call")}


def release(source: str) -> str:
    """What nbgrader's ClearSolutions leaves of a solution cell (stub indented like the BEGIN line)."""
    out, inside = [], False
    for line in source.split("\n"):
        if "BEGIN SOLUTION" in line:
            inside = True
            out.append(re.match(r"\s*", line).group(0) + STUB)
        elif "END SOLUTION" in line:
            inside = False
        elif not inside:
            out.append(line)
    assert not inside, "a BEGIN SOLUTION without its END SOLUTION"
    return "\n".join(out)


@pytest.mark.parametrize("stem", CHAPTERS)
def test_first_cell_loads_the_magics(stem):
    """Is the first cell `%load_ext course`, so the kernel cells work when run in order?"""
    assert cells(stem)[0]["source"].strip() == "%load_ext course"


@pytest.mark.parametrize("stem", CHAPTERS)
def test_every_exercise_has_kernel_preview_and_test_cells(stem):
    """Does each exercise of the spec have its kernel cell, a preview and a hidden test worth the spec's points?"""
    import_course()
    import autograder
    kernels = _solution_cells(stem)
    texts = [c["source"] for c in cells(stem)]
    for ex in autograder.load_chapter(stem):
        kind = "call" if isinstance(ex, autograder.CallExercise) else "kernel"
        assert ex.name in kernel_cells(stem, kind), f"no cell tagged {kind}:{ex.name}"
        meta = kernels[ex.name]["metadata"]["nbgrader"]
        assert meta == {"solution": True, "grade": False, "grade_id": f"{ex.name}_solution", "locked": False,
                        "schema_version": 3}
        assert any(f'autograder.preview("{stem}", "{ex.name}")' in t for t in texts), "no preview cell"
        tests = [c for c in cells(stem) if c["metadata"].get("nbgrader", {}).get("grade_id") == f"{ex.name}_test"]
        assert len(tests) == 1, f"expected one hidden test cell for {ex.name}"
        t = tests[0]
        assert t["metadata"]["nbgrader"]["points"] == ex.max_points
        assert t["metadata"]["nbgrader"]["grade"] and t["metadata"]["nbgrader"]["locked"]
        lines = [ln for ln in t["source"].strip().split("\n") if ln.strip() and not ln.strip().startswith("#")]
        assert lines[-1] == f'autograder.nbgrader_points("{stem}", "{ex.name}")', \
            "the points must be the cell's last expression"
        hidden = t["source"]
        assert hidden.index("### BEGIN HIDDEN TESTS") < hidden.index("nbgrader_points") < \
            hidden.index("### END HIDDEN TESTS")


@pytest.mark.parametrize("stem", CHAPTERS)
def test_solution_cells_equal_solution_files(stem):
    """Is each kernel cell, minus its %%cuda line, the text of solutions/<chapter>/<source_file> (each
    %%cublas cell, minus its magic line, that of <solution_file>)?"""
    import_course()
    import autograder
    kernels = _solution_cells(stem)
    for ex in autograder.load_chapter(stem):
        first, _, body = kernels[ex.name]["source"].partition("\n")
        if isinstance(ex, autograder.CallExercise):
            assert first == f"%%cublas --name {ex.name}"
            name = ex.solution_file
        else:
            assert first == f"%%cuda --name {ex.name} --no-run"
            name = ex.source_file
        want = (REPO / "solutions" / stem / name).read_text(encoding="utf-8")
        assert body == want.rstrip("\n"), f"the {ex.name} cell differs from solutions/{stem}/{name}"


@pytest.mark.parametrize("stem", CHAPTERS)
def test_released_stub_compiles(stem):
    """Does each solution cell have a solution region, and does the released stub still compile?"""
    course = import_course()
    for name, cell in kernel_cells(stem).items():
        body = cell["source"].partition("\n")[2]
        assert "BEGIN SOLUTION" in body and "END SOLUTION" in body, \
            f"{name}: no BEGIN/END SOLUTION region, so nbgrader would replace the whole cell, %%cuda line included"
        stub = release(body)
        assert STUB in stub and "BEGIN SOLUTION" not in stub
        assert course.compile_for_arch(stub, "sm_80").cubin, f"{name}: the released stub does not compile"


@pytest.mark.parametrize("stem", [s for s in CHAPTERS if (REPO / "solutions" / s).glob("*.py")])
def test_released_call_stub_reads_as_unfinished(stem):
    """Does each %%cublas solution cell have a region, and does the released stub read as 'not filled in'
    (zero points with a message) while the solution reads as a call the checker accepts?"""
    import_course()
    import autograder
    from autograder.launchcfg import LaunchDataError, parse_call_cell
    for ex in autograder.load_chapter(stem):
        if not isinstance(ex, autograder.CallExercise):
            continue
        body = kernel_cells(stem, "call")[ex.name]["source"].partition("\n")[2]
        assert "BEGIN SOLUTION" in body and "END SOLUTION" in body, f"{ex.name}: no solution region"
        assert ex.resolve("checker")(ex.name, parse_call_cell(body, ex.name)) == ""
        with pytest.raises(LaunchDataError, match="not filled in"):
            parse_call_cell(release(body), ex.name)
