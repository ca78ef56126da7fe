"""GPU tier: chapter 03's pipeline points on a real GPU. The reference (4 streams, 16 chunks) gets 8/8; the
same kernel on one stream with one chunk gets the 4 correctness points and no pipeline points.

Run on a GPU machine:  python -m pytest tests/autograder/test_pipeline_gpu.py -m gpu -v -s
AUTOGRADER_PIPELINE_SWEEP=1 also grades a few other (streams, chunks) choices and prints their ratios, to
check the thresholds in autograder/specs/03_streams.py against this GPU (a few minutes more).
"""
import os
import time

import pytest

from ag_helpers import ROOT, gpu_present
from autograder import Status, get_exercise, grade_source

pytestmark = pytest.mark.gpu
CH, EX = "03_streams", "process_chunk"
SOLUTION = (ROOT / "solutions" / CH / "process_chunk.cu").read_text()
REF_LAUNCH = '{"block": 256, "streams": 4, "chunks": 16}'


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu():
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")


def with_launch(streams, chunks):
    assert REF_LAUNCH in SOLUTION
    return SOLUTION.replace(REF_LAUNCH, f'{{"block": 256, "streams": {streams}, "chunks": {chunks}}}')


def grade(source):
    t0 = time.monotonic()
    r = grade_source(CH, EX, source)
    p = r.pipeline
    print(f"\n{r.status} {r.points:g}/{r.max_points:g} in {time.monotonic() - t0:.1f} s on {r.device}")
    if p is not None:
        print(f"  pipeline {p.streams} streams x {p.chunks} chunks: {p.total_ms:.3f} ms / {p.serial_ms:.3f} ms "
              f"= {p.ratio:.3f} (ideal {p.ideal_ms:.3f} ms -> {p.total_ms / p.ideal_ms:.3f} x ideal; rounds "
              f"{p.rounds}); reference {p.reference_streams} x {p.reference_chunks}: {p.reference_ratio:.3f}")
    return r


def test_reference_gets_8_of_8():
    r = grade(SOLUTION)
    assert (r.status, r.points, r.max_points) == (Status.PASSED, 8, 8), r.feedback()
    assert (r.pipeline.streams, r.pipeline.chunks) == (4, 16)
    assert r.pipeline.ratio <= r.pipeline.full_at and r.pipeline.spans


def test_one_stream_one_chunk_gets_correctness_points_only():
    r = grade(with_launch(1, 1))
    assert (r.status, r.points) == (Status.SLOW, 4), r.feedback()
    assert [s.status for s in r.sizes] == [Status.PASSED] * len(r.sizes)
    assert r.pipeline.ratio > r.pipeline.half_at, r.feedback()
    assert "more than one stream" in r.reason


SWEEP = [(1, 16), (2, 2), (2, 4), (2, 8), (4, 8), (8, 16), (4, 32), (4, 64)]


@pytest.mark.skipif(not os.environ.get("AUTOGRADER_PIPELINE_SWEEP"), reason="set AUTOGRADER_PIPELINE_SWEEP=1")
@pytest.mark.parametrize("streams,chunks", SWEEP, ids=[f"{s}x{c}" for s, c in SWEEP])
def test_threshold_sweep(streams, chunks):
    """Not a verdict: prints the ratio and points of other choices, to confirm full_at / half_at."""
    pl = get_exercise(CH, EX).pipeline
    r = grade(with_launch(streams, chunks))
    assert r.status in Status.CORRECT, r.feedback()
    print(f"  {streams} x {chunks}: ratio {r.pipeline.ratio:.3f} -> {r.points:g} points "
          f"(full <= {pl.full_at}, half <= {pl.half_at})")
