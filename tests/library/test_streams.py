"""course.streams, the stream-pipeline engine of chapter 03 and of the grader's driver: pipeline arithmetic and
span statistics on the CPU, the driver's fixed rules, and (GPU) the recorder, the pipeline and its report."""
from __future__ import annotations

import numpy as np
import pytest

from repo_helpers import REPO, import_course

course = import_course()
import course.streams as pl  # noqa: E402

SOLUTION = REPO / "solutions" / "03_streams" / "process_chunk.cu"


def test_chunk_bounds_cover_exactly():
    """Do the chunks tile 0..n without gaps or overlap, the last one short, none empty?"""
    for n, c in ((10, 3), (1_000_003, 16), (5, 8), (1, 1)):
        b = pl.chunk_bounds(n, c)
        assert b[0][0] == 0 and all(cnt > 0 for _, cnt in b)
        assert all(o2 == o1 + c1 for (o1, c1), (o2, _) in zip(b, b[1:]))
        assert b[-1][0] + b[-1][1] == n and len(b) <= c
    assert pl.chunk_bounds(10, 3) == [(0, 4), (4, 4), (8, 2)]
    with pytest.raises(ValueError):
        pl.chunk_bounds(10, 0)


def test_ideal_and_serial_bounds():
    """Is the ideal pipeline h+k+d+(C-1)max, equal to the serial time for one chunk?"""
    assert pl.ideal_pipeline_ms(1.0, 0.5, 1.0, 1) == pl.serial_pipeline_ms(1.0, 0.5, 1.0, 1) == 2.5
    assert pl.ideal_pipeline_ms(1.0, 0.5, 1.0, 16) == pytest.approx(2.5 + 15)
    # a link slower with both directions busy sets the step; a faster `both` changes nothing
    assert pl.ideal_pipeline_ms(1.0, 0.5, 1.0, 16, both_ms=1.25) == pytest.approx(2.5 + 15 * 1.25)
    assert pl.ideal_pipeline_ms(1.0, 0.5, 1.0, 16, both_ms=0.9) == pytest.approx(2.5 + 15)
    with pytest.raises(ValueError):
        pl.ideal_pipeline_ms(1, 1, 1, 0)


def test_pipeline_schedule_meets_the_bounds():
    """Does the modeled schedule give the serial sum on one stream, the ideal bound once enough streams keep
    the slowest engine busy, keep each stream in order and never run one engine twice at once?"""
    h, k, d = 0.3, 0.2, 0.25
    one = pl.pipeline_schedule(h, k, d, 16, 1)
    assert max(s[3] for s in one) == pytest.approx(pl.serial_pipeline_ms(h, k, d, 16))
    four = pl.pipeline_schedule(h, k, d, 16, 4)
    assert len(four) == 48 and max(s[3] for s in four) == pytest.approx(pl.ideal_pipeline_ms(h, k, d, 16))
    two = pl.pipeline_schedule(h, k, d, 16, 2)   # two streams: a chunk waits for its stream's previous D2H
    assert pl.ideal_pipeline_ms(h, k, d, 16) < max(s[3] for s in two) < pl.serial_pipeline_ms(h, k, d, 16)
    for spans in (one, two, four):
        for label in ("H2D", "kernel", "D2H"):
            mine = sorted((s[2], s[3]) for s in spans if s[1] == label)
            assert all(e1 <= s2 + 1e-12 for (_, e1), (s2, _) in zip(mine, mine[1:])), label
        for lane in {s[0] for s in spans}:
            mine = [s for s in spans if s[0] == lane]
            assert all(a[3] <= b[2] + 1e-12 for a, b in zip(mine, mine[1:])), lane
    with pytest.raises(ValueError, match="at least 1"):
        pl.pipeline_schedule(h, k, d, 4, 0)


def test_union_counts_overlap_once():
    """Does the union of [0,2], [1,3], [5,6] measure 4?"""
    assert pl.union_ms([(5, 6), (0, 2), (1, 3)]) == 4
    assert pl.union_ms([]) == 0


def test_overlap_summary_of_a_perfect_pipeline():
    """For three chunks flowing through three engines with no gap, is the overlap work/total = 9/5?"""
    spans = []
    for c in range(3):
        for j, label in enumerate(("H2D", "kernel", "D2H")):
            spans.append((f"stream {c}", label, float(c + j), float(c + j + 1)))
    s = pl.overlap_summary(spans)
    assert s["total_ms"] == 5 and s["work_ms"] == 9 and s["overlap"] == pytest.approx(9 / 5)
    assert s["busy_ms"] == {"H2D": 3, "kernel": 3, "D2H": 3}
    assert pl.by_engine(spans)[0] == ("H2D", "H2D", 0.0, 1.0)


def test_offset_process_caps_the_grid():
    """Does the exercise-form adapter pass whole arrays with the chunk's offset, at most max_grid blocks?"""
    calls = []
    proc = pl.offset_process(lambda *a, **kw: calls.append((a, kw)), block=128, max_grid=4)
    proc("IN", "OUT", 40, 1000, "S")
    proc("IN", "OUT", 0, 1, "S")
    assert calls == [((4, 128, "IN", "OUT", 40, 1000), {"stream": "S"}), ((1, 128, "IN", "OUT", 0, 1), {"stream": "S"})]


