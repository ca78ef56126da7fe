"""Exercise notebooks as students get them: nbgrader's generate_assignment, with the course's configuration, on a
copy of exercises/source. The Colab set-up cell and note reach the student unchanged and outside nbgrader's
checksums and locks, autograde's cell checks pass them without a word, and the starter text of every kernel
cell reads right once the solution is stripped (issue #16 items 1 and 9)."""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys

import pytest

from repo_helpers import REPO, exercise_notebooks, fail_on, read_json_notebook

nbgrader = pytest.importorskip("nbgrader")

CONFIG = REPO / "exercises" / "nbgrader_config.py"
STEMS = [p.parent.name for p in exercise_notebooks()]
# A starter that calls itself the solution or the grader's reference: true of the instructor's file, wrong in
# the student's copy, where the body is `// YOUR CODE HERE`. Paths such as solutions/07_.../x.cu do not match.
SELF_DESCRIBED = re.compile(r"\b(?:exercise's|the|this|our)\s+(?:reference\s+)?solution\b(?![/.\w])"
                            r"|\bgrader's\s+reference\b|\breference\s+(?:kernel|solution|implementation)\b",
                            re.IGNORECASE)


def course_config(root):
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader
    config = PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()
    config.merge(Config({"CourseDirectory": {"root": str(root)}}))
    return config


def generate_release(root, stems) -> dict:
    """{stem: released notebook (JSON)}: generate_assignment of each exercise, copied into a course directory
    at ``root``. nbgrader runs `alembic` from PATH (this interpreter's) and resolves some paths from the
    working directory, so both are set while it runs."""
    from nbgrader.apps import NbGraderAPI
    for stem in stems:
        shutil.copytree(REPO / "exercises" / "source" / stem, root / "source" / stem)
    released = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
        api = NbGraderAPI(config=course_config(root))
        for stem in stems:
            res = api.generate_assignment(stem)
            assert res["success"], f"generate_assignment {stem} failed:\n{res['log'][-3000:]}"
            released[stem] = json.loads((root / "release" / stem / f"{stem}.ipynb").read_text(encoding="utf-8"))
    return released


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    return root, generate_release(root, STEMS)


def text(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


@pytest.mark.parametrize("stem", STEMS)
def test_setup_cell_and_note_reach_the_student_unchanged(release, stem):
    """Is the released first cell the source's set-up cell, byte for byte, with no nbgrader metadata and no
    lock (so no checksum covers it and a student on Colab may run or edit it), is the Colab note still in
    the title cell, and does the gradebook record no cell holding the set-up code?"""
    from nbgrader.api import Gradebook
    root, released = release
    source = read_json_notebook(REPO / "exercises" / "source" / stem / f"{stem}.ipynb")["cells"]
    cells = released[stem]["cells"]
    assert text(cells[0]) == text(source[0]) and text(cells[0]).startswith("# On Colab")
    assert cells[0]["metadata"] == {}, f"nbgrader marked the set-up cell: {cells[0]['metadata']}"
    assert text(cells[1]) == text(source[1]) and "<!-- colab -->" in text(cells[1])
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        recorded = gb.find_notebook(stem, stem).source_cells
        assert recorded, "the gradebook holds none of the assignment's cells: nothing was checked"
        assert not [c.name for c in recorded if "COLAB_RELEASE_TAG" in (c.source or "")]


@pytest.mark.parametrize("stem", STEMS)
def test_autograde_cell_checks_pass_the_setup_cell(release, stem, caplog):
    """A student's submission, the release with the set-up cell run on Colab (its output saved): do
    autograde's OverwriteCells (the course's) and CheckCellMetadata pass it without a warning, and leave
    the set-up cell as the student had it?"""
    import nbformat
    from nbgrader.preprocessors import CheckCellMetadata
    from traitlets.utils.importstring import import_item
    root, released = release
    nb = nbformat.reads(json.dumps(released[stem]), as_version=4)  # joins each source, as nbgrader reads it
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="course: installing ...\n")]
    config = course_config(root)
    name = next(p for p in config.Autograde.sanitize_preprocessors if p.endswith(".OverwriteCells"))
    resources = {"nbgrader": {"notebook": stem, "assignment": stem, "db_url": f"sqlite:///{root / 'gradebook.db'}"}}
    logger = logging.getLogger("release-test")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="release-test"):
        for pp in (import_item(name)(config=config), CheckCellMetadata(config=config)):
            pp.log = logger
            nb, resources = pp.preprocess(nb, resources)
    assert [r.getMessage() for r in caplog.records] == []
    assert nb.cells[0].source == text(released[stem]["cells"][0]) and nb.cells[0].outputs


def starter_problems(stem: str, released_nb: dict) -> list:
    """Each released solution cell whose visible text calls itself the solution or the grader's reference."""
    problems = []
    for cell in released_nb["cells"]:
        if not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            continue
        for n, line in enumerate(text(cell).splitlines(), 1):
            m = SELF_DESCRIBED.search(line)
            if m:
                problems.append(f"exercises/source/{stem} cell {cell['metadata']['nbgrader']['grade_id']}, line {n}: "
                                f"the student's copy says {m.group(0)!r} ({line.strip()!r}), but there the body is "
                                "the student's to write. Reword the comment in its solutions/ file, then run "
                                "python -m autograder sync")
    return problems


@pytest.mark.parametrize("stem", STEMS)
def test_released_starters_read_as_starters(release, stem):
    """Does no starter the student gets describe itself as the exercise's solution or the grader's reference?"""
    fail_on(starter_problems(stem, release[1][stem]))


def test_starter_check_catches_the_old_saxpy_comment():
    """Is the wording issue #16 found in chapter 01's starter caught, and are ordinary comments passed?"""
    def nb(line):
        return {"cells": [{"cell_type": "code", "source": f"%%cuda --name k --no-run\n{line}\n// YOUR CODE HERE",
                           "metadata": {"nbgrader": {"solution": True, "grade_id": "k_solution"}}}]}
    old = "// saxpy: y = a * x + y over n floats (the grader's reference, and the exercise's solution)."
    assert len(starter_problems("01_first_kernel", nb(old))) == 1
    for line in ("// This is the reference solution.", "// the reference kernel, tuned"):
        assert starter_problems("x", nb(line)), line
    for line in ("// It is chapter 07's SGEMM (solutions/07_staged_gemm/sgemm_regtile.cu) with a new epilogue.",
                 "// The taps sit in the __constant__ array w, which the host (the grader) fills.",
                 "// saxpy: y = a * x + y over n floats, in place."):
        assert starter_problems("x", nb(line)) == [], line


def test_triton_starters_stay_python(release):
    """Does a released Triton cell keep running as Python (the course's ClearSolutions puts `# YOUR CODE HERE` and
    `pass` where a %%cuda cell gets `// YOUR CODE HERE`), and is that stub a source the grader accepts, so that
    the untouched stub compiles, runs, writes nothing and scores zero instead of stopping the notebook?"""
    from autograder.triton_source import check_source
    cells = [c for c in release[1]["15_triton"]["cells"] if text(c).startswith("%%triton")]
    assert len(cells) == 2
    for c in cells:
        body = text(c).split("\n", 1)[1]
        assert "# YOUR CODE HERE" in body and "pass" in body and "//" not in body, body
        compile(body, "starter", "exec")
        assert check_source(body) == "", check_source(body)
    cuda = [c for c in release[1]["14_flash_attention"]["cells"] if text(c).startswith("%%cuda")]
    assert cuda and all("// YOUR CODE HERE" in text(c) for c in cuda)
