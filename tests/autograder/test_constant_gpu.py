"""GPU tier: a `Constant` param (chapter 09's conv_const reads its taps from `__constant__ float w[1024]`).

The grader fills the symbol of the student's module and of the reference's before every run: the solution
gets full marks, a kernel that declares the array but ignores it fails, one without the declaration is told
what to declare before anything runs.

Run on a GPU machine:  python -m pytest tests/autograder/test_constant_gpu.py -m gpu -v -s
"""
import pytest

from ag_helpers import ROOT, gpu_present
from autograder import Status, get_exercise, grade_source

pytestmark = pytest.mark.gpu
CH, EX = "09_convolution", "conv_const"
SOLUTION = (ROOT / "solutions" / CH / "conv_const.cu").read_text()


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu():
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")


def grade(source):
    r = grade_source(CH, EX, source)
    print(f"\n{r.status} {r.points:g}/{r.max_points:g}\n{r.feedback()}")
    return r


def test_solution_gets_full_marks():
    """Are the taps copied into the student's (and the reference's) __constant__ w before the runs?"""
    r = grade(SOLUTION)
    assert r.points == get_exercise(CH, EX).max_points, r.feedback()


def test_kernel_ignoring_the_constant_taps_fails():
    """A kernel that declares w but reads a hard-coded zero tap must fail (the grader's taps are random)."""
    src = SOLUTION.replace("acc = fmaf(xi[j], w[j], acc);", "acc = fmaf(xi[j], 0.0f * w[0], acc);")
    assert src != SOLUTION
    r = grade(src)
    assert r.points == 0 and r.status == Status.FAILED, r.feedback()
    assert "wrong output" in r.feedback()


def test_kernel_with_the_taps_from_a_second_symbol_fails():
    """Taps read from another __constant__ array (never filled: zeros) are wrong too."""
    src = SOLUTION.replace("__constant__ float w[MAX_TAPS];",
                           "__constant__ float w[MAX_TAPS];\n__constant__ float w2[MAX_TAPS];")
    src = src.replace("acc = fmaf(xi[j], w[j], acc);", "acc = fmaf(xi[j], w2[j], acc);")
    r = grade(src)
    assert r.points == 0 and r.status == Status.FAILED, r.feedback()


def test_missing_declaration_gets_the_teacherly_reason():
    """Without `__constant__ float w[...]` the kernel is refused before compiling, saying what to declare."""
    src = SOLUTION.replace("__constant__ float w[MAX_TAPS];", "__device__ float taps[MAX_TAPS];")
    src = src.replace("w[j]", "taps[j]")
    r = grade(src)
    assert r.points == 0 and r.status == Status.COMPILE_ERROR, r.feedback()
    assert "__constant__ float w[1024]" in r.reason and "file scope" in r.reason
