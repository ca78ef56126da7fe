"""Every exercise notebook matches their solution files and grader specs, and release well.

nbgrader's release replaces each `### BEGIN SOLUTION` .. `### END SOLUTION` region with the stub
`// YOUR CODE HERE`; what is left must still compile (and the grader then gives it zero).
"""
from __future__ import annotations

import json
import re

import pytest

from repo_helpers import REPO, fail_on, import_course

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
def test_notebook_agrees_with_its_spec(stem):
    """Does the notebook agree with its spec and solutions/: `%load_ext course` first; for each exercise a
    solution cell equal to its solutions/ file, a preview, one hidden test cell worth the spec's points, and
    the spec's points and thresholds in its section? (autograder.sync.notebook_problems, which
    `python -m autograder check-specs` runs too; `python -m autograder sync` writes what it can.)"""
    import_course()
    from autograder.sync import notebook_problems
    fail_on([str(p) for p in notebook_problems(stem)], f"exercises/source/{stem} disagrees with its spec:")


@pytest.mark.parametrize("stem", CHAPTERS)
def test_released_stub_compiles(stem):
    """Does each solution cell have a solution region, and does the released stub still compile?"""
    course = import_course()
    for name, cell in kernel_cells(stem).items():
        body = cell["source"].partition("\n")[2]
        assert "BEGIN SOLUTION" in body and "END SOLUTION" in body, \
            f"{name}: no BEGIN/END SOLUTION region, so nbgrader would replace the whole cell, %%cuda line included"
        if cell["source"].startswith("%%triton"):   # Python: the course's ClearSolutions leaves `pass`
            _triton_stub_compiles(stem, name, body)
            continue
        stub = release(body)
        assert STUB in stub and "BEGIN SOLUTION" not in stub
        # sm_80, or the newer arch the cell's first line asks for (`// requires: sm_90`: a cluster kernel)
        arch = max("sm_80", course.declared_arch(stub) or "sm_80", key=course.arch_cc)
        assert course.compile_for_arch(stub, arch).cubin, f"{name}: the released stub does not compile for {arch}"


def _triton_stub_compiles(stem, name, body):
    """A Triton cell's released stub is Python the grader accepts, and Triton compiles it as the grader would."""
    from autograder import get_exercise
    from autograder.launchcfg import merge_launch
    from autograder.triton_source import check_source, launch_from_python
    stub = "\n".join(re.match(r"\s*", ln).group(0) + "# YOUR CODE HERE\n" + re.match(r"\s*", ln).group(0) + "pass"
                     if "BEGIN SOLUTION" in ln else ln for ln in _outside_solution(body))
    assert check_source(stub) == "", check_source(stub)
    pytest.importorskip("triton")
    from autograder.triton_build import GENERIC, compile_program, int_scalars
    ex = get_exercise(stem, name)
    generic = "0" * len(int_scalars(ex)) or GENERIC
    prog = compile_program(stub, ex, merge_launch(ex, launch_from_python(stub)), "sm_80", [generic], "stub")
    assert prog["variants"][generic]["cubin"], f"{name}: the released stub does not compile"


def _outside_solution(body):
    inside = False
    for line in body.split("\n"):
        if "BEGIN SOLUTION" in line:
            inside = True
            yield line
        elif "END SOLUTION" in line:
            inside = False
        elif not inside:
            yield line


@pytest.mark.parametrize("stem", [s for s in CHAPTERS if (REPO / "solutions" / s).glob("*.py")])
def test_released_call_stub_reads_as_unfinished(stem):
    """Does each data cell (%%cublas, %%streams) have a region, and does the released stub read as 'not filled in'
    (zero points with a message) while the solution reads as a call the checker accepts?"""
    import_course()
    import autograder
    from autograder.launchcfg import LaunchDataError, parse_call_cell
    for ex in autograder.load_chapter(stem):
        if not isinstance(ex, autograder.CallExercise):
            continue
        body = kernel_cells(stem, "call")[ex.name]["source"].partition("\n")[2]
        assert "BEGIN SOLUTION" in body and "END SOLUTION" in body, f"{ex.name}: no solution region"
        assert ex.resolve("checker")(ex.name, parse_call_cell(body, ex.name, ex.parser)) == ""
        with pytest.raises(LaunchDataError, match="not filled in"):
            parse_call_cell(release(body), ex.name, ex.parser)
