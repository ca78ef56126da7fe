"""Chapter 14's pictures on the CPU: the online softmax equals the two-pass safe softmax, the overflow table
overflows where FP32 does, the traffic model keeps its byte counts, the tile schedule agrees with an
element-by-element causal mask, and every figure draws, with the Agg backend, the numbers of its model."""
from __future__ import annotations

import numpy as np
import pytest

from repo_helpers import import_course


@pytest.fixture(scope="module")
def pics():
    import_course()
    import matplotlib
    matplotlib.use("Agg")
    from course.lessons import ch14_pictures
    return ch14_pictures


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


def _safe_softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def _texts(fig) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts) + "\n".join(
        ax.get_title() for ax in fig.axes)


@pytest.mark.parametrize("block", [1, 3, 7, 16, 64, 100])
@pytest.mark.parametrize("scale", [1.0, 1000.0])
def test_online_softmax_is_the_safe_softmax(pics, block, scale):
    """One pass, ``block`` scores at a time (1, uneven, the whole row, more than the row), with scores that
    would overflow a naive exp: is exp(x - m) / l the two-pass softmax, and o / l its product with V?"""
    rng = np.random.default_rng(block)
    for _ in range(5):
        x, v = rng.normal(size=64) * scale, rng.normal(size=(64, 8))
        steps, m, l = pics.online_softmax_steps(x, block, v)
        assert m == x.max()
        np.testing.assert_allclose(np.exp(x - m) / l, _safe_softmax(x), rtol=0, atol=1e-12)
        np.testing.assert_allclose(steps["o"][-1] / l, _safe_softmax(x) @ v, rtol=0, atol=1e-12)
        assert len(steps["m"]) == len(steps["ends"]) == -(-64 // block) and steps["ends"][-1] == 64


@pytest.mark.parametrize("block", [1, 4, 10])
def test_running_state_after_every_block(pics, block):
    """After each block, is m the max so far and l the sum of exp(x - m) so far, and is the factor exactly 1
    where the max did not grow, below 1 where it did, and 0 for the first block?"""
    rng = np.random.default_rng(7)
    x = rng.normal(size=40) + np.linspace(0, 3, 40)      # a rising row, so the max grows more than once
    steps, _m, _l = pics.online_softmax_steps(x, block)
    assert (steps["ends"] == np.minimum(np.arange(1, len(steps["ends"]) + 1) * block, 40)).all()
    for k, end in enumerate(steps["ends"]):
        assert steps["m"][k] == x[:end].max()
        assert steps["l"][k] == pytest.approx(np.exp(x[:end] - x[:end].max()).sum(), rel=1e-13)
    grew = steps["grew"]
    assert grew[0] and steps["factor"][0] == 0.0 and grew[1:].any() and not grew.all()
    assert (steps["factor"][~grew] == 1.0).all() and (steps["factor"][1:][grew[1:]] < 1.0).all()
    assert (grew[1:] == (steps["m"][1:] > steps["m"][:-1])).all()


def test_online_softmax_refuses_what_it_cannot_model(pics):
    for x, block in (([], 4), ([[1.0, 2.0]], 1), ([1.0, 2.0], 0), ([1.0, np.inf], 1)):
        with pytest.raises(ValueError):
            pics.online_softmax_steps(x, block)


def test_online_softmax_plot_marks_each_rescale(pics):
    """Does the picture carry the model's steps, one 'old l x factor' label per block after the first where the
    max grew, and the final m and l in its title?"""
    x = np.array([0.5, 1.0, 0.2, 3.0, 2.0, 2.5, -1.0, 4.0, 0.0, 0.1])
    fig, steps = pics.plot_online_softmax(x, 3)
    want, m, l = pics.online_softmax_steps(x, 3)
    for key in ("m", "l", "factor", "grew", "ends"):
        assert (steps[key] == want[key]).all()
    labels = [t.get_text() for t in fig.axes[1].texts]
    grown = [f"old l x {f:.3g}" for f, g in zip(want["factor"][1:], want["grew"][1:]) if g]
    assert labels == grown and len(grown) == 2          # the max grows in blocks 2 (3.0) and 3 (4.0)
    assert "grew 2 time(s)" in _texts(fig) and f"exp(x - {m:.3g}) / {l:.4g}" in _texts(fig)


def test_overflow_table_shows_why_the_max_is_subtracted(pics):
    """Does the naive FP32 softmax of [1000, 1001, 1002] (and already [100, ...]) give inf / nan while the max
    subtracted gives the same finite answer as [1, 2, 3]?"""
    rows = pics.overflow_table()
    by_scores = {tuple(r["scores"]): r for r in rows if isinstance(r["scores"], list)}
    want = [round(float(p), 4) for p in _safe_softmax(np.array([1.0, 2.0, 3.0], np.float32))]
    big = by_scores[(1000, 1001, 1002)]
    assert big["exp(max x)"] == np.inf and np.isnan(big["naive"]).all() and "nan" in big["note"]
    assert np.isnan(by_scores[(100, 101, 102)]["naive"]).all()
    for row in by_scores.values():
        assert row["format"] == "FP32" and np.isfinite(row["max subtracted"]).all()
        assert row["max subtracted"] == pytest.approx(want, abs=1e-4)
    assert by_scores[(1, 2, 3)]["naive"] == pytest.approx(want, abs=1e-4)
    assert by_scores[(80, 81, 82)]["naive"] == pytest.approx(want, abs=1e-4)


def test_overflow_table_limits(pics):
    """Is the largest x with a finite exp 88.72 in FP32, the same in BF16 (same 8-bit exponent), 11.09 in FP16,
    and does FP32's exp really overflow just past it?"""
    limits = {r["format"]: r for r in pics.overflow_table() if not isinstance(r["scores"], list)}
    fp32, bf16, fp16 = (limits[f]["scores"] for f in ("FP32", "BF16", "FP16"))
    assert fp32 == pytest.approx(88.7228, abs=1e-4) and fp16 == pytest.approx(11.09, abs=0.01)
    assert abs(bf16 - fp32) < 0.01 and bf16 < fp32
    assert "same" in limits["BF16"]["note"] and "8 exponent bits" in limits["BF16"]["note"]
    with np.errstate(over="ignore"):
        assert np.isfinite(np.exp(np.float32(fp32 - 1e-4))) and np.exp(np.float32(fp32 + 1e-3)) == np.inf
        assert np.exp(np.float16(fp16 + 0.01)) == np.inf


def test_traffic_small_case_by_hand(pics):
    """n = 256 and n = 200, one head of d = 64, BF16, blocks of 128 rows: the byte counts worked out by hand."""
    t = pics.attention_traffic(256, bh=1, d=64, br=128)
    # naive: Q, K, V 3 x 256*64*2 = 98304; S, P written and read 4 x 256^2*4 = 1048576; O 256*64*4 = 65536
    # fused: Q 32768, K and V twice each (2 query blocks) 4 x 32768 = 131072, O 65536
    assert (t["naive"], t["flash"], t["s_bytes"]) == (1212416, 229376, 262144)
    assert t["ratio"] == pytest.approx(1212416 / 229376) and np.ndim(t["naive"]) == 0
    t = pics.attention_traffic(200, bh=3, d=64, br=128)     # ceil(200 / 128) = 2 query blocks
    assert (t["naive"], t["flash"], t["s_bytes"]) == (3 * 768000, 3 * 179200, 3 * 160000)
    assert pics.attention_traffic(256, elem=4, bh=1, d=64)["flash"] == 65536 + 4 * 65536 + 65536


def test_traffic_grows_as_n_squared(pics):
    """For n a multiple of br: naive = 16 n^2 + O(n) per head and the fused bound 2 n^2 d elem / br + O(n), so
    does the ratio tend to 8 br / (d elem) (4 with d = 128 BF16, 8 with d = 64)?"""
    ns = 2 ** np.arange(10, 25)
    t = pics.attention_traffic(ns)
    assert t["naive"].shape == ns.shape
    assert t["naive"][-1] / t["naive"][-2] == pytest.approx(4, rel=1e-5)
    assert t["flash"][-1] / t["flash"][-2] == pytest.approx(4, rel=1e-4)
    assert t["ratio"][-1] == pytest.approx(4, rel=1e-3)
    assert pics.attention_traffic(2 ** 24, d=64)["ratio"] == pytest.approx(8, rel=1e-3)
    assert (np.diff(t["ratio"]) > 0).all() and (t["naive"] > t["flash"]).all()


def test_traffic_plot_marks_where_s_stops_fitting(pics):
    """Does the plot draw the model's curves and put the largest n whose FP32 S fits 80 GB and 141 GB where
    it is?"""
    ns = 2.0 ** np.arange(9, 18)
    fig, info = pics.plot_traffic(ns)
    t = pics.attention_traffic(ns)
    for key in ("naive", "flash", "s_bytes"):
        assert (info[key] == t[key]).all()
    drawn = [line.get_ydata() for line in fig.axes[0].lines[:3]]
    for got, key in zip(drawn, ("naive", "flash", "s_bytes")):
        np.testing.assert_allclose(got, t[key] / 1e9)
    for gpu, gb in (("H100", 80), ("H200", 141)):
        n = info["fits"][gpu]
        assert 64 * 4 * n * n <= gb * 1e9 < 64 * 4 * (n + 1) ** 2
        assert f"{gpu}: {gb} GB, S fits up to n = {n}" in _texts(fig)
    assert info["fits"]["H100"] == 17677


def test_tile_schedule_by_hand(pics):
    """n = 200 in blocks of 64: 4 x 4 tiles; the last key tile holds keys 192..255, and 200.. do not exist."""
    grid, counts, fraction = pics.tile_schedule(200, 64, 64, causal=True)
    assert grid.tolist() == [[2, 0, 0, 0], [1, 2, 0, 0], [1, 1, 2, 0], [1, 1, 1, 2]]
    assert counts == {"skipped": 6, "full": 6, "masked": 4} and fraction == 10 / 16
    grid, counts, fraction = pics.tile_schedule(200, 64, 64, causal=False)
    assert grid.tolist() == [[1, 1, 1, 2]] * 4
    assert counts == {"skipped": 0, "full": 12, "masked": 4} and fraction == 1.0
    grid, _counts, _fraction = pics.tile_schedule(256, 128, 64, causal=True)
    assert grid.tolist() == [[2, 2, 0, 0], [1, 1, 2, 2]]      # a 128-row block crosses two 64-key tiles


def _elementwise(n, br, bc, causal):
    """The schedule from the mask itself: a tile is skipped if every (query < n, key) pair in it is hidden,
    masked if some are, full if none."""
    grid = np.zeros((-(-n // br), -(-n // bc)), int)
    for i, j in np.ndindex(grid.shape):
        q = np.arange(i * br, min(n, i * br + br))[:, None]
        k = np.arange(j * bc, j * bc + bc)[None, :]
        hidden = (k >= n) | ((k > q) & causal)
        grid[i, j] = 0 if hidden.all() else 2 if hidden.any() else 1
    return grid


@pytest.mark.parametrize("n,br,bc", [(200, 64, 64), (256, 128, 64), (300, 64, 128), (129, 128, 64),
                                     (1000, 128, 64), (64, 128, 64), (7, 2, 3)])
@pytest.mark.parametrize("causal", [True, False])
def test_tile_schedule_is_the_elementwise_mask(pics, n, br, bc, causal):
    """Is every tile's code what the element-wise mask says, with no skipped tile without causality?"""
    grid, counts, fraction = pics.tile_schedule(n, br, bc, causal)
    assert (grid == _elementwise(n, br, bc, causal)).all()
    assert sum(counts.values()) == grid.size and fraction == (grid > 0).mean()
    if not causal:
        assert counts["skipped"] == 0 and (grid[:, :-1] == 1).all()


def test_causal_work_tends_to_one_half(pics):
    """With 64 dividing 128 dividing n, does a causal pass run (Q + 1) / (2 Q) of the tiles (Q = n / 128),
    falling toward one half?"""
    fractions = []
    for n in 2 ** np.arange(8, 17):
        q = n // 128
        fractions.append(pics.tile_schedule(int(n), 128, 64, causal=True)[2])
        assert fractions[-1] == pytest.approx((q + 1) / (2 * q))
    assert (np.diff(fractions) < 0).all() and fractions[-1] == pytest.approx(0.5, abs=0.002)
    with pytest.raises(ValueError):
        pics.tile_schedule(0, 128, 64, True)


@pytest.mark.parametrize("causal", [True, False])
def test_tiles_plot_draws_the_schedule(pics, causal):
    """Is the coloured grid the schedule, the legend its counts, the diagonal drawn and the title its fraction?"""
    fig, info = pics.plot_tiles(1000, 128, 64, causal)
    grid, counts, fraction = pics.tile_schedule(1000, 128, 64, causal)
    ax = fig.axes[0]
    assert (info["grid"] == grid).all() and info["counts"] == counts and info["fraction"] == fraction
    assert (np.asarray(ax.images[0].get_array()) == grid).all()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [f"{kind} ({counts[kind]})" for kind in ("skipped", "full", "masked")] + ["key = query"]
    assert any(list(line.get_xdata()) == [0, 1000] == list(line.get_ydata()) for line in ax.lines)
    assert f"({fraction:.0%})" in ax.get_title() and ("causal" in ax.get_title()) == causal
