"""Can a student's Python change the kernel points nbgrader records? End to end through `nbgrader
autograde` with the course's configuration, on chapter 01's real exercise notebook.

On a CPU the grading children use the fake harness (tests/autograder/fake_harness.py), which passes any
kernel but the untouched stub: so the honest submission earns full points here, and every tampering
variant (released stubs plus Python that tries to take the points) must earn zero. On a GPU the same
test runs with the real harness (`test_tampering_gets_what_the_kernels_deserve_on_a_gpu`).
"""
import json
import os
import shutil
import sys

import pytest

from ag_helpers import ROOT, gpu_present

CH = "01_first_kernel"
SOURCE = ROOT / "exercises" / "source" / CH / f"{CH}.ipynb"
CONFIG = ROOT / "exercises" / "nbgrader_config.py"

# Each attack was shown to give untouched stubs 20/20 when the points came from the notebook's process.
ATTACKS = {
    "replace_function": "import autograder\nautograder.nbgrader_points = lambda *a, **k: 10.0",
    "fake_module": ("import sys, types\nm = types.ModuleType('autograder')\nm.nbgrader_points = lambda *a, **k: 10.0\n"
                    "m.preview = lambda *a, **k: None\nsys.modules['autograder'] = m"),
    "no_display": "get_ipython().ast_node_interactivity = 'none'",
    "formatter": ("get_ipython().display_formatter.formatters['text/plain'].for_type(float, "
                  "lambda x, p, cycle: p.text('10.0'))"),
    "negative": "import autograder\nautograder.nbgrader_points = lambda *a, **k: -1e9",
    "plant": ("import pathlib, os\n"
              "for target in [os.environ['PLANT_REPO'], os.environ['PLANT_COURSE']]:\n"
              "    try:\n"
              "        pathlib.Path(target).write_text('planted')\n"
              "    except OSError as exc:\n"
              "        print('refused:', exc)"),
}


def _cells_with(nb, pred):
    return [i for i, c in enumerate(nb["cells"]) if pred(c)]


def _grade_id(c):
    return (c.get("metadata", {}).get("nbgrader") or {}).get("grade_id", "")


def _variants(released, solution_nb):
    """name -> submitted notebook (dict)."""
    out = {}
    honest = json.loads(json.dumps(released))
    for i in _cells_with(honest, lambda c: _grade_id(c).endswith("_solution")):
        gid = _grade_id(honest["cells"][i])
        src = next(c for c in solution_nb["cells"] if _grade_id(c) == gid)["source"]
        honest["cells"][i]["source"] = src
    out["honest"] = honest
    out["stub"] = json.loads(json.dumps(released))
    for name, code in ATTACKS.items():
        nb = json.loads(json.dumps(released))
        cell = {"cell_type": "code", "execution_count": None, "id": f"attack-{name}", "metadata": {},
                "outputs": [], "source": code}
        nb["cells"].insert(3, cell)
        out[name] = nb
    # the student's own preview cell turned into the attack
    nb = json.loads(json.dumps(released))
    i = _cells_with(nb, lambda c: "autograder.preview" in "".join(c["source"]))[0]
    nb["cells"][i]["source"] = ATTACKS["replace_function"]
    out["preview_cell"] = nb
    # the kernel cell itself turned into that Python
    nb = json.loads(json.dumps(released))
    for i in _cells_with(nb, lambda c: _grade_id(c).endswith("_solution")):
        nb["cells"][i]["source"] = ATTACKS["replace_function"]
    out["kernel_cell_python"] = nb
    # an honest notebook with a duplicated test cell: costs that student nothing, aborts no batch
    nb = json.loads(json.dumps(honest))
    i = _cells_with(nb, lambda c: _grade_id(c) == "saxpy_test")[0]
    dup = json.loads(json.dumps(nb["cells"][i]))
    dup["id"] = "duplicate-test"
    nb["cells"].insert(i + 1, dup)
    out["duplicated_test"] = nb
    # an honest notebook whose test cell was deleted: nbgrader adds it back and it is graded
    nb = json.loads(json.dumps(honest))
    del nb["cells"][_cells_with(nb, lambda c: _grade_id(c) == "rgb_to_gray_test")[0]]
    out["deleted_test"] = nb
    return out


