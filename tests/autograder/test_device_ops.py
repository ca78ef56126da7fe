"""The grader's one-pass device operations (autograder/device_ops.py): their NumPy models in the CPU tier,
the CuPy kernels held to those models bit for bit, and the tolerance count held to `course.check`, in the
GPU tier.

Run the GPU part on a GPU machine:  python -m pytest tests/autograder/test_device_ops.py -m gpu -v
"""
import numpy as np
import pytest

import course
from autograder import device_ops as D


def borderline(n=4099, seed=7):
    """Expected and got arrays with elements exactly at, just inside and just outside course.check's
    tolerance, plus NaN, infinities and signed zeros in both."""
    rng = np.random.default_rng(seed)
    want = rng.uniform(-3, 3, n).astype(np.float32)
    rtol, scale = course.default_tolerance(np.float32)
    atol = scale * float(np.abs(want).max())
    lim = atol + rtol * np.abs(want.astype(np.float64))
    got = want.astype(np.float64) + lim * rng.choice([-1.0, 1.0], n) * rng.choice([0.5, 0.999999, 1.0, 1.000001, 2.0], n)
    got = got.astype(np.float32)
    got[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan, 1.0, np.inf]
    want[:8] = [np.nan, np.inf, np.inf, -0.0, 0.0, 1.0, np.nan, np.inf]
    return got, want


def test_count_bad_is_course_check():
    """Does the device rule's NumPy model count exactly the elements course.check calls wrong, for the
    default tolerance, explicit ones and zero (exact floats)?"""
    got, want = borderline()
    for rtol, atol in ((None, None), (1e-5, None), (1e-3, 1e-4), (0.0, 0.0)):
        res = course.check(got, want, rtol=rtol, atol=atol)
        assert D.count_bad(got, want, rtol, atol) == res.n_bad, (rtol, atol)
    assert 0 < course.check(got, want).n_bad < got.size  # the data straddles the boundary


def test_count_bad_integers_and_fallback():
    a = np.arange(10, dtype=np.int32)
    b = a.copy()
    b[3] = -1
    assert D.count_bad(a, b, None, None) == 1
    assert D.count_bad(a.view(np.uint8), a.view(np.uint8), None, None) == 0
    h = np.ones(4, dtype=np.float16)
    assert D.count_bad(h, h, None, None) is None  # no device rule: the caller checks on the host


def test_gather_takes_every_value_from_a_pool_and_differs_per_seed():
    a = np.arange(1000, 2000, dtype=np.float32)
    b = np.arange(5000, 6000, dtype=np.float32)
    out1, out2 = np.empty(100_003, np.float32), np.empty(100_003, np.float32)
    D.fresh_gather(out1, a, b, 1)
    D.fresh_gather(out2, a, b, 2)
    assert np.isin(out1, np.concatenate([a, b])).all()
    assert 0.4 < np.isin(out1, a).mean() < 0.6          # both pools used about equally
    assert len(np.unique(out1)) > 1900                   # nearly every pool value appears
    assert (out1 != out2).mean() > 0.99                  # a new seed: a new array


def test_xor_mask_twice_restores_and_hides():
    x = np.random.default_rng(1).uniform(size=12_345).astype(np.float32)
    y = x.copy()
    D.xor_mask(y, 99)
    assert (y.view(np.uint32) != x.view(np.uint32)).mean() > 0.99
    D.xor_mask(y, 99)
    assert np.array_equal(y.view(np.uint32), x.view(np.uint32))


def test_count_differ():
    a = np.zeros(7, dtype=np.float32)
    b = a.copy()
    b[2] = -0.0  # the same value, different bits
    assert D.count_differ(a, b) == 1 and D.count_differ(a, a) == 0


@pytest.mark.gpu
def test_kernels_match_their_models_on_the_gpu():
    """The CuPy kernels compute exactly what the NumPy models do: gather and mask bit for bit, the counts
    element for element, on awkward sizes and every element width."""
    cp = pytest.importorskip("cupy")
    for dtype in (np.uint8, np.uint16, np.float32, np.float64):
        a = (np.arange(777) * 3 % 251).astype(dtype)
        b = (np.arange(777) * 7 % 253).astype(dtype)
        host = np.empty(100_001, dtype)
        D.fresh_gather(host, a, b, 12345)
        dev = cp.empty(100_001, dtype)
        D.fresh_gather(dev, cp.asarray(a), cp.asarray(b), 12345)
        assert np.array_equal(host.view(np.uint8), dev.get().view(np.uint8)), dtype
        m_host = host.copy()
        D.xor_mask(m_host, 2**63 + 5)
        m_dev = cp.asarray(host)
        D.xor_mask(m_dev, 2**63 + 5)
        assert np.array_equal(m_host.view(np.uint8), m_dev.get().view(np.uint8)), dtype
    got, want = borderline(1 << 20, seed=3)
    g, w = cp.asarray(got), cp.asarray(want)
    for rtol, atol in ((None, None), (1e-5, None), (1e-3, 1e-4), (0.0, 0.0)):
        n = course.check(got, want, rtol=rtol, atol=atol).n_bad
        assert D.count_bad(g, w, rtol, atol) == n, (rtol, atol)
        g64, w64 = cp.asarray(got.astype(np.float64)), cp.asarray(want.astype(np.float64))
        assert D.count_bad(g64, w64, rtol, atol) == course.check(got.astype(np.float64), want.astype(np.float64),
                                                                      rtol=rtol, atol=atol).n_bad
    assert D.count_differ(g, w) == D.count_differ(got, want)


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_counting_kernels_compile(arch):
    """The counting kernels compile with NVRTC for every arch the course targets (no GPU needed)."""
    prog = course.compile_for_arch(D._COUNTS, arch, options=("--std=c++17",), name_expressions=D._COUNT_NAMES,
                                   use_cache=False)
    assert set(D._COUNT_NAMES) <= set(prog.lowered_names)
