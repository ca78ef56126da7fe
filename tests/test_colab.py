"""Colab: the first cell of the chapters and exercises, the one address setting, `course.colab.setup()`, an
exercise's set-up cell run as on Colab in this process (git and pip faked), and a Colab-like run of a released
exercise and a chapter in a fresh virtual environment built from wheels only (GPU tier; needs COURSE_WHEELHOUSE)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from repo_helpers import REPO, chapter_notebooks, exercise_notebooks, fail_on, load_tool, read_json_notebook, rel


@pytest.fixture
def colab(course_module):
    import course.colab
    return course.colab


@pytest.fixture
def not_colab(monkeypatch):
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)


@pytest.fixture
def fake_colab(monkeypatch, tmp_path, colab):
    """Colab as setup() sees it: the marker set, a checkout, no GPU here; pip calls recorded."""
    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")
    monkeypatch.delenv("COURSE_WHEELHOUSE", raising=False)
    repo = tmp_path / "cuda-course"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(REPO / "tools" / "bootstrap.py", repo / "tools")
    shutil.copy(REPO / "pyproject.toml", repo)
    calls = []
    monkeypatch.setattr(colab, "_pip", lambda cmd, check=True: calls.append(cmd))
    monkeypatch.setattr(colab, "_versions", lambda repo: "CuPy 0.0 (test)")
    monkeypatch.setattr(sys, "path", list(sys.path))
    return repo, calls


def cell_as_python(source: str) -> str:
    from IPython.core.inputtransformer2 import TransformerManager
    return TransformerManager().transform_cell(source)


def test_setup_does_nothing_outside_colab(colab, not_colab, monkeypatch):
    """Outside Colab, does setup() return None without running anything?"""
    monkeypatch.setattr(colab.subprocess, "run", lambda *a, **k: pytest.fail("ran a command"))
    assert colab.setup() is None


def test_setup_installs_once_with_the_extra_bootstrap_picks(colab, fake_colab, capsys):
    """On Colab, is the course installed editable with the extra tools/bootstrap.py picks, the
    other CuPy build removed, the checkout put on sys.path, and nothing installed the second time?"""
    repo, calls = fake_colab
    first = colab.setup(repo)
    extra = load_tool("bootstrap").choose_cuda_extra(load_tool("bootstrap").driver_cuda_version())[0]
    assert first["extra"] == extra and first["installed_now"]
    uninstall, course_install, requirements = calls
    assert uninstall[-1] == colab.OTHER_CUPY[extra]
    assert course_install[-3:] == ["editable_mode=compat", "-e", str(repo.resolve())]
    assert "--no-deps" in course_install
    names = {re.match(r"[\w.\-]+", r).group().lower() for r in requirements[6:]}
    assert {"numpy", "ipywidgets", f"cupy-{extra}x"} <= names
    assert not names & colab.COLAB_SKIP, "JupyterLab/nbgrader would upgrade Colab's own server"
    assert str(repo.resolve()) in sys.path
    calls.clear()
    second = colab.setup(repo)
    assert calls == [] and not second["installed_now"]
    assert "already installed" in capsys.readouterr().out


def test_requirements_add_the_header_wheels(colab):
    """Does each CUDA extra bring NVRTC and the wheel holding crt/mma.h, which mma.h includes?"""
    pyproject = (REPO / "pyproject.toml").read_text()
    cuda12 = " ".join(colab.requirements(pyproject, "cuda12"))
    cuda13 = " ".join(colab.requirements(pyproject, "cuda13"))
    assert "nvidia-cuda-nvrtc-cu12" in cuda12 and "nvidia-cuda-nvcc-cu12" in cuda12
    assert "nvidia-cuda-nvrtc" in cuda13 and "nvidia-cuda-crt" in cuda13


@pytest.mark.parametrize("kind", ["chapter", "exercise"])
def test_cell_is_self_contained_python(colab, kind):
    """Is the first cell valid IPython, importing nothing of the course before setup() installs it, with the
    address of pyproject's [tool.course] in it, and the preflight in chapters only (in an exercise it would
    measure the GPU in every notebook the instructor grades)?"""
    source = colab.cell_source(kind=kind)
    code = cell_as_python(source)
    compile(code, "colab-cell", "exec")
    before_setup = code.split('["setup"]')[0]
    assert "import course" not in before_setup and "from course" not in before_setup
    assert f'os.environ.get("COURSE_REPO_URL", {json.dumps(colab.repo_url())})' in source
    last = "import course; course.preflight()\n%load_ext course" if kind == "chapter" else "\n%load_ext course"
    assert source.rstrip().endswith(last)
    assert kind == "chapter" or "preflight" not in source


def write_setting(tmp_path, url: str) -> Path:
    """A pyproject.toml like the repository's, with [tool.course] repo_url = url."""
    text = (REPO / "pyproject.toml").read_text()
    new, n = re.subn(r'(?m)^(repo_url\s*=\s*)"[^"]*"', lambda m: f'{m.group(1)}"{url}"', text)
    assert n == 1, "pyproject.toml has no [tool.course] repo_url line"
    path = tmp_path / "pyproject.toml"
    path.write_text(new)
    return path


