"""Issue #23 items 1, 2 and 11 on a machine without a GPU (forced with CUDA_VISIBLE_DEVICES=''):
`grade submitted/ --chapter` grades that assignment only, one case gets one verdict whatever graded before
it, and a kernel that does not compile says so (from the CLI and from `preview`) instead of "needs a GPU"."""
import json
import shutil
import subprocess
import sys

import pytest

from ag_helpers import ROOT, make_notebook, no_gpu_env, nvrtc_or_skip
from autograder import load_chapter
from autograder.spec import CallExercise

SOURCE = ROOT / "exercises" / "source"
BROKEN = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { y[0] = ; }'


def grade(*args):
    r = subprocess.run([sys.executable, "-m", "autograder", *map(str, args)], capture_output=True, text=True,
                       env=no_gpu_env(), cwd=str(ROOT), timeout=600)
    assert "Traceback" not in r.stderr, r.stderr
    return r


def submit(root, student, chapter, notebook=None, cells=None):
    d = root / student / chapter
    d.mkdir(parents=True)
    if notebook is not None:
        shutil.copy(notebook, d / f"{chapter}.ipynb")
    else:
        make_notebook(cells, d / f"{chapter}.ipynb")


def verdicts(report_path):
    data = json.loads(report_path.read_text())
    return {(e["submission"], e["exercise"]): e["status"] for e in data["exercises"]}, data


def test_chapter_selects_that_assignments_folders_only(tmp_path):
    """Item 1: with every student's folders of two assignments under submitted/, --chapter 01_first_kernel
    grades the 01 folders only and lists the others as not graded."""
    sub = tmp_path / "submitted"
    for s in ("alice", "bob"):
        submit(sub, s, "01_first_kernel", cells=[("code", "x = 1", [])])
        submit(sub, s, "07_staged_gemm", SOURCE / "07_staged_gemm" / "07_staged_gemm.ipynb")
    out = tmp_path / "r.json"
    r = grade("grade", sub, "--chapter", "01_first_kernel", "--json", out)
    assert r.returncode == 0, r.stderr  # nothing reached a GPU: missing kernels are failures, graded here
    got, data = verdicts(out)
    names = [e.name for e in load_chapter("01_first_kernel")]
    assert sorted(got) == sorted((f"{s}/01_first_kernel", n) for s in ("alice", "bob") for n in names)
    assert sorted(data["ignored"]) == [f"{s}/07_staged_gemm/07_staged_gemm.ipynb: belongs to 07_staged_gemm, "
                                       f"not to --chapter 01_first_kernel" for s in ("alice", "bob")]


@pytest.mark.parametrize("chapter", ["01_first_kernel", "10_cublas"])
def test_one_case_one_verdict_whatever_came_first(tmp_path, chapter):
    """Item 2: an empty notebook gets the same verdicts graded before or after a complete one (for kernel
    and library-call exercises alike); only the complete one's exercises need a GPU."""
    nvrtc_or_skip()
    results = []
    for order in (("a_full", "b_empty"), ("a_empty", "b_full")):
        sub = tmp_path / "-".join(order) / "submitted"
        for student in order:
            if student.endswith("full"):
                submit(sub, student, chapter, SOURCE / chapter / f"{chapter}.ipynb")
            else:
                submit(sub, student, chapter, cells=[("code", "x = 1", [])])
        out = sub.parent / "r.json"
        r = grade("grade", sub, "--chapter", chapter, "--json", out)
        assert r.returncode == 3, r.stderr
        got, _ = verdicts(out)
        results.append({(s.split("/")[0].split("_")[1], ex): v for (s, ex), v in got.items()})
    assert results[0] == results[1]
    exercises = load_chapter(chapter)
    assert {results[0][("empty", e.name)] for e in exercises} == {"failed"}
    calls = {e.name for e in exercises if isinstance(e, CallExercise)}
    assert calls or chapter == "01_first_kernel"
    # the source notebook holds the solutions: each of its exercises compiles, so each needs a GPU here
    assert {results[0][("full", e.name)] for e in exercises} == {"needs a GPU"}


def test_compile_errors_are_reported_without_a_gpu(tmp_path):
    """Item 11: a kernel that does not compile is a compile error with NVRTC's message, from `grade`, from
    `grade-source` (what notebooks run) and from `preview` in a notebook's process, never "needs a GPU"."""
    nvrtc_or_skip()
    sub = tmp_path / "submitted"
    submit(sub, "carol", "01_first_kernel", cells=[("code", f"%%cuda --name saxpy --no-run\n{BROKEN}",
                                                    ["kernel:saxpy"])])
    submit(sub, "dave", "01_first_kernel", SOURCE / "01_first_kernel" / "01_first_kernel.ipynb")
    out = tmp_path / "r.json"
    r = grade("grade", sub, "--chapter", "01_first_kernel", "--json", out, "-v")
    assert r.returncode == 3 and "NVRTC could not compile saxpy" in r.stdout, r.stdout + r.stderr
    got, data = verdicts(out)
    assert got[("carol/01_first_kernel", "saxpy")] == "compile error"
    assert got[("dave/01_first_kernel", "saxpy")] == "needs a GPU"  # graded first, so no GPU was known
    carol = next(e for e in data["exercises"]
                 if e["submission"] == "carol/01_first_kernel" and e["exercise"] == "saxpy")
    assert "error" in carol["compile_log"] and "expected an expression" in carol["compile_log"]

    r = subprocess.run([sys.executable, "-m", "autograder", "grade-source", "--chapter", "01_first_kernel",
                        "--exercise", "saxpy"], input=json.dumps({"source": BROKEN}), capture_output=True,
                       text=True, env=no_gpu_env(), cwd=str(ROOT), timeout=300)
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "compile error", r.stdout + r.stderr

    code = f"import autograder; r = autograder.preview('01_first_kernel', 'saxpy', {BROKEN!r})"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=no_gpu_env(),
                       cwd=str(ROOT), timeout=300)
    assert "compile error" in r.stdout and "expected an expression" in r.stdout, r.stdout + r.stderr
    assert "needs a GPU" not in r.stdout