def test_the_graders_driver_is_this_pipeline_with_the_exercise_fixed(monkeypatch):
    """Does drivers.pipeline call course.streams.pipeline_report with process_chunk's function and the
    grader's 1024-block rule, keeping the harness's call (kernel, streams, chunks, block, n, seed)?"""
    from drivers import pipeline as driver
    seen = {}
    monkeypatch.setattr(pl, "pipeline_report", lambda kernel, **kw: seen.update(kernel=kernel, **kw) or "report")
    assert driver.pipeline_report("K", streams=4, chunks=16, block=1, n=1 << 20, seed=7, reference="R",
                                  reference_block=256) == "report"
    assert seen["kernel"] == "K" and seen["max_grid"] == driver.MAX_GRID == 1024 and seen["serial_kernel"] == "R"
    assert seen["block"] == 1 and seen["serial_block"] == 256
    assert (seen["streams"], seen["chunks"], seen["block"], seen["n"], seen["seed"]) == (4, 16, 1, 1 << 20, 7)
    x = np.array([-2.0, 0.5, 3.0])
    assert np.array_equal(seen["expected"](x), x * (x * x - 0.5))
    from autograder import get_exercise
    assert get_exercise("03_streams", "process_chunk").pipeline.resolve_driver() is driver.pipeline_report


@pytest.fixture(scope="module")
def process():
    k = course.compile(SOLUTION.read_text()).kernel("process_chunk")
    return pl.offset_process(k)


@pytest.mark.gpu
def test_pipeline_is_correct_and_overlaps(process):
    """Is the pipelined output right, every op recorded, and the 4-stream run faster than 1 stream?"""
    n = (1 << 24) + 3
    bufs = pl.PipelineBuffers(n, seed=5)
    tl = pl.Timeline()
    pl.run_pipeline(process, bufs, n_streams=4, n_chunks=8, timeline=tl)
    x = bufs.h_in.astype(np.float64)
    np.testing.assert_allclose(bufs.h_out, x * (x * x - 0.5), rtol=1e-5, atol=1e-5)
    spans = tl.spans()
    assert len(spans) == 24 and all(t1 >= t0 >= 0 for _, _, t0, t1 in spans)
    one = min(pl.run_pipeline(process, bufs, n_streams=1, n_chunks=8) for _ in range(3))
    four = min(pl.run_pipeline(process, bufs, n_streams=4, n_chunks=8) for _ in range(3))
    assert four < one
    st = pl.stage_times(process, bufs, pl.chunk_bounds(n, 8)[0][1], duplex=True, budget_s=0.2)
    assert all(st[k] > 0 for k in ("h2d", "kernel", "d2h", "both"))


@pytest.mark.gpu
def test_buffers_check_fresh_inputs_and_poisoned_outputs(process):
    """Does `PipelineBuffers.check` pass a right run, fail a run that never happened after a refill (both
    outputs poisoned), and judge by the inputs drawn from the seed, not by a host input a kernel overwrote?"""
    n = (1 << 20) + 7
    bufs = pl.PipelineBuffers(n, seed=11)
    pl.run_pipeline(process, bufs, n_streams=2, n_chunks=4)
    expected = lambda x: x * (x * x - 0.5)  # noqa: E731
    assert bufs.check(expected)
    first = bufs.h_in.copy()
    bufs.h_in[:] = 0.0   # as a kernel writing through a mapped host pointer could
    assert bufs.check(expected), "the check must not read the input back from the buffers"
    bufs.fill(12)
    assert not np.array_equal(bufs.h_in, first)
    stale = bufs.check(expected)
    assert not stale and stale.n_bad == n and "never written" in stale.message
    pl.run_pipeline(process, bufs, n_streams=2, n_chunks=4)
    assert bufs.check(expected)


@pytest.mark.gpu
def test_pipeline_report_of_the_reference():
    """Does the exercise's reference kernel pass through the report's pipeline, overlapping below serial time,
    and does a wrong `expected` make the report say so?"""
    k = course.compile(SOLUTION.read_text()).kernel("process_chunk")
    r = pl.pipeline_report(k, expected=lambda x: x * (x * x - 0.5), streams=4, chunks=8, n=(1 << 24) + 5, repeats=2)
    assert r["correct"], r["message"]
    assert r["ratio"] < 1.0 and r["ideal_ms"] > 0 and len(r["spans"]) == 24
    wrong = pl.pipeline_report(k, expected=lambda x: x * x, streams=2, chunks=2, n=(1 << 20) + 1, repeats=1)
    assert not wrong["correct"] and "pipeline output" in wrong["message"]


def test_checked_runs_refill_check_every_run_and_stop_at_the_first_wrong():
    """Does `checked_runs` check the warm-up, refill from seed + 1, + 2, ... before each timed run, check each,
    and stop timing at the first wrong output (the one loop both pipeline drivers time with)?"""
    class Bufs:
        def __init__(self, wrong_at):
            self.seeds, self.checked, self.wrong_at = [], 0, wrong_at

        def fill(self, seed):
            self.seeds.append(seed)

        def check(self, expected, name):
            self.checked += 1
            return _Res(self.checked != self.wrong_at)

    class _Res:
        def __init__(self, ok):
            self.ok = ok

        def __bool__(self):
            return self.ok

    ok = Bufs(wrong_at=0)
    times, res = pl.checked_runs(lambda: 1.5, ok, None, seed=40, repeats=3)
    assert res and times == [1.5] * 3 and ok.seeds == [41, 42, 43] and ok.checked == 4
    bad = Bufs(wrong_at=2)            # the first timed run's output is wrong
    times, res = pl.checked_runs(lambda: 1.5, bad, None, seed=40, repeats=3)
    assert not res and times == [1.5] and bad.seeds == [41] and bad.checked == 2
    warm = Bufs(wrong_at=1)           # the warm-up is wrong: nothing is timed
    times, res = pl.checked_runs(lambda: 1.5, warm, None, seed=40, repeats=3)
    assert not res and times == [] and warm.seeds == []