def test_the_address_is_one_setting(colab, tmp_path, monkeypatch):
    """Is the clone address read from pyproject's [tool.course] repo_url alone (also by Python 3.10, which has
    no tomllib), and does it reach both forms of the cell and the exercises' Colab note?"""
    url = "https://example.org/teacher/cuda-course.git"
    monkeypatch.setattr(colab, "PYPROJECT", write_setting(tmp_path, url))
    assert colab.repo_url() == url
    for kind in ("chapter", "exercise"):
        assert f'os.environ.get("COURSE_REPO_URL", "{url}")' in colab.cell_source(kind=kind)
    assert f"`{url}`" in colab.exercise_note()
    monkeypatch.setitem(sys.modules, "tomllib", None)  # import tomllib now fails, as on 3.10
    assert colab.repo_url() == url
    monkeypatch.setattr(colab, "PYPROJECT", write_setting(tmp_path, ""))
    assert colab.repo_url() == ""
    assert "not set" in colab.exercise_note()


def test_add_colab_cell_is_idempotent(colab):
    """Does the tool replace the plain set-up cell, leave an up-to-date one alone, and refuse to
    overwrite a first cell that is something else?"""
    tool = load_tool("add_colab_cell")
    cell = colab.cell_source()

    def nb(first):
        return {"cells": [{"cell_type": "markdown", "source": "# title", "metadata": {}},
                          {"cell_type": "code", "source": first, "metadata": {}, "outputs": [],
                           "execution_count": None, "id": "c001"}]}
    updated, what = tool.with_colab_cell(nb("import course; course.preflight()\n%load_ext course"), cell)
    assert what == "updated" and "".join(updated["cells"][1]["source"]) == cell
    assert updated["cells"][1]["id"] == "c001"
    assert tool.with_colab_cell(updated, cell)[1] == "ok"
    assert tool.with_colab_cell(nb("# On Colab, an older version\nimport os"), cell)[1] == "updated"
    assert tool.with_colab_cell(nb("import numpy as np"), cell)[1] == "refused"


