"""GPU tier for chapter 11's graded side beyond the corpus: the reference kernels stay right where the
grader's arrays do not reach, rows and images starting 1 to 3 floats past a 16-byte boundary. The corpus
verdicts (references full marks, stubs zero, starters their correctness points or a technique failure) and
the speed ratios the spec is calibrated on come from tests/autograder/test_corpus_gpu.py -k 11_profiling -s.
"""
import numpy as np
import pytest

from ag_corpus import ROOT
from ag_helpers import gpu_present
from autograder import get_exercise

pytestmark = pytest.mark.gpu
CH = "11_profiling"


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu():
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")


def _kernel(name):
    import course
    return course.compile((ROOT / "solutions" / CH / f"{name}.cu").read_text()).kernel(name)


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_row_means_on_views(offset):
    """Are the means right for a matrix starting 0-3 floats past a 16-byte boundary (rows start at every
    alignment), at odd widths, one long row, and widths around the float4 step?"""
    import cupy
    ex = get_exercise(CH, "row_means")
    k = _kernel("row_means")
    rng = np.random.default_rng(offset)
    for rows, cols in ((1, 1), (3, 2), (1, 100_003), (1009, 37), (37, 1009), (5, 127), (5, 129), (300, 4099)):
        host = ex.params[0].gen(rng, (rows * cols + offset,), np.float32)
        x = cupy.asarray(host)[offset:]
        want = ex.reference({"inp": host[offset:].reshape(rows, cols), "cols": np.int32(cols)})["means"]
        out = cupy.full(rows, np.nan, dtype=cupy.float32)
        grid, block, _ = ex.launch({"rows": rows, "cols": cols}, ex.launch_defaults)
        k(grid, block, x, out, rows, cols)
        got = out.get()
        assert np.all(np.abs(got - want) <= ex.tolerance.rtol * np.abs(want)), (rows, cols, offset)


@pytest.mark.parametrize("offset", [0, 1, 3])
def test_median_on_views(offset):
    """Is the median bit for bit NumPy's for an image starting 0-3 floats past a 16-byte boundary, at edge
    shapes (a pixel, a row, a column, two rows, partial blocks)?"""
    import cupy
    ex = get_exercise(CH, "median3x3")
    k = _kernel("median3x3")
    rng = np.random.default_rng(offset)
    for h, w in ((1, 1), (1, 1000), (1009, 1), (2, 3), (37, 1009), (33, 2047)):
        host = rng.random(h * w + offset, dtype=np.float32)
        x = cupy.asarray(host)[offset:]
        want = ex.reference({"inp": host[offset:].reshape(h, w)})["out"]
        out = cupy.full(h * w, np.nan, dtype=cupy.float32)
        grid, block, _ = ex.launch({"height": h, "width": w}, {})
        k(grid, block, x, out, h, w)
        assert np.array_equal(out.get().view(np.uint32), want.ravel().view(np.uint32)), (h, w, offset)
