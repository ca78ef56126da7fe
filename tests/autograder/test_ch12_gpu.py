"""GPU tier for chapter 12's reference kernels, beyond what the grader's own sizes reach: the scalar paths on
views 4 to 12 bytes past a 16-byte boundary (the grader's arrays are always aligned), the histogram built for
a cluster of 2 with the matching LAUNCH key, and the histogram's counts identical over repeated launches.

Run on a GPU machine:  python -m pytest tests/autograder/test_ch12_gpu.py -m gpu -v -s
(the cluster_histogram tests need sm_90 and skip below it, saying so)
"""
import numpy as np
import pytest

from ag_helpers import ROOT, gpu_present
from autograder import get_exercise

pytestmark = pytest.mark.gpu
CH = "12_clusters"


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu():
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")


def _kernel(name, options=()):
    import course
    return course.compile((ROOT / "solutions" / CH / f"{name}.cu").read_text(), options=options).kernel(name)


@pytest.fixture(scope="module")
def sm90():
    import course
    info = course.device_info()
    if info.cc < (9, 0):
        pytest.skip(f"thread-block clusters need sm_90; this GPU is {info.arch}")


@pytest.mark.parametrize("cluster", [4, 2])
@pytest.mark.parametrize("offset", [0, 1, 3])
def test_cluster_histogram_exact_on_views(sm90, cluster, offset):
    """Are the counts exact, twice in a row, for data starting 0-3 values past a 16-byte boundary, with the
    default cluster of 4 and with CLUSTER=2 and LAUNCH {"cluster": 2}?"""
    import cupy
    ex = get_exercise(CH, "cluster_histogram")
    k = _kernel("cluster_histogram", options=(f"-DCLUSTER={cluster}",))
    cfg = {**ex.launch_defaults, "cluster": cluster}
    rng = np.random.default_rng(offset)
    for n in (1, 33, 4097, 32_769, 1_000_003, 5_000_011):
        host = ex.params[0].gen(rng, (n + offset,), np.uint32)
        d = cupy.asarray(host)[offset:]
        want = np.bincount(host[offset:], minlength=16384).astype(np.uint32)
        grid, block, _ = ex.launch({"n": n}, cfg)
        for run in range(2):
            h = cupy.zeros(16384, dtype=cupy.uint32)
            k(grid, block, d, h, n)
            got = h.get()
            assert np.array_equal(got, want), (n, offset, cluster, run, int((got != want).sum()))


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_tile_reduce_on_views(offset):
    """Is the sum within the grader's tolerance for x starting 0-3 floats past a 16-byte boundary (the scalar
    path), at sizes around the block's share and one of 2^24 + 1?"""
    import cupy
    ex = get_exercise(CH, "tile_reduce")
    k = _kernel("tile_reduce")
    rng = np.random.default_rng(offset)
    out = cupy.zeros(1, dtype=cupy.float32)
    for n in (1, 3, 4095, 4097, 1_000_003, (1 << 24) + 1):
        host = rng.random(n + offset, dtype=np.float32)
        x = cupy.asarray(host)[offset:]
        want = float(host[offset:].astype(np.float64).sum())
        grid, block, _ = ex.launch({"n": n}, ex.launch_defaults)
        out.fill(0)
        k(grid, block, x, out, n)
        got = float(out.get()[0])
        assert abs(got - want) <= ex.tolerance.rtol * want, (n, offset, got, want)