def test_add_colab_cell_writes_the_exercise_note(colab):
    """In an exercise, does the tool put the Colab note under the title the first time, replace only what lies
    between its markers later (the author's prose stays), and keep the cell's form of source?"""
    tool = load_tool("add_colab_cell")
    cell, begin, end = colab.cell_source(kind="exercise"), colab.NOTE_BEGIN, colab.NOTE_END
    nb = {"cells": [{"cell_type": "code", "source": "%load_ext course", "metadata": {}, "outputs": [],
                     "execution_count": None, "id": "c000"},
                    {"cell_type": "markdown", "metadata": {}, "id": "c001",
                     "source": ["# 99 · Exercises\n", "\n", "Prose by the author.\n", "\n", "More prose."]}]}
    note = colab.exercise_note("")
    nb, what = tool.with_colab_cell(nb, cell, (note, begin, end))
    assert what == "updated" and nb["cells"][0]["source"] == cell  # a string stays a string
    title = nb["cells"][1]["source"]
    assert isinstance(title, list)
    assert "".join(title) == f"# 99 · Exercises\n\n{note}\n\nProse by the author.\n\nMore prose."
    assert tool.with_colab_cell(nb, cell, (note, begin, end))[1] == "ok"
    other = colab.exercise_note("https://example.org/x.git")
    nb, what = tool.with_colab_cell(nb, cell, (other, begin, end))
    assert what == "updated"
    assert "".join(nb["cells"][1]["source"]) == f"# 99 · Exercises\n\n{other}\n\nProse by the author.\n\nMore prose."
    assert tool.with_colab_cell({"cells": nb["cells"][:1]}, cell, (note, begin, end))[1] == "refused"


@pytest.mark.parametrize("path", chapter_notebooks(), ids=rel)
def test_chapter_starts_with_the_colab_cell(path, colab):
    """Is the chapter's first code cell exactly course.colab.cell_source(), so it opens in Colab?"""
    code = [c for c in read_json_notebook(path)["cells"] if c["cell_type"] == "code"]
    assert code and "".join(code[0]["source"]) == colab.cell_source(), \
        f"{rel(path)}: its first code cell is not course.colab.cell_source(): run python3 tools/add_colab_cell.py"


@pytest.mark.parametrize("path", exercise_notebooks(), ids=rel)
def test_exercise_starts_with_the_colab_cell(path, colab):
    """Is the exercise's first cell the exercise form of the set-up cell, a plain cell (no nbgrader metadata,
    so never graded, locked or checksummed), and does its title cell carry the Colab note?"""
    cells = read_json_notebook(path)["cells"]
    first = cells[0]
    assert first["cell_type"] == "code" and "".join(first["source"]) == colab.cell_source(kind="exercise"), \
        f"{rel(path)}: run python3 tools/add_colab_cell.py"
    assert "nbgrader" not in first.get("metadata", {})
    title = next(c for c in cells[1:] if c["cell_type"] == "markdown")
    assert colab.exercise_note() in "".join(title["source"]), f"{rel(path)}: run python3 tools/add_colab_cell.py"


def test_add_colab_cell_check_passes_on_the_exercises():
    """Does `tools/add_colab_cell.py --check` find every exercise notebook up to date?"""
    paths = [str(p) for p in exercise_notebooks()]
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "add_colab_cell.py"), "--check", *paths],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---- an exercise's set-up cell run as on Colab, in this process: git and pip faked, the rest real ----

class FakeShell:
    """What the cell's `%load_ext course` reaches: get_ipython().run_line_magic."""

    def __init__(self):
        self.magics = []

    def run_line_magic(self, name, line):
        self.magics.append((name, line))


@pytest.fixture
def colab_process(monkeypatch, tmp_path):
    """Run a set-up cell the way Colab's kernel would: (run(source) -> (shell, printed), commands run).
    `git clone` writes a checkout holding what setup() reads (course/colab.py, tools/bootstrap.py,
    pyproject.toml); pip succeeds without installing; the versions report is a fixed line."""
    import subprocess as sp
    commands = []

    def fake_run(cmd, *args, **kwargs):
        commands.append(list(map(str, cmd)))
        if cmd[:2] == ["git", "clone"]:
            dest = Path(cmd[-1])
            for name in ("course/colab.py", "tools/bootstrap.py", "pyproject.toml"):
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / name, dest / name)
        out = "CuPy 0.0 (faked)" if "-c" in cmd else ""
        return sp.CompletedProcess(cmd, 0, out, "")
    monkeypatch.setattr(sp, "run", fake_run)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delenv("COURSE_REPO_URL", raising=False)
    monkeypatch.delenv("COURSE_WHEELHOUSE", raising=False)
    monkeypatch.setenv("COURSE_DIR", str(tmp_path / "cuda-course"))

    def run(source, capsys):
        shell = FakeShell()
        exec(compile(cell_as_python(source), "colab-cell", "exec"), {"get_ipython": lambda: shell})
        return shell, capsys.readouterr().out
    return run, commands


