"""Chapter 13's pictures on the CPU: the numbers each figure draws agree with the course's models (the TMA
swizzle, the bank model, wgmma's descriptor and accumulator layout, chapter 08's m16n8 fragment), the
pipeline model keeps its own rules, and every figure draws with the Agg backend."""
from __future__ import annotations

import numpy as np
import pytest

from repo_helpers import import_course


@pytest.fixture(scope="module")
def pics():
    import_course()
    import matplotlib
    matplotlib.use("Agg")
    from course.lessons import ch13_pictures
    return ch13_pictures


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt
    plt.close("all")


def _texts(fig) -> str:
    return "\n".join(t.get_text() for ax in fig.axes for t in ax.texts) + "\n".join(
        ax.get_title() for ax in fig.axes)


def test_core_matrices_descriptor_is_wgmma_descriptor(pics):
    """Are the fields the picture writes those of course.wgmma.descriptor (SBO 1024, LBO unused, 128B), and
    does each K step add 2?"""
    from course.wgmma import SWIZZLE_MODES, descriptor
    fig, info = pics.plot_core_matrices(address=2048)
    want = descriptor(2048, 16, 1024, "128B")
    assert info["descriptor"] == want
    assert info["fields"] == {"address": 2048 >> 4, "lbo": 1, "sbo": 1024 >> 4, "mode": SWIZZLE_MODES["128B"]}
    assert info["k_steps"] == [want + 2 * j for j in range(4)]
    text = _texts(fig)
    for line in (f"{want:#018x}", "address>>4 = 128", "LBO>>4 = 1", "SBO>>4 = 64", "mode = 1", "desc + 2"):
        assert line in text


def test_core_matrices_first_k_step_reads_two_chunks_per_row(pics):
    """Does K step 0 read logical chunks 0 and 1 of every row, where the swizzle put them (c ^ row % 8)?"""
    _fig, info = pics.plot_core_matrices(rows=64, k=64)
    read = info["read"]
    assert read.shape == (64, 8) and (read.sum(axis=1) == 2).all()
    for r in range(64):
        assert set(np.nonzero(read[r])[0]) == {0 ^ (r % 8), 1 ^ (r % 8)}


def test_core_matrices_refuses_what_is_not_one_swizzled_row(pics):
    with pytest.raises(ValueError, match="span"):
        pics.plot_core_matrices(k=32, swizzle="128B")
    with pytest.raises(ValueError, match="span"):
        pics.plot_core_matrices(swizzle="none")
    with pytest.raises(ValueError, match="1024-byte"):
        pics.plot_core_matrices(address=512)
    _fig, info = pics.plot_core_matrices(rows=16, k=32, swizzle="64B")
    assert info["fields"]["sbo"] == 512 >> 4 and info["fields"]["mode"] == 2


def test_descriptor_fields_invert_the_packing(pics):
    from course.wgmma import descriptor
    for addr, lbo, sbo, sw in ((0, 16, 1024, "128B"), (0x3FFF0, 0x3FFF0, 16, "32B"), (1024, 256, 512, "none")):
        f = pics.descriptor_fields(descriptor(addr, lbo, sbo, sw))
        assert (f["address"] << 4, f["lbo"] << 4, f["sbo"] << 4) == (addr, lbo, sbo)


@pytest.mark.parametrize("swizzle,plain", [("128B", 8), ("64B", 4), ("32B", 2)])
def test_swizzle_banks_conflict_degrees(pics, swizzle, plain):
    """Is a core matrix (one chunk of 8 rows) an 8-way conflict unswizzled with 128-byte rows (4-way, 2-way
    with narrower rows) and conflict-free swizzled, and does every chunk land exactly once?"""
    fig, info = pics.plot_swizzle_banks(swizzle)
    assert info["none"]["degree"] == plain and info[swizzle]["degree"] == 1
    for mode in ("none", swizzle):
        assert sorted(info[mode]["grid"].ravel()) == list(range(64))
    assert f"-> {plain}-way" in _texts(fig) and "-> 1-way" in _texts(fig)
    assert "chapter 05" in fig.get_suptitle().lower() and "chapter 08" in fig.get_suptitle().lower()


def test_swizzle_banks_grid_is_the_tma_swizzle(pics):
    """Is the 128B picture's line r, slot p the logical chunk p ^ r (course.tma.swizzled), and the plain one
    the identity?"""
    _fig, info = pics.plot_swizzle_banks("128B")
    r, p = np.indices((8, 8))
    assert (info["128B"]["grid"] == r * 8 + (p ^ r)).all()
    assert (info["none"]["grid"] == r * 8 + p).all()


