"""Colab: the chapters' first cell, `course.colab.setup()`, and a Colab-like run in a fresh virtual
environment built from wheels only (GPU tier; needs COURSE_WHEELHOUSE)."""
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

from repo_helpers import REPO, chapter_notebooks, fail_on, load_tool, read_json_notebook, rel


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


def test_cell_is_self_contained_python(colab):
    """Is the first cell valid IPython, importing nothing of the course before setup() installs it?"""
    source = colab.cell_source()
    code = cell_as_python(source)
    compile(code, "colab-cell", "exec")
    before_setup = code.split('["setup"]')[0]
    assert "import course" not in before_setup and "from course" not in before_setup
    assert colab.REPO_URL in source and "COURSE_REPO_URL" in source
    assert source.rstrip().endswith("import course; course.preflight()\n%load_ext course")


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


@pytest.mark.parametrize("path", chapter_notebooks(), ids=rel)
def test_chapter_starts_with_the_colab_cell(path, colab):
    """Is the chapter's first code cell exactly course.colab.cell_source(), so it opens in Colab?"""
    code = [c for c in read_json_notebook(path)["cells"] if c["cell_type"] == "code"]
    assert code and "".join(code[0]["source"]) == colab.cell_source()


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
def test_colab_simulation_runs_a_chapter(tmp_path, colab):
    """In a fresh venv holding only a kernel, does a chapter's first cell install the course from
    wheels (as on Colab) and the chapter then run top to bottom without an error?"""
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
               JUPYTER_PATH=str(venv / "share" / "jupyter"), JUPYTER_DATA_DIR=str(tmp_path / "jupyter"),
               PATH=os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")]))

    problems = []
    for k, chapter in enumerate(colab_chapters()):
        nb = read_json_notebook(chapter)
        nb, what = load_tool("add_colab_cell").with_colab_cell(nb, colab.cell_source())
        assert what != "refused", f"{rel(chapter)}: its first code cell is not the set-up cell"
        start = time.monotonic()
        ran = json.loads(run_checked([python, "-c", RUNNER, str(checkout / "chapters")], env=env,
                                     input=json.dumps(nb)))
        code = [c for c in ran["cells"] if c["cell_type"] == "code"]
        first = outputs_text(code[0])
        print(f"--- {rel(chapter)}: {len(code)} code cells in {time.monotonic() - start:.0f} s; "
              f"its first cell printed:\n{first}")
        problems += [f"{rel(chapter)} cell {i}: {outputs_text(c)[-1500:]}" for i, c in enumerate(code)
                     if any(o["output_type"] == "error" for o in c.get("outputs", []))
                     or "Traceback" in outputs_text(c)]
        # The first chapter's cell installs; a later chapter's finds the course installed.
        expected = "course: installing" if k == 0 else "already installed"
        if expected not in first or "CUDA headers: all found" not in first:
            problems.append(f"{rel(chapter)}: the Colab cell did not install and report as expected:\n"
                            f"{first[-3000:]}")
    fail_on(problems)
    # Idempotent: a second setup() (a re-run of the first cell) installs nothing.
    again = run_checked([python, "-c", f"import runpy; runpy.run_path({str(checkout / 'course' / 'colab.py')!r})"
                                       f"['setup']({str(checkout)!r})"], env=env)
    assert "already installed" in again, again