def exercise_cell() -> str:
    """The set-up cell exactly as the first exercise notebook holds it."""
    return "".join(read_json_notebook(exercise_notebooks()[0])["cells"][0]["source"])


def test_exercise_cell_off_colab_runs_nothing_and_prints_nothing(colab_process, not_colab, capsys):
    """Off Colab (a laptop, the lab, nbgrader autograde), does the exercise's set-up cell only load the
    course: no command, no output?"""
    run, commands = colab_process
    shell, printed = run(exercise_cell(), capsys)
    assert commands == [] and printed == ""
    assert shell.magics == [("load_ext", "course")]


def test_exercise_cell_on_colab_without_an_address_says_what_to_do(colab_process, monkeypatch, capsys, colab):
    """On Colab with no address set, does the cell stop before git with a message that says what to do?"""
    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")
    run, commands = colab_process
    with pytest.raises(SystemExit) as stop:
        run(colab.cell_source("", kind="exercise"), capsys)
    assert commands == []
    message = str(stop.value)
    assert "address is not set" in message and "os.environ['COURSE_REPO_URL']" in message
    assert "[tool.course]" in message  # and where the instructor sets it


@pytest.mark.parametrize("how", ["student sets COURSE_REPO_URL", "instructor set repo_url"])
def test_exercise_cell_on_colab_clones_installs_and_loads(colab_process, monkeypatch, capsys, colab, how):
    """On Colab, does the exercise's set-up cell clone the course from the address (the notebook's, or the
    student's COURSE_REPO_URL), install it with the extra tools/bootstrap.py picks, put the checkout on
    sys.path and load the course; and a second run install nothing?"""
    monkeypatch.setenv("COLAB_RELEASE_TAG", "test")
    run, commands = colab_process
    url = "https://example.org/teacher/cuda-course.git"
    if how.startswith("student"):
        monkeypatch.setenv("COURSE_REPO_URL", url)
        source = exercise_cell()
    else:
        source = colab.cell_source(url, kind="exercise")
    shell, printed = run(source, capsys)
    checkout = os.environ["COURSE_DIR"]
    clone, *rest = commands
    assert clone[:2] == ["git", "clone"] and clone[-2:] == [url, checkout]
    extra = load_tool("bootstrap").choose_cuda_extra(load_tool("bootstrap").driver_cuda_version())[0]
    pips = [c for c in rest if c[1:4] == ["-m", "pip", "install"]]
    assert any("-e" in c and c[-1] == str(Path(checkout).resolve()) for c in pips)
    assert any(any(r.startswith(f"cupy-{extra}x") for r in c) for c in pips)
    assert f"installing from {Path(checkout).resolve()}" in printed and "CuPy 0.0 (faked)" in printed
    assert str(Path(checkout).resolve()) in sys.path
    assert shell.magics == [("load_ext", "course")]
    commands.clear()
    shell, printed = run(source, capsys)
    assert not any(c[:2] == ["git", "clone"] or c[1:4] == ["-m", "pip", "install"] for c in commands)
    assert "already installed" in printed and shell.magics == [("load_ext", "course")]


# ---- a Colab-like run: a fresh venv, wheels only, the chapter's first cell does the install ----

# What Colab preinstalls that the course uses: a Jupyter kernel, NumPy, Matplotlib, ipywidgets.
COLAB_BASELINE = ["ipykernel", "nbclient", "nbformat", "numpy", "matplotlib", "ipywidgets"]
RUNNER = textwrap.dedent("""
    import json, sys, nbformat, nbclient
    nb = nbformat.reads(sys.stdin.read(), as_version=4)
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=600, allow_errors=True,
                            resources={"metadata": {"path": sys.argv[1]}}).execute()
    print(nbformat.writes(nb))
""")


