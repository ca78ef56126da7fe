"""Issue #16 items 7 and 8 without a GPU: `preview` of a `%%cuda` cell that does not compile shows the
compile error and the compile-error verdict, and every compile error of a cell's source is numbered as
Jupyter numbers the cell's lines (the `%%cuda` line is line 1) by the magic, by `preview` and by the
grader's feedback on a submitted notebook alike. Only a kernel that compiles gets "needs a GPU"."""
import json
import os
import re
import subprocess
import sys

import pytest

from ag_helpers import ROOT, make_notebook, no_gpu_env, nvrtc_or_skip

HEAD = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)\n{\n'
BAD = "    int i = blockIdx.x * blockDim.x + threadIdx.x   // the ; is missing\n"
TAIL = "    if (i < n) y[i] = a * x[i] + y[i];\n}\n"
BODY = HEAD + BAD + TAIL  # NVRTC reports the line after the missing ';'
MAGIC = "%%cuda --name saxpy --no-run"


def cell_line_of_error(cell: str) -> int:
    """The cell line (Jupyter's numbering, from 1, the magic line included) NVRTC must complain about."""
    return cell.split("\n").index(TAIL.split("\n")[0]) + 1


def marked(text: str) -> list:
    """The line numbers an error excerpt marks with '>'."""
    return [int(n) for n in re.findall(r"^>\s*(\d+) \|", text, flags=re.M)]


@pytest.fixture
def notebook_session(monkeypatch, tmp_path):
    """This process as a notebook kernel on a machine without a GPU (the magic and preview's child alike),
    with `course.cell_sources` restored afterwards."""
    course = nvrtc_or_skip()
    from course import _env
    monkeypatch.setattr(_env, "_probe", lambda: (None, "no driver"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    saved = dict(course.cell_sources)
    yield course
    course.cell_sources.clear()
    course.cell_sources.update(saved)


def test_preview_of_a_cell_that_does_not_compile_shows_the_error_numbered_as_the_cell(notebook_session, capsys):
    """Item 7 and 8: run the `%%cuda` cell, then `preview` with no source (what the exercise notebooks do):
    a compile error with NVRTC's message, not "needs a GPU"; the magic and the preview mark the same line,
    the one the cell shows the error on, and the compiler logs say that line too."""
    from course._magic import cuda_cell

    import autograder
    cuda_cell(MAGIC[len("%%cuda "):], BODY, {})
    magic_out = capsys.readouterr().out
    report = autograder.preview("01_first_kernel", "saxpy")
    preview_out = capsys.readouterr().out
    want = cell_line_of_error(f"{MAGIC}\n{BODY}")
    assert want == 5  # HEAD is 2 lines, BAD 1, below the magic line
    assert report.status == "compile error" and "needs a GPU" not in preview_out, preview_out
    assert marked(magic_out) == [want], magic_out
    assert marked(preview_out) == [want], preview_out
    assert f"kernel.cu({want}): error" in magic_out and f"saxpy.cu({want}): error" in preview_out
    for out in (magic_out, preview_out):
        assert "its %%cuda line being 1" in out, out


def test_preview_of_an_explicit_source_numbers_from_one(notebook_session, capsys):
    """A source passed to `preview` as text (not a cell the student ran) is numbered from its own line 1."""
    import autograder
    report = autograder.preview("01_first_kernel", "saxpy", BODY)
    out = capsys.readouterr().out
    assert report.status == "compile error"
    assert marked(out) == [cell_line_of_error(BODY)] and "%%cuda line" not in out, out


def test_preview_without_a_gpu_says_the_kernel_compiles(notebook_session, capsys):
    """Item 7: a kernel that compiles gets "needs a GPU", and the feedback says it compiled, for which arch."""
    import autograder
    good = BODY.replace(BAD, BAD.replace("threadIdx.x ", "threadIdx.x;"))
    report = autograder.preview("01_first_kernel", "saxpy", good)
    out = capsys.readouterr().out
    assert report.status == "needs a GPU", out
    assert re.search(r"Your kernel compiles \(NVRTC, sm_\d+\)", out), out


def test_source_check_problems_are_numbered_as_the_cell(notebook_session):
    """Problems found before compiling (here an #include the grader refuses) use the cell's numbers too."""
    from autograder import grade_source
    body = HEAD + '#include "/etc/hostname"\n' + TAIL
    for first_line in (1, 2, 4):
        rep = grade_source("01_first_kernel", "saxpy", body, first_line=first_line)
        assert rep.status == "compile error"
        assert rep.reason.startswith(f"line {2 + first_line}:"), rep.reason


@pytest.mark.parametrize("blank_lines", [0, 2])
def test_graded_notebook_feedback_is_numbered_as_the_cell(tmp_path, blank_lines):
    """Item 8 for `python -m autograder grade` (the path of submitted notebooks): the feedback marks the
    cell's line, counted from the top of the cell (blank lines above the magic line included)."""
    nvrtc_or_skip()
    cell = "\n" * blank_lines + f"{MAGIC}\n{BODY}"
    nb = tmp_path / "01_first_kernel.ipynb"
    make_notebook([("code", cell, ["kernel:saxpy"])], nb)
    r = subprocess.run([sys.executable, "-m", "autograder", "grade", str(nb), "--exercise", "saxpy", "--json", "-"],
                       capture_output=True, text=True, env=no_gpu_env(), cwd=str(ROOT), timeout=600)
    rep = json.loads(r.stdout)["exercises"][0]
    assert rep["status"] == "compile error", r.stdout + r.stderr
    want = cell_line_of_error(cell)
    assert want == 5 + blank_lines
    assert marked(rep["reason"]) == [want], rep["reason"]
    assert f"saxpy.cu({want}): error" in rep["reason"]
    assert f"its %%cuda line being {1 + blank_lines}" in rep["reason"]


def test_body_first_line_counts_what_strip_magic_removes(tmp_path):
    """The grader's map from a cell to the line its kernel starts on agrees with the magic's constant, and
    a submission carries it for each exercise (a tagged cell without a magic line starts at line 1)."""
    course = pytest.importorskip("course")
    from autograder.extract import body_first_line, collect_submissions, strip_magic
    for cell, first in [(f"{MAGIC}\n{BODY}", course.CELL_FIRST_LINE), (BODY, 1), (f"\n\n{MAGIC}\n{BODY}", 4)]:
        assert body_first_line(cell) == first
        assert cell.split("\n")[first - 1:] == strip_magic(cell).split("\n")
    nb = tmp_path / "01_first_kernel.ipynb"
    make_notebook([("code", f"{MAGIC}\n{BODY}", []), ("code", BODY, ["kernel:rgb_to_gray"])], nb)
    (sub,), _ = collect_submissions(nb)
    assert sub.first_lines == {"saxpy": 2, "rgb_to_gray": 1}


@pytest.mark.slow
def test_nbgrader_autograde_feedback_is_numbered_as_the_cell(tmp_path, monkeypatch):
    """Item 8 for `nbgrader autograde` (the course's GradeKernels preprocessor): the feedback written into
    the graded notebook marks the line of the submitted cell, counted with its %%cuda line."""
    pytest.importorskip("nbgrader")
    nvrtc_or_skip()
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader
    config_file = ROOT / "exercises" / "nbgrader_config.py"
    course_dir = tmp_path / "course"
    src_dir = course_dir / "source" / "01_first_kernel"
    src_dir.mkdir(parents=True)
    (course_dir / "nbgrader_config.py").write_text(config_file.read_text())
    solution = (f"{MAGIC}\n{HEAD}    // BEGIN SOLUTION\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                f"    // END SOLUTION\n{TAIL}")
    test_cell = ('### BEGIN HIDDEN TESTS\nimport autograder\nautograder.nbgrader_points("01_first_kernel", '
                 '"saxpy")\n### END HIDDEN TESTS')
    nb = make_notebook([("code", "%load_ext course", []), ("code", solution, []), ("code", test_cell, [])])
    for cell, meta in zip(nb["cells"], [dict(locked=True, grade_id="setup"), dict(solution=True, grade_id="k"),
                                        dict(grade=True, locked=True, points=10, grade_id="saxpy_points")]):
        cell["metadata"]["nbgrader"] = {"schema_version": 3, "locked": False, "solution": False, "grade": False,
                                        **meta}
    (src_dir / "01_first_kernel.ipynb").write_text(json.dumps(nb))
    monkeypatch.chdir(course_dir)
    monkeypatch.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    config = PyFileConfigLoader(config_file.name, str(config_file.parent)).load_config()
    config.merge(Config({"CourseDirectory": {"root": str(course_dir)}, "Execute": {"timeout": 600}}))
    api = NbGraderAPI(config=config)
    assert api.generate_assignment("01_first_kernel")["success"]
    released = json.loads((course_dir / "release" / "01_first_kernel" / "01_first_kernel.ipynb").read_text())
    stub = "".join(released["cells"][1]["source"])
    broken = stub.replace("// YOUR CODE HERE", BAD.strip())  # NVRTC complains on the line after it
    released["cells"][1]["source"] = broken
    d = course_dir / "submitted" / "carol" / "01_first_kernel"
    d.mkdir(parents=True)
    (d / "01_first_kernel.ipynb").write_text(json.dumps(released))
    (d / "timestamp.txt").write_text("2024-01-01 00:00:00.000000 UTC")
    assert api.autograde("01_first_kernel", "carol", create=True)["success"]
    graded = json.loads((course_dir / "autograded" / "carol" / "01_first_kernel" / "01_first_kernel.ipynb")
                        .read_text())
    text = "".join("".join(o.get("text", "")) for o in graded["cells"][2]["outputs"] if o["output_type"] == "stream")
    want = next(n for n, line in enumerate(broken.split("\n"), 1) if BAD.strip() in line) + 1
    assert "compile error" in text and marked(text) == [want], text
    assert f"saxpy.cu({want}): error" in text