@pytest.mark.parametrize("n", [8, 64, 256])
def test_accumulator_covers_every_element_once(pics, n):
    """Does the picture give each (row, col) of 64 x n exactly one (thread, register), warp w on rows
    16w..16w+15, and every register of every thread once?"""
    _fig, owner = pics.plot_accumulator(n)
    assert owner.shape == (64, n, 2) and (owner >= 0).all()
    flat = owner[..., 0] * (n // 2) + owner[..., 1]
    assert sorted(flat.ravel()) == list(range(128 * n // 2))
    assert (owner[..., 0] // 32 == np.arange(64)[:, None] // 16).all()


def test_accumulator_is_mma_sync_m16n8_repeated(pics):
    """Is each warp's band chapter 08's m16n8k16 C fragment (lane.slot), column block j using registers
    4j..4j+3?"""
    import_course()
    from course.lessons.ch08 import fragment_map
    _fig, owner = pics.plot_accumulator(64)
    c = fragment_map("C")
    for w in range(4):
        for j in range(8):
            block = owner[16 * w:16 * w + 16, 8 * j:8 * j + 8]
            assert ((block[..., 0] - 32 * w) * 8 + block[..., 1] - 4 * j == c).all()


def test_one_stage_serializes_load_and_mma(pics):
    sched = pics.pipeline_schedule(10, 1, 1.0, 0.5)
    assert sched[-1][3] == pytest.approx(10 * 1.5)


@pytest.mark.parametrize("load,mma,stages", [(1.0, 0.4, 4), (1.0, 0.4, 20), (0.3, 1.0, 2), (2.0, 0.5, 5)])
def test_enough_stages_starve_the_tensor_cores_only_once(pics, load, mma, stages):
    """With stages >= 1 + load / mma, does the loop take one load and then k steps back to back?"""
    assert stages >= 1 + load / mma
    sched = pics.pipeline_schedule(12, stages, load, mma)
    assert sched[-1][3] == pytest.approx(load + 12 * mma)


def test_steady_state_is_bound_by_the_slower_side(pics):
    """Too few slots: does each tile settle at (load + mma) / stages; with copy time the bandwidth's pace?"""
    def per_tile(**kw):
        a, b = (pics.pipeline_schedule(k, **kw)[-1][3] for k in (120, 240))
        return (b - a) / 120
    assert per_tile(stages=2, load_us=3.0, mma_us=1.0) == pytest.approx(2.0)
    assert per_tile(stages=3, load_us=3.0, mma_us=1.0) == pytest.approx(4 / 3)
    assert per_tile(stages=8, load_us=1.0, mma_us=0.2, copy_us=0.5) == pytest.approx(0.5)
    sched = pics.pipeline_schedule(10, 16, 1.0, 0.2, copy_us=0.5)
    assert sched[-1][3] == pytest.approx(1.0 + 9 * 0.5 + 0.2)


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_schedule_keeps_its_rules(pics, stages):
    """Is every load issued in order and into a slot the consumers released, and every step after its load and
    the previous step?"""
    sched = pics.pipeline_schedule(17, stages, 1.3, 0.45, consumers=2, copy_us=0.2)
    for i, (l0, l1, m0, m1) in enumerate(sched):
        assert l1 >= l0 + 1.3 - 1e-12 and m1 == pytest.approx(m0 + 0.45)
        assert m0 == pytest.approx(max(l1, sched[i - 1][3] if i else 0.0))
        if i:
            assert l0 >= sched[i - 1][0] and l1 >= sched[i - 1][1] + 0.2 - 1e-12
        if i >= stages:
            assert l0 >= sched[i - stages][3] - 1e-12
    with pytest.raises(ValueError):
        pics.pipeline_schedule(4, 0, 1.0, 1.0)


@pytest.mark.parametrize("stages", [1, 3, 4])
def test_pipeline_plot_writes_the_parity(pics, stages):
    """Does each span say its tile and the parity (i // stages) % 2, flipping every `stages` tiles, on one row
    per slot and one per consumer?"""
    fig, sched = pics.plot_pipeline(stages=stages, k_tiles=10, consumers=2)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels == [f"{i}\np{(i // stages) % 2}" for i in range(10)] * 3
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"slot {s}" for s in range(stages)] + [
        "consumer wg 0", "consumer wg 1"]
    assert len(sched) == 10 and f"{sched[-1][3]:.1f} µs" in ax.get_title()