def run_checked(cmd, **kw):
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd[:4]))} ... failed:\n{(proc.stdout + proc.stderr)[-4000:]}"
    return proc.stdout


def make_venv(venv, wheelhouse) -> str:
    """A fresh venv (no system site packages); where the Python lacks ensurepip (Debian/Ubuntu
    without python3-venv), one without pip that then installs pip from the wheelhouse."""
    proc = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
    python = str(venv / "bin" / "python")
    if proc.returncode:
        assert "ensurepip" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        run_checked([sys.executable, "-m", "venv", "--clear", "--without-pip", venv])
        pip_wheels = sorted(Path(wheelhouse).glob("pip-*.whl"))
        assert pip_wheels, f"{sys.executable} has no ensurepip and {wheelhouse} holds no pip wheel"
        run_checked([python, str(pip_wheels[-1] / "pip"), "install", "-q", "--no-index", pip_wheels[-1]])
    return python


def colab_chapters() -> list[Path]:
    """COURSE_COLAB_CHAPTERS=01_first_kernel,08_tensor_cores picks the chapters; default the first."""
    chapters = chapter_notebooks()
    wanted = [w.strip() for w in os.environ.get("COURSE_COLAB_CHAPTERS", "").split(",") if w.strip()]
    if not wanted:
        return chapters[:1]
    picked = [c for w in wanted for c in chapters if c.stem == w or c.stem.startswith(w + "_")]
    assert len(picked) == len(wanted), f"COURSE_COLAB_CHAPTERS={wanted}: not all are chapters"
    return picked


def colab_exercises() -> list[str]:
    """COURSE_COLAB_EXERCISES=01_first_kernel,06_building_blocks picks the exercise notebooks; default the first."""
    stems = [p.parent.name for p in exercise_notebooks()]
    wanted = [w.strip() for w in os.environ.get("COURSE_COLAB_EXERCISES", "").split(",") if w.strip()]
    if not wanted:
        return stems[:1]
    picked = [s for w in wanted for s in stems if s == w or s.startswith(w + "_")]
    assert len(picked) == len(wanted), f"COURSE_COLAB_EXERCISES={wanted}: not all are exercise notebooks"
    return picked


def solved(released: dict, source: dict) -> dict:
    """What a student who finished brings to Colab: the released notebook, each solution cell filled in
    with the instructor's (the reference solution)."""
    def grade_id(cell):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        return meta.get("grade_id") if meta.get("solution") else None
    answers = {grade_id(c): c["source"] for c in source["cells"] if grade_id(c)}
    nb = json.loads(json.dumps(released))
    for cell in nb["cells"]:
        if grade_id(cell):
            cell["source"] = answers[grade_id(cell)]
    return nb


