"""Comparing outputs with references."""
import numpy as np
import pytest

from course import CheckError, assert_close, check, default_tolerance


def test_pass_and_fail_float32():
    """Does a float32 result within tolerance pass, and one wrong element fail with its index?"""
    ref = np.linspace(0, 1, 1000, dtype=np.float32)
    assert check(ref + 1e-7, ref)
    bad = ref.copy()
    bad[123] += 0.5
    r = check(bad, ref, name="y")
    assert not r and r.n_bad == 1
    assert "at [123]" in r.message and "yours" in r.message and "expected" in r.message
    assert "0.1%" in r.message


def test_nan_never_passes_and_hints_unwritten():
    """Is a NaN where the reference is finite a failure, with a hint about unwritten elements?"""
    ref = np.ones(10, np.float32)
    out = ref.copy()
    out[-3:] = np.nan
    r = check(out, ref)
    assert not r and r.n_bad == 3
    assert "never written" in r.message


def test_nan_positions_must_match():
    """Do matching NaN/Inf positions pass and a finite value where the reference has NaN fail?"""
    ref = np.array([1.0, np.nan, np.inf, -np.inf])
    assert check(ref.copy(), ref)
    out = ref.copy()
    out[1] = 0.0
    assert not check(out, ref)
    out = ref.copy()
    out[2] = -np.inf
    assert not check(out, ref)


def test_scale_aware_atol():
    """Is the absolute term scaled by the reference's magnitude?"""
    ref = np.full(4, 1e6, np.float32)
    ref[0] = 0.0
    out = ref.copy()
    out[0] = 5.0  # 5 off zero: tiny next to 1e6 entries, but would fail an absolute 1e-5
    assert check(out, ref)
    assert not check(out, ref, atol=1e-5)


def test_integers_exact():
    """Are integer outputs compared exactly?"""
    ref = np.arange(10, dtype=np.int32)
    out = ref.copy()
    out[4] += 1
    r = check(out, ref)
    assert not r and "at [4]" in r.message
    assert default_tolerance(np.int32) == (0.0, 0.0)


def test_shape_mismatch_and_2d_indices():
    """Is a shape mismatch reported, and are 2-D indices shown as [row, col]?"""
    assert "shape" in check(np.zeros(3), np.zeros(4)).message
    ref = np.zeros((4, 5), np.float32)
    out = ref.copy()
    out[2, 3] = 1
    assert "at [2, 3]" in check(out, ref).message


def test_assert_close_raises_with_message():
    """Does assert_close raise CheckError carrying the same message?"""
    with pytest.raises(CheckError, match="1 of 3"):
        assert_close(np.array([1.0, 2, 4]), np.array([1.0, 2, 3]))


def _tricky_pairs():
    """(out, ref, kwargs) pairs at the edges of the rule: NaN and Inf placement, values just inside and just
    outside the tolerance, integers, a shape mismatch."""
    rng = np.random.default_rng(3)
    ref = rng.uniform(-2, 2, 100_003).astype(np.float32)
    rtol, atol = default_tolerance(np.float32)
    atol *= float(np.abs(ref).max())
    edge = (atol + rtol * np.abs(ref.astype(np.float64)))
    inside = (ref.astype(np.float64) + edge * 0.999).astype(np.float32)
    outside = ref.copy()
    outside[[5, 77, 100_002]] = (ref[[5, 77, 100_002]].astype(np.float64) + 3 * edge[[5, 77, 100_002]]).astype(np.float32)
    nan_ref, nan_out = ref.copy(), ref.copy()
    nan_ref[[1, 9]] = np.nan
    nan_out[[1, 9]] = np.nan
    moved = nan_out.copy()
    moved[9], moved[10] = ref[9], np.nan
    inf_ref = ref.copy()
    inf_ref[4] = np.inf
    wrong_sign = inf_ref.copy()
    wrong_sign[4] = -np.inf
    ints = np.arange(1000, dtype=np.int32)
    ints_bad = ints.copy()
    ints_bad[999] += 1
    return [(ref, ref, {}), (inside, ref, {}), (outside, ref, {}), (nan_out, nan_ref, {}), (moved, nan_ref, {}),
            (inf_ref, inf_ref, {}), (wrong_sign, inf_ref, {}), (ints, ints, {}), (ints_bad, ints, {}),
            (ref[:-1], ref, {}), (ref.astype(np.float64), ref.astype(np.float64), {"rtol": 0.0, "atol": 0.0}),
            (outside.astype(np.float64), ref.astype(np.float64), {"rtol": 1e-6}),
            # the corners: empty, 0-d, booleans, unsigned, half precision, a 2-D mismatch
            (ref[:0], ref[:0], {}), (np.float32(1.5).reshape(()), np.float32(1.5).reshape(()), {}),
            (np.float32(np.nan).reshape(()), np.float32(1.0).reshape(()), {}),
            (ref > 0, ref > 0, {}), (ref > 0, ref >= 0.5, {}), (ints.astype(np.uint8), ints_bad.astype(np.uint8), {}),
            (ref.astype(np.float16), inside.astype(np.float16), {}), (ref.astype(np.float16), outside.astype(np.float16), {}),
            (ref[:100_000].reshape(400, 250), outside[:100_000].reshape(400, 250), {})]


@pytest.mark.gpu
def test_device_check_agrees_with_the_host_check():
    """Do CuPy inputs (checked on the GPU) give the host check's verdict, counts, errors and message?"""
    import cupy
    for i, (out, ref, kw) in enumerate(_tricky_pairs()):
        host = check(out, ref, **kw)
        dev = check(cupy.asarray(out), cupy.asarray(ref), **kw)
        assert (bool(dev), dev.n_bad, dev.n_total, dev.message) == (bool(host), host.n_bad, host.n_total,
                                                                    host.message), f"pair {i}"
        # repr: a NaN in first_bad equals no other NaN
        assert repr((dev.max_abs_err, dev.max_rel_err, dev.first_bad)) == repr(
            (host.max_abs_err, host.max_rel_err, host.first_bad)), f"pair {i}"
