"""`python -m autograder` on a machine without a GPU (forced with CUDA_VISIBLE_DEVICES=''):
exit code 3, one clear message, never a traceback; usage errors exit 2."""
import json
import subprocess
import sys

import pytest

from ag_helpers import ROOT, make_notebook, no_gpu_env
from autograder.loader import chapters, load_chapter

K1 = (ROOT / "solutions" / "01_first_kernel" / "saxpy.cu").read_text()


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "autograder", *args], capture_output=True, text=True,
                          env=no_gpu_env(), cwd=str(ROOT), input=stdin, timeout=300)


@pytest.fixture
def submissions(tmp_path):
    for student in ("alice", "bob"):
        d = tmp_path / "submitted" / student / "01_first_kernel"
        d.mkdir(parents=True)
        make_notebook([("code", "%load_ext course", []),
                       ("code", f"%%cuda --name saxpy --no-run\n{K1}", ["kernel:saxpy"])],
                      d / "01_first_kernel.ipynb")
    return tmp_path / "submitted"


def test_no_gpu_exits_3_with_a_message_and_no_traceback(submissions, tmp_path):
    out = tmp_path / "report.json"
    r = run("grade", str(submissions), "--json", str(out))
    assert r.returncode == 3, r.stderr
    text = r.stdout + r.stderr
    assert "Traceback" not in text
    assert "needs a GPU" in text and "exit code 3" in text
    assert "alice/01_first_kernel" in r.stdout and "bob/01_first_kernel" in r.stdout
    data = json.loads(out.read_text())
    # one case, one verdict: a missing kernel fails for every student, a compiling one needs a GPU
    assert {(e["exercise"], e["status"]) for e in data["exercises"]} == {
        (e.name, "needs a GPU" if e.name == "saxpy" else "failed") for e in load_chapter("01_first_kernel")}
    assert data["points"] == 0


def test_single_cu_file_no_gpu():
    r = run("grade", str(ROOT / "solutions" / "01_first_kernel" / "saxpy.cu"))
    assert r.returncode == 3 and "Traceback" not in r.stdout + r.stderr


def test_grade_source_for_notebooks_no_gpu():
    r = run("grade-source", "--chapter", "01_first_kernel", "--exercise", "saxpy",
            stdin=json.dumps({"source": K1, "launch": None}))
    assert r.returncode == 3
    assert json.loads(r.stdout)["status"] == "needs a GPU"


@pytest.mark.parametrize("args,expect", [
    (("grade", "does/not/exist.ipynb"), "neither a notebook"),
    (("grade", str(ROOT / "solutions" / "01_first_kernel"), "--chapter", "01_first_kernal"),
     "Did you mean '01_first_kernel'"),
    (("grade", str(ROOT / "solutions" / "01_first_kernel" / "saxpy.cu"), "--exercise", "saxpi"),
     "Did you mean 'saxpy'"),
])
def test_usage_errors_exit_2(args, expect):
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expect in r.stderr and "Traceback" not in r.stderr


def test_no_command_is_a_usage_error():
    assert run().returncode == 2


def test_check_specs():
    r = run("check-specs")
    assert r.returncode == 0, r.stdout + r.stderr
    for chapter in chapters():
        assert f"{chapter}: {len(load_chapter(chapter))} exercise(s) ok" in r.stdout


def test_importing_autograder_does_not_import_cupy():
    """The parent must never load CUDA: importing the package must not import CuPy."""
    code = "import sys, autograder; print('cupy' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=no_gpu_env(), cwd=str(ROOT))
    assert r.stdout.strip() == "False", r.stderr
