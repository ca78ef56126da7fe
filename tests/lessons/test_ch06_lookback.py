"""Chapter 06, the single-pass scan: the CPU model of decoupled look-back (schedule, warp window, butterfly),
the facts the lesson reads off its example, the timeline figure, and (GPU) the lesson's window and
hand-off kernels against the model."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from repo_helpers import REPO, import_course, read_json_notebook

STEM = "06_building_blocks"


@pytest.fixture(scope="module")
def lb():
    import_course()
    from course.lessons import ch06_lookback
    return ch06_lookback


def test_butterfly_gives_every_lane_the_total(lb):
    """Does the __shfl_xor_sync butterfly end with the total in every lane, in log2(lanes) rounds, and refuse
    a lane count that is not a power of two?"""
    for n in (1, 2, 8, 32):
        v = np.arange(1, n + 1)
        rounds = lb.butterfly(v)
        assert len(rounds) == n.bit_length() and (rounds[-1] == v.sum()).all()
    with pytest.raises(ValueError, match="power-of-two"):
        lb.butterfly(np.ones(6))


def test_window_matches_a_lane_by_lane_reading(lb):
    """For every 6-lane flag pattern, are the ballots, the nearest P, the ready test and the sum what a
    lane-by-lane reading of the rules gives (add the values up to the nearest P, once all of them are
    published)?"""
    values = np.array([3, 5, 7, 11, 13, 17, 19, 23], dtype=np.float32)
    for flags in itertools.product((0, 1, 2), repeat=6):
        flags = (*flags, 1, 1)                               # 8 lanes: a power of two
        w = lb.window(flags, values)
        stop = flags.index(2) if 2 in flags else 7
        assert w["stop"] == stop
        assert w["ready"] == sum(1 << i for i, f in enumerate(flags) if f)
        assert w["prefix"] == sum(1 << i for i, f in enumerate(flags) if f == 2)
        assert w["go"] == all(f for f in flags[:stop + 1])
        assert w["part"] == values[:stop + 1].sum()
    assert lb.window("AXAP", values[:4]) == lb.window((1, 0, 1, 2), values[:4])


def _check_schedule(sim, totals, resident):
    """The invariants of a played schedule; returns nothing, fails with the first one broken."""
    n = len(totals)
    assert list(sim.start) == sorted(sim.start), "tiles must start in ticket order"
    for t in range(max(sim.p_at) + 1):                     # never more blocks than resident ones
        assert sum(s <= t < p for s, p in zip(sim.start, sim.p_at)) <= resident, t
    for k in range(1, n):
        assert sim.start[k] < sim.a_at[k] < sim.p_at[k]
        reads = [r for r in sim.reads if r[1] == k]
        assert reads and reads[0][0] == sim.a_at[k] and reads[-1][4].startswith("P at tile")
        assert sim.stopped_at[k] == int(reads[-1][4].split()[-1])
        for t, _k, tiles, flags, what in reads:             # each read saw what had been published by then
            for j, f in zip(tiles, flags):
                if j >= 0:
                    want = 2 if sim.p_at[j] <= t else 1 if sim.a_at[j] is not None and sim.a_at[j] <= t else 0
                    assert f == want, (k, t, j)
            stop = flags.index(2) if 2 in flags else len(flags) - 1
            assert (what == "wait") == (0 in flags[:stop + 1])


@pytest.mark.parametrize("resident,lanes", [(1, 1), (2, 4), (6, 4), (12, 2), (5, 32)])
def test_simulated_prefixes_are_the_scan(lb, resident, lanes):
    """With integer totals, do several schedules (resident blocks, lanes, scan times) all publish the exact
    inclusive scan, start tiles in ticket order, keep at most `resident` blocks, and read flags as published?"""
    totals = np.arange(3, 23)
    for steps in (lb.EXAMPLE_STEPS + (1,) * 8, tuple(range(20, 0, -1)), (2,) * 20):
        sim = lb.simulate(totals, steps=steps, resident=resident, lanes=lanes)
        assert np.array_equal(sim.prefix, np.cumsum(totals))
        _check_schedule(sim, totals, resident)
    with pytest.raises(ValueError, match="power-of-two"):
        lb.simulate(totals, steps=(2,) * 20, lanes=3)


def test_the_example_says_what_the_lesson_reads_off_it(lb):
    """Does the lesson's example (12 tiles, totals t + 1) show what its text says: tiles 0-5 start together;
    tile 0 takes five steps while tiles 1-5 publish A and look back; all of 1-5 publish P one step after
    tile 0, each ending at tile 0's P; tile 5 reads again at step 3 (tiles 4 and 2 at X), adds a full
    window of four aggregates at step 4, reads again at step 5 and ends at tile 0's P at step 6; tiles 6 and
    7 end at tile 5's P on their first read?"""
    sim = lb.simulate(np.arange(1, 13))
    assert sim.start[:6] == [0] * 6 and min(sim.start[6:]) > 0 and lb.EXAMPLE_STEPS[0] == 5
    assert all(sim.a_at[k] < sim.p_at[0] for k in range(1, 6))
    assert all(sim.p_at[k] == sim.p_at[0] + 1 and sim.stopped_at[k] == 0 for k in range(1, 6))
    five = [(t, dict(zip(tiles, flags)), what) for t, k, tiles, flags, what in sim.reads if k == 5]
    assert [(t, what) for t, _f, what in five] == [(3, "wait"), (4, "no P: next window"), (5, "wait"),
                                                    (6, "P at tile 0")]
    assert five[0][1][4] == five[0][1][2] == 0 and set(five[1][1].values()) == {1}
    for k in (6, 7):
        first = next(r for r in sim.reads if r[1] == k)
        assert first[4] == "P at tile 5", (k, first)
    lines = lb.walk(sim, 5)
    assert "read again" in lines[1] and "next window" in lines[2] and lines[-1].split("= ")[-1].startswith("21")
    with pytest.raises(ValueError, match="tile 0 has no look-back"):
        lb.walk(sim, 0)


