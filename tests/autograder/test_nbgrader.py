"""nbgrader wiring: the config, the C++ solution stub, partial credit from the test cell's value, and
an end-to-end generate -> submit -> autograde -> gradebook run (zero points and 'needs a GPU' without a
GPU; the reference's full points with one)."""
import json
import os
import shutil
import sys

import pytest

from ag_helpers import ROOT, gpu_present, make_notebook

CONFIG = ROOT / "exercises" / "nbgrader_config.py"
SOLUTION_KERNEL = '''%%cuda --name saxpy --no-run
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    // BEGIN SOLUTION
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
    // END SOLUTION
}'''
TEST_CELL = '''### BEGIN HIDDEN TESTS
import autograder
autograder.nbgrader_points("01_first_kernel", "saxpy")
### END HIDDEN TESTS'''


def load_config():
    from traitlets.config.loader import PyFileConfigLoader
    return PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()


def test_config_values():
    c = load_config()
    assert c.ClearSolutions.code_stub == {"python": "// YOUR CODE HERE"}
    assert c.Execute.timeout >= 600
    assert c.CourseDirectory.course_id


def test_clear_solutions_leaves_a_compilable_cuda_stub():
    """Does the released %%cuda cell keep the kernel's signature and get a C++ stub in its body?"""
    pytest.importorskip("nbgrader")
    import nbformat
    from nbgrader.preprocessors import ClearSolutions
    nb = nbformat.from_dict(make_notebook([("code", SOLUTION_KERNEL, [])]))
    nb.cells[0].metadata["nbgrader"] = {"solution": True, "grade": False, "locked": False, "grade_id": "k",
                                        "schema_version": 3}
    nb, _ = ClearSolutions(config=load_config()).preprocess(nb, {})
    src = nb.cells[0].source
    assert "// YOUR CODE HERE" in src and "y[i] = a * x[i]" not in src
    assert src.startswith("%%cuda --name saxpy --no-run") and src.rstrip().endswith("}")
    from autograder.extract import strip_magic
    course = pytest.importorskip("course")
    try:
        course.compile_for_arch(strip_magic(src), "sm_80")
    except course.CompileError as exc:
        if "could not be loaded" in str(exc):
            pytest.skip("no NVRTC here")
        raise


@pytest.mark.parametrize("value,expected", [(0.0, 0.0), (6.0, 6.0), (7.5, 7.5), (10.0, 10.0)])
def test_partial_credit_is_read_from_the_returned_float(value, expected):
    """nbgrader 0.9 reads the execute_result's text/plain as the cell's points (no stderr, no error)."""
    from nbformat import from_dict
    from nbgrader.utils import determine_grade
    cell = from_dict({"cell_type": "code", "source": TEST_CELL, "execution_count": 1,
                      "metadata": {"nbgrader": {"grade": True, "solution": False, "points": 10, "grade_id": "t"}},
                      "outputs": [{"output_type": "stream", "name": "stdout", "text": "saxpy: slow - 6 / 10 points\n"},
                                  {"output_type": "execute_result", "execution_count": 1, "metadata": {},
                                   "data": {"text/plain": repr(value)}}]})
    assert determine_grade(cell) == (expected, 10.0)


def test_nbgrader_points_without_gpu_prints_and_returns_zero(capsys, monkeypatch):
    """With no GPU: 0 points, 'needs a GPU' on stdout, and nothing on stderr (stderr would zero the cell)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    import course
    from autograder import nbgrader_points
    monkeypatch.setitem(course.cell_sources, "saxpy",
                        (ROOT / "solutions" / "01_first_kernel" / "saxpy.cu").read_text())
    assert nbgrader_points("01_first_kernel", "saxpy") == 0.0
    out, err = capsys.readouterr()
    assert "needs a GPU" in out and err == ""


def _nb_metadata(cell, **kw):
    cell["metadata"]["nbgrader"] = {"schema_version": 3, "locked": False, "solution": False, "grade": False, **kw}
    return cell


@pytest.mark.slow
@pytest.mark.both_tiers
def test_end_to_end_autograde_gradebook(tmp_path, monkeypatch):
    pytest.importorskip("nbgrader")
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    course_dir = tmp_path / "course"
    src_dir = course_dir / "source" / "01_first_kernel"
    src_dir.mkdir(parents=True)
    shutil.copy(CONFIG, course_dir / "nbgrader_config.py")
    nb = make_notebook([("code", "%load_ext course", []), ("code", SOLUTION_KERNEL, []), ("code", TEST_CELL, [])])
    _nb_metadata(nb["cells"][0], locked=True, grade_id="setup")
    _nb_metadata(nb["cells"][1], solution=True, grade_id="saxpy_kernel")
    _nb_metadata(nb["cells"][2], grade=True, locked=True, points=10, grade_id="saxpy_points")
    (src_dir / "01_first_kernel.ipynb").write_text(json.dumps(nb))

    monkeypatch.chdir(course_dir)
    # nbgrader runs `alembic`, and the kernel runs `python`, from PATH: use this interpreter's
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    config = load_config()
    config.merge(Config({"CourseDirectory": {"root": str(course_dir)}, "Execute": {"timeout": 1800}}))
    api = NbGraderAPI(config=config)
    res = api.generate_assignment("01_first_kernel")
    assert res["success"], res["log"]
    released = json.loads((course_dir / "release" / "01_first_kernel" / "01_first_kernel.ipynb").read_text())
    stub_src = "".join(released["cells"][1]["source"])
    assert "// YOUR CODE HERE" in stub_src

    off_by_one = stub_src.replace("// YOUR CODE HERE", "int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                  "    if (i <= n) y[i] = a * x[i] + y[i];")
    students = {"reference": nb["cells"][1]["source"], "stub": stub_src, "offbyone": off_by_one}
    for student, kernel in students.items():
        sub = json.loads(json.dumps(released))
        sub["cells"][1]["source"] = kernel
        d = course_dir / "submitted" / student / "01_first_kernel"
        d.mkdir(parents=True)
        (d / "01_first_kernel.ipynb").write_text(json.dumps(sub))
        (d / "timestamp.txt").write_text("2024-01-01 00:00:00.000000 UTC")
        res = api.autograde("01_first_kernel", student, create=True)
        assert res["success"], res["log"]

    with_gpu = gpu_present()
    expected = {"reference": 10.0, "stub": 0.0, "offbyone": 0.0} if with_gpu else dict.fromkeys(students, 0.0)
    with Gradebook(f"sqlite:///{course_dir / 'gradebook.db'}") as gb:
        scores = {s: gb.find_submission("01_first_kernel", s).score for s in students}
    assert scores == expected
    graded = json.loads((course_dir / "autograded" / "reference" / "01_first_kernel" / "01_first_kernel.ipynb")
                        .read_text())
    text = "".join("".join(o.get("text", "")) for o in graded["cells"][2]["outputs"] if o["output_type"] == "stream")
    assert ("passed" in text) if with_gpu else ("needs a GPU" in text)
