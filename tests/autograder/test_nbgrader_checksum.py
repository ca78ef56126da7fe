"""Issue #23 item 12: nbgrader warned "Attribute 'checksum' for cell ... has changed!" for every kernel
exercise of every student, because it checks the released test cell (hidden tests cleared) against the
instructor's cell. The course's OverwriteCells is silent for a cell left as released and still reports one a
student edited; both are restored from the gradebook."""
import json
import logging
import os
import sys

import pytest

from ag_helpers import ROOT, make_notebook

nbgrader = pytest.importorskip("nbgrader")
CONFIG = ROOT / "exercises" / "nbgrader_config.py"
VISIBLE = "# The grader runs here."
TEST_CELL = VISIBLE + '''
### BEGIN HIDDEN TESTS
import autograder
autograder.nbgrader_points("01_first_kernel", "saxpy")
### END HIDDEN TESTS'''


def load_config():
    from traitlets.config.loader import PyFileConfigLoader
    return PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()


@pytest.fixture
def released(tmp_path, monkeypatch):
    """(course dir, released notebook) of a one-exercise assignment made by nbgrader's generate_assignment."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    course = tmp_path / "course"
    src = course / "source" / "ch"
    src.mkdir(parents=True)
    nb = make_notebook([("code", "%%cuda --name saxpy --no-run\n// BEGIN SOLUTION\n// END SOLUTION", []),
                        ("code", TEST_CELL, [])])
    nb["cells"][0]["metadata"]["nbgrader"] = {"solution": True, "grade": False, "locked": False,
                                              "grade_id": "saxpy_kernel", "schema_version": 3}
    nb["cells"][1]["metadata"]["nbgrader"] = {"solution": False, "grade": True, "locked": True, "points": 10,
                                              "grade_id": "saxpy_test", "schema_version": 3}
    (src / "ch.ipynb").write_text(json.dumps(nb))
    monkeypatch.chdir(course)
    # nbgrader runs `alembic` from PATH: this interpreter's
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    config = load_config()
    config.merge(Config({"CourseDirectory": {"root": str(course)}}))
    res = NbGraderAPI(config=config).generate_assignment("ch")
    assert res["success"], res["log"]
    return course, (course / "release" / "ch" / "ch.ipynb").read_text()


def overwrite(course, text, caplog):
    """The configured autograde OverwriteCells step on a submitted notebook: (test cell source, warnings)."""
    import nbformat
    from traitlets.utils.importstring import import_item
    config = load_config()
    name = next(p for p in config.Autograde.sanitize_preprocessors if p.endswith(".OverwriteCells"))
    pp = import_item(name)(config=config)
    assert pp.add_missing_cells  # the config's OverwriteCells options reach the course's subclass
    pp.log = logging.getLogger("overwrite-cells-test")
    resources = {"nbgrader": {"notebook": "ch", "assignment": "ch", "db_url": f"sqlite:///{course / 'gradebook.db'}"}}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="overwrite-cells-test"):
        nb, _ = pp.preprocess(nbformat.reads(text, as_version=4), resources)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "saxpy_test")
    return cell.source, [r.getMessage() for r in caplog.records]


def test_a_test_cell_left_as_released_is_restored_without_a_warning(released, caplog):
    course, text = released
    assert VISIBLE in text and "HIDDEN TESTS" not in text
    source, warnings = overwrite(course, text, caplog)
    assert source == TEST_CELL  # the hidden tests are back for grading
    assert not [w for w in warnings if "checksum" in w], warnings


def test_a_test_cell_the_student_edited_is_still_reported(released, caplog):
    course, text = released
    nb = json.loads(text)
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "saxpy_test")
    cell["source"] = "print(10.0)"
    source, warnings = overwrite(course, json.dumps(nb), caplog)
    assert source == TEST_CELL
    assert any("checksum" in w and "saxpy_test" in w for w in warnings), warnings
