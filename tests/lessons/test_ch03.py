"""Chapter 03 helpers: pipeline arithmetic and span statistics on the CPU, the recorder on a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from repo_helpers import REPO, import_course


@pytest.fixture(scope="module")
def ch03():
    import_course()
    from course.lessons import ch03
    return ch03


def test_chunk_bounds_cover_exactly(ch03):
    """Do the chunks tile 0..n without gaps or overlap, the last one short, none empty?"""
    for n, c in ((10, 3), (1_000_003, 16), (5, 8), (1, 1)):
        b = ch03.chunk_bounds(n, c)
        assert b[0][0] == 0 and all(cnt > 0 for _, cnt in b)
        assert all(o2 == o1 + c1 for (o1, c1), (o2, _) in zip(b, b[1:]))
        assert b[-1][0] + b[-1][1] == n and len(b) <= c
    assert ch03.chunk_bounds(10, 3) == [(0, 4), (4, 4), (8, 2)]


def test_ideal_and_serial_bounds(ch03):
    """Is the ideal pipeline h+k+d+(C-1)max, equal to the serial time for one chunk?"""
    assert ch03.ideal_pipeline_ms(1.0, 0.5, 1.0, 1) == ch03.serial_pipeline_ms(1.0, 0.5, 1.0, 1) == 2.5
    assert ch03.ideal_pipeline_ms(1.0, 0.5, 1.0, 16) == pytest.approx(2.5 + 15)
    # a link slower with both directions busy sets the step; a faster `both` changes nothing
    assert ch03.ideal_pipeline_ms(1.0, 0.5, 1.0, 16, both_ms=1.25) == pytest.approx(2.5 + 15 * 1.25)
    assert ch03.ideal_pipeline_ms(1.0, 0.5, 1.0, 16, both_ms=0.9) == pytest.approx(2.5 + 15)
    with pytest.raises(ValueError):
        ch03.ideal_pipeline_ms(1, 1, 1, 0)


def test_union_counts_overlap_once(ch03):
    """Does the union of [0,2], [1,3], [5,6] measure 4?"""
    assert ch03.union_ms([(5, 6), (0, 2), (1, 3)]) == 4
    assert ch03.union_ms([]) == 0


def test_overlap_summary_of_a_perfect_pipeline(ch03):
    """For three chunks flowing through three engines with no gap, is the overlap work/total = 9/5?"""
    spans = []
    for c in range(3):
        for j, label in enumerate(("H2D", "kernel", "D2H")):
            spans.append((f"stream {c}", label, float(c + j), float(c + j + 1)))
    s = ch03.overlap_summary(spans)
    assert s["total_ms"] == 5 and s["work_ms"] == 9 and s["overlap"] == pytest.approx(9 / 5)
    assert s["busy_ms"] == {"H2D": 3, "kernel": 3, "D2H": 3}
    assert ch03.by_engine(spans)[0] == ("H2D", "H2D", 0.0, 1.0)


def test_demo_kernels_compile(ch03):
    """Do the demonstration kernels and the reference chunk kernel compile for sm_75..sm_90?"""
    course = import_course()
    ref = (REPO / "solutions" / "03_streams" / "process_chunk.cu").read_text()
    for src in (ch03.SPIN_SRC, ref):
        for arch in ("sm_75", "sm_80", "sm_90"):
            assert course.compile_for_arch(src, arch).cubin


@pytest.fixture(scope="module")
def process():
    course = import_course()
    k = course.compile((REPO / "solutions" / "03_streams" / "process_chunk.cu").read_text()).kernel("process_chunk")

    def run(d_in, d_out, off, cnt, stream):
        k(min(1024, -(-cnt // 256)), 256, d_in, d_out, off, cnt, stream=stream)
    return run


@pytest.mark.gpu
def test_pipeline_is_correct_and_overlaps(ch03, process):
    """Is the pipelined output right, every op recorded, and the 4-stream run faster than 1 stream?"""
    n = (1 << 24) + 3
    bufs = ch03.PipelineBuffers(n, seed=5)
    tl = ch03.Timeline()
    ch03.run_pipeline(process, bufs, n_streams=4, n_chunks=8, timeline=tl)
    x = bufs.h_in.astype(np.float64)
    np.testing.assert_allclose(bufs.h_out, x * (x * x - 0.5), rtol=1e-5, atol=1e-5)
    spans = tl.spans()
    assert len(spans) == 24 and all(t1 >= t0 >= 0 for _, _, t0, t1 in spans)
    one = min(ch03.run_pipeline(process, bufs, n_streams=1, n_chunks=8) for _ in range(3))
    four = min(ch03.run_pipeline(process, bufs, n_streams=4, n_chunks=8) for _ in range(3))
    assert four < one


@pytest.mark.gpu
def test_stream_demos(ch03):
    """Do blocking streams serialize around the default stream, non-blocking ones not, and events order work?"""
    course = import_course()
    m = course.compile(ch03.SPIN_SRC)
    blocking = ch03.default_stream_demo(m.kernel("spin"), non_blocking=False, ms=1.0)
    free = ch03.default_stream_demo(m.kernel("spin"), non_blocking=True, ms=1.0)
    span = lambda sp: max(s[3] for s in sp) - min(s[2] for s in sp)  # noqa: E731
    assert span(blocking) > 2.5 and span(free) < 2.0
    _spans, ok = ch03.dependency_demo(m.kernel("produce"), m.kernel("consume"), wait=True, ms=1.0)
    assert ok
    g = ch03.graph_vs_stream(m.kernel("bump"), launches=200, repeats=2)
    assert g["graph_us"] > 0 and g["stream_us"] > 0


@pytest.mark.gpu
def test_pipeline_report_of_the_reference(ch03):
    """Does the exercise's reference kernel pass through the report's pipeline, overlapping below serial time?"""
    course = import_course()
    k = course.compile((REPO / "solutions" / "03_streams" / "process_chunk.cu").read_text()).kernel("process_chunk")
    r = ch03.pipeline_report(k, streams=4, chunks=8, n=(1 << 24) + 5, repeats=2)
    assert r["correct"], r["message"]
    assert r["ratio"] < 1.0 and r["ideal_ms"] > 0 and len(r["spans"]) == 24