def test_float_prefixes_depend_on_the_schedule(lb):
    """Is the lesson's demonstration real: the same float32 totals give prefixes that differ in the last bits
    under the two schedules (each stopping at a different P), close to the float64 scan, while integer
    totals give identical bits?"""
    totals = np.random.default_rng(4).random(12, dtype=np.float32) * 100
    a, b = lb.simulate(totals), lb.simulate(totals, steps=(2,) * 12)
    differ = np.flatnonzero(a.prefix != b.prefix)
    assert len(differ) and all(a.stopped_at[k] != b.stopped_at[k] for k in differ)
    exact = np.cumsum(totals.astype(np.float64))
    assert np.allclose(a.prefix, exact, rtol=1e-6) and np.allclose(b.prefix, exact, rtol=1e-6)
    ints = np.arange(1, 13, dtype=np.float32)
    assert np.array_equal(lb.simulate(ints).prefix, lb.simulate(ints, steps=(2,) * 12).prefix)


def test_timeline_figure(lb):
    """Does the timeline draw three phases per tile, a cross per wait, rings for the focus tile's reads, and
    put its legend below the axes, inside the figure?"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    sim = lb.simulate(np.arange(1, 13))
    ax = lb.plot_timeline(sim, focus=5)
    assert len(ax.patches) == 3 * 12
    waits = sum(1 for r in sim.reads if r[4] == "wait")
    assert sum(1 for line in ax.get_lines() if line.get_marker() == "x") == waits
    assert "tile 5" in ax.get_title()
    fig = ax.figure
    fig.canvas.draw()
    box = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    assert not box.overlaps(ax.get_window_extent()) and fig.bbox.contains(box.x0, box.y0)
    plt.close(fig)


def test_the_notebook_uses_the_intrinsics_it_teaches():
    """Does the lesson teach (a `%%cuda` cell that uses it) each intrinsic the 06 exercise needs, before the
    exercises section?"""
    course = import_course()
    cells = read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")["cells"]
    text = ["".join(c["source"]) for c in cells]
    exercises = next(i for i, t in enumerate(text) if "## 6. Exercises" in t)
    kernels = "\n".join(t for t in text[:exercises] if t.startswith("%%cuda"))
    for name in ("__threadfence", "__ldcg", "__ballot_sync", "__ffs", "__shfl_xor_sync", "__launch_bounds__",
                 "memory_order_release", "memory_order_acquire"):
        assert name in kernels, f"no lesson kernel before the exercises uses {name}"
    assert {"lookback_window", "handoff_fence", "handoff_atomic"} <= set(course.lesson_cells(STEM))


# --- GPU ---------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_lookback_window_kernel_matches_the_model(lb):
    """Does the lesson's lookback_window kernel compute the model's ballots, nearest P and butterfly sum (in
    every lane) on random 32-lane windows?"""
    import cupy
    course = import_course()
    k = course.lesson_cell(STEM, "lookback_window").kernel("lookback_window")
    rng = np.random.default_rng(7)
    for _ in range(50):
        flags = rng.choice(3, 32, p=[0.1, 0.8, 0.1]).astype(np.uint32)
        vals = rng.integers(-9, 10, 32).astype(np.float32)
        masks, sums = cupy.zeros(3, dtype=cupy.uint32), cupy.zeros(32, dtype=cupy.float32)
        k(1, 32, cupy.asarray(flags), cupy.asarray(vals), masks, sums)
        w = lb.window(flags, vals)
        assert masks.get().tolist() == [w["ready"], w["prefix"], w["stop"]]
        assert (sums.get() == w["part"]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["handoff_fence", "handoff_atomic"])
def test_handoff_kernels_deliver(name):
    """Do both hand-off kernels deliver every value from the writing block to the reading one?"""
    import cupy
    course = import_course()
    k = course.lesson_cell(STEM, name).kernel(name)
    box, got = cupy.zeros(1, dtype=cupy.float32), cupy.zeros(1, dtype=cupy.float32)
    flag, ticket = cupy.zeros(1, dtype=cupy.uint32), cupy.zeros(1, dtype=cupy.uint32)
    for i in range(500):
        flag.fill(0)
        ticket.fill(0)
        got.fill(-1)
        k(2, 32, box, flag, ticket, got, float(i))
        assert float(got.get()[0]) == i, (name, i)
