"""Chapter 14's online_softmax exercise on the CPU: a float32 model of a warp-per-row online softmax, on the
spec's own draws, stays well inside the tolerance with expf and with __expf (even at four times __expf's
error), while a row that loses one element from its sum fails; and the scores overflow a softmax that does not
subtract the max at a small public size, as the corpus's no_max.cu states.

The model rounds as a kernel does: float32 differences, exps, products and sums; 32 lanes each with a running
(max, sum) over c = lane, lane + 32, ..., merged by an xor butterfly, then exp(x - m) x (1 / l). __expf is
ex2 of the float32 product (x - m) log2(e), with uniform noise of up to `ulps` ulp for MUFU.EX2 and flushed
denormals. On a GPU: tests/autograder/test_corpus_gpu.py -k 14_flash_attention -s.
"""
import numpy as np
import pytest

from ag_corpus import CORPUS, parse_expect
from autograder import get_exercise, sample_inputs
from course import check

F32 = np.float32
LOG2E = F32(np.log2(np.e))
CASES = [(1009, 3), (37, 31), (509, 1024), (33, 2047), (33, 2049)]


@pytest.fixture(scope="module")
def ex():
    return get_exercise("14_flash_attention", "online_softmax")


def fast_exp(ulps, rng):
    def exp(d):
        t = (d.astype(F32) * LOG2E).astype(F32)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            e = np.exp2(t.astype(np.float64)) * (1 + rng.uniform(-1, 1, t.shape) * ulps * 2.0 ** -23)
        e = e.astype(F32)
        e[np.abs(e) < np.finfo(F32).tiny] = 0                    # ftz
        return e
    return exp


def accurate_exp(d):
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        return np.exp(d.astype(np.float64)).astype(F32)          # correctly rounded; expf is within 2 ulp


def warp_softmax(x, exp, drop_last=False):
    """The model kernel; ``drop_last`` leaves each row's last element out of the max and the sum."""
    rows, cols = x.shape
    pad = -(-cols // 32) * 32
    xp = np.full((rows, pad), -np.inf, F32)
    xp[:, :cols] = x
    if drop_last:
        xp[:, cols - 1] = -np.inf
    lanes = xp.reshape(rows, pad // 32, 32)                      # [row, step, lane]
    m, l = np.full((rows, 32), -np.inf, F32), np.zeros((rows, 32), F32)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(lanes.shape[1]):
            v = lanes[:, k, :]
            seen, up = np.isfinite(v), np.isfinite(v) & (v > m)
            l_up = l * exp(np.where(up, m - v, 0).astype(F32)) + F32(1)
            l_add = l + exp(np.where(seen & ~up, v - m, -np.inf).astype(F32))
            l = np.where(up, l_up, np.where(seen, l_add, l)).astype(F32)
            m = np.where(up, v, m).astype(F32)
        for o in (16, 8, 4, 2, 1):
            partner = np.arange(32) ^ o
            m2, l2 = m[:, partner], l[:, partner]
            mx = np.maximum(m, m2)
            ok = mx > -np.inf                                    # two empty lanes stay (-inf, 0)
            a, b = exp(np.where(ok, m - mx, 0).astype(F32)), exp(np.where(ok, m2 - mx, 0).astype(F32))
            l = np.where(ok, l * a + l2 * b, l).astype(F32)
            m = np.where(ok, mx, m).astype(F32)
    return (exp((x - m[:, :1]).astype(F32)) * (F32(1) / l[:, :1])).astype(F32)


def share_used(ex, y, want):
    """The largest error as a share of what the tolerance allows there (1.0: at the edge)."""
    w = want.astype(np.float64)
    atol = 1e-5 * np.abs(w).max()                                # Tolerance(rtol) with atol=None: the dtype's
    return float((np.abs(y.astype(np.float64) - w) / (atol + ex.tolerance.rtol * np.abs(w))).max())


@pytest.mark.parametrize("rows,cols", CASES)
def test_expf_and_fast_exp_stay_well_inside_the_tolerance(ex, rows, cols):
    assert ex.tolerance.rtol == 1e-5 and ex.tolerance.atol is None, "the shares below were worked out for these"
    v = sample_inputs(ex, {"rows": rows, "cols": cols}, seed=rows + cols)
    want = ex.reference(v)["y"]
    rng = np.random.default_rng(cols)
    for name, exp, most in (("expf", accurate_exp, 0.05), ("__expf", fast_exp(2, rng), 0.15),
                            ("__expf at 8 ulp", fast_exp(8, rng), 0.5)):
        y = warp_softmax(v["x"], exp)
        assert check(y, want, rtol=ex.tolerance.rtol, name="y"), name
        assert share_used(ex, y, want) < most, (name, share_used(ex, y, want))


def test_an_element_left_out_of_the_sum_fails(ex):
    """A kernel that loses one float of every row (a tail it forgot) fails at 33 x 2047, though the tolerance
    is loose enough for __expf: the shifted sum is off by ~e^-2 / 2047 = 7e-5 of itself."""
    v = sample_inputs(ex, {"rows": 33, "cols": 2047}, seed=1)
    y = warp_softmax(v["x"], accurate_exp, drop_last=True)
    assert not check(y, ex.reference(v)["y"], rtol=ex.tolerance.rtol, name="y")


def test_scores_overflow_a_softmax_without_the_max(ex):
    """At 509 x 1024 (a small public case) the scores reach past expf's limit of 88.7, so exp(x) / sum exp(x)
    comes out NaN there, the verdict corpus no_max.cu states."""
    assert (509, 1024) in {(c["rows"], c["cols"]) for c in ex.sizes}
    for seed in range(5):
        x = sample_inputs(ex, {"rows": 509, "cols": 1024}, seed=seed)["x"]
        assert x.max() > 88.73
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(x)                                        # float32, as expf
            y = (e / e.sum(axis=1, keepdims=True, dtype=F32)).astype(F32)
        assert not check(y, ex.reference({"x": x})["y"], rtol=ex.tolerance.rtol, name="y")
    assert parse_expect(CORPUS / "14_flash_attention" / "online_softmax" / "no_max.cu")["reason~"] == "values wrong"