def outputs_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append("".join(out["text"]))
        elif out["output_type"] == "error":
            parts.append(f"{out['ename']}: {out['evalue']}\n" + "\n".join(out["traceback"]))
        else:
            parts += ["".join(v) for k, v in out.get("data", {}).items() if k.startswith("text/plain")]
    return "\n".join(parts)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_colab_simulation_runs_an_exercise_and_a_chapter(tmp_path, colab):
    """In a fresh venv holding only a kernel, as on Colab: does an exercise notebook, as nbgrader releases it
    and a student finishes it, install the course from wheels through its own first cell, compile, self-check
    and preview its kernels (the preview says they are correct) without an error; and does a chapter then
    find the course installed and run top to bottom? COURSE_COLAB_EXERCISES and COURSE_COLAB_CHAPTERS pick."""
    from test_exercise_release import generate_release
    wheelhouse = os.environ.get("COURSE_WHEELHOUSE")
    if not wheelhouse:
        pytest.skip("set COURSE_WHEELHOUSE to a wheelhouse for this Python "
                    "(python3 tools/wheelhouse.py build DIR --python-version X.Y --cuda 12|13)")
    checkout = tmp_path / "cuda-course"  # as the cell's git clone would leave it
    shutil.copytree(REPO, checkout, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".whl", ".stage", "node_modules", "*.egg-info", "__pycache__", ".cache", ".pytest_cache"))
    venv = tmp_path / "venv"
    python = make_venv(venv, wheelhouse)
    run_checked([python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheelhouse,
                 *COLAB_BASELINE])
    run_checked([python, "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"])
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH", "CUDA_VISIBLE_DEVICES")}
    env.update(COLAB_RELEASE_TAG="simulated", COURSE_DIR=str(checkout), COURSE_WHEELHOUSE=wheelhouse,
               COURSE_REPO_URL="file:///nonexistent",  # the checkout is there: nothing to clone
               COURSE_SANDBOX_PRETEND_NO_LANDLOCK="1",  # Colab runs on gVisor: the grader's children go unconfined
               JUPYTER_PATH=str(venv / "share" / "jupyter"), JUPYTER_DATA_DIR=str(tmp_path / "jupyter"),
               PATH=os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")]))

    # An uploaded notebook sits in Colab's /content, outside the checkout; a chapter runs from its folder.
    uploads = tmp_path / "content"
    uploads.mkdir()
    exercises = colab_exercises()
    released = generate_release(tmp_path / "course", exercises)
    runs = []
    for stem in exercises:
        source = read_json_notebook(REPO / "exercises" / "source" / stem / f"{stem}.ipynb")
        nb = solved(released[stem], source)
        assert "".join(nb["cells"][0]["source"]) == colab.cell_source(kind="exercise"), \
            f"the released {stem} does not start with the exercise's set-up cell"
        runs.append((f"exercise {stem} (released, solved)", nb, uploads))
    for chapter in colab_chapters():
        nb, what = load_tool("add_colab_cell").with_colab_cell(read_json_notebook(chapter), colab.cell_source())
        assert what != "refused", f"{rel(chapter)}: its first code cell is not the set-up cell"
        runs.append((rel(chapter), nb, checkout / "chapters"))

    problems = []
    for k, (name, nb, folder) in enumerate(runs):
        start = time.monotonic()
        ran = json.loads(run_checked([python, "-c", RUNNER, str(folder)], env=env, input=json.dumps(nb)))
        code = [c for c in ran["cells"] if c["cell_type"] == "code"]
        first = outputs_text(code[0])
        print(f"--- {name}: {len(code)} code cells in {time.monotonic() - start:.0f} s; "
              f"its first cell printed:\n{first}")
        problems += [f"{name} cell {i}: {outputs_text(c)[-1500:]}" for i, c in enumerate(code)
                     if any(o["output_type"] == "error" for o in c.get("outputs", []))
                     or "Traceback" in outputs_text(c)]
        # The first notebook's cell (an exercise's) installs; a later one finds the course installed.
        expected = "course: installing" if k == 0 else "already installed"
        if expected not in first or "CUDA headers: all found" not in first:
            problems.append(f"{name}: the Colab cell did not install and report as expected:\n{first[-3000:]}")
        for c in code:
            if "autograder.preview(" in "".join(c["source"]):
                print(f"{name}: {outputs_text(c)[:400]}")
                if "Correct at all" not in outputs_text(c):
                    problems.append(f"{name}: the preview of a reference solution did not say it is correct:\n"
                                    f"{outputs_text(c)[-1500:]}")
    fail_on(problems)
    # Idempotent: a second setup() (a re-run of the first cell) installs nothing.
    again = run_checked([python, "-c", f"import runpy; runpy.run_path({str(checkout / 'course' / 'colab.py')!r})"
                                       f"['setup']({str(checkout)!r})"], env=env)
    assert "already installed" in again, again