def _autograde_all(tmp_path, monkeypatch):
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    from autograder import nbgrader_plugin, sandbox

    course_dir = tmp_path / "course"
    (course_dir / "source" / CH).mkdir(parents=True)
    shutil.copy(SOURCE, course_dir / "source" / CH / SOURCE.name)
    shutil.copy(CONFIG, course_dir / "nbgrader_config.py")
    monkeypatch.chdir(course_dir)
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    plant_repo = ROOT / "autograder" / "specs" / "_planted_by_a_student.py"
    plant_course = course_dir / "submitted" / "honest" / CH / "planted.txt"
    monkeypatch.setenv("PLANT_REPO", str(plant_repo))
    monkeypatch.setenv("PLANT_COURSE", str(plant_course))
    if not sandbox.landlock_abi():
        monkeypatch.setenv("COURSE_ALLOW_UNCONFINED", "1")
    monkeypatch.setattr(nbgrader_plugin, "_SESSION", None)
    config = PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()
    config.merge(Config({"CourseDirectory": {"root": str(course_dir)}}))
    api = NbGraderAPI(config=config)
    res = api.generate_assignment(CH)
    assert res["success"], res["log"]
    released = json.loads((course_dir / "release" / CH / SOURCE.name).read_text())
    variants = _variants(released, json.loads(SOURCE.read_text()))
    for student, nb in variants.items():
        d = course_dir / "submitted" / student / CH
        d.mkdir(parents=True)
        (d / SOURCE.name).write_text(json.dumps(nb))
        (d / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    try:
        for student in variants:
            res = api.autograde(CH, student, create=True)
            assert res["success"], f"{student}: {res['log']}"
        with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
            scores = {s: gb.find_submission(CH, s).score for s in variants}
        planted = [str(p) for p in (plant_repo, plant_course) if p.exists()]
    finally:
        plant_repo.unlink(missing_ok=True)
    return scores, planted, course_dir


@pytest.mark.slow
def test_tampering_gets_zero_and_honest_full_points(tmp_path, monkeypatch, fake_harness):
    """Do the honest kernels get 20/20 and every Python tampering variant 0, with nothing planted?"""
    scores, planted, course_dir = _autograde_all(tmp_path, monkeypatch)
    expected = {name: 0.0 for name in ATTACKS}
    expected.update(honest=20.0, stub=0.0, preview_cell=0.0, kernel_cell_python=0.0, duplicated_test=20.0,
                    deleted_test=20.0)
    assert scores == expected
    assert not planted, f"student code wrote {planted}"
    graded = json.loads((course_dir / "autograded" / "honest" / CH / SOURCE.name).read_text())
    test = next(c for c in graded["cells"] if _grade_id(c) == "saxpy_test")
    assert "nbgrader_points" in "".join(test["source"])  # the instructor's source is back
    text = "".join("".join(o.get("text", "")) for o in test["outputs"])
    assert "saxpy: passed" in text


@pytest.mark.gpu
@pytest.mark.slow
def test_tampering_gets_what_the_kernels_deserve_on_a_gpu(tmp_path, monkeypatch):
    """With the real grader on a GPU: honest 20/20, stubs and every tampering variant 0."""
    if not gpu_present():
        pytest.skip("no CUDA GPU: needs an NVIDIA GPU")
    scores, planted, _ = _autograde_all(tmp_path, monkeypatch)
    assert scores["honest"] == 20.0 and scores["duplicated_test"] == 20.0 and scores["deleted_test"] == 20.0
    assert all(scores[name] == 0.0 for name in list(ATTACKS) + ["stub", "preview_cell", "kernel_cell_python"]), scores
    assert not planted
