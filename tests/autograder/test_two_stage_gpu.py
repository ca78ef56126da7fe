"""GPU tier of chapter 03's ``two_stage``: the reference schedule gets full marks, a missing wait fails with the
race shown in the output of the held-back run, one stream gets the correctness points only, and the corpus
of schedules gets the verdicts its first lines state, with the real driver and kernels.

Run on a GPU machine:  python -m pytest tests/autograder/test_two_stage_gpu.py -m gpu -v -s
"""
import pytest

from ag_helpers import ROOT, gpu_present
from ag_corpus import check_report, parse_expect
from test_two_stage import CH, NAME, NO_EVENT, ONE_STREAM, REF, REFERENCE, corpus_cases, schedule, text

from autograder import Status, grade_source
from course import schedule as sched
from drivers import two_stage

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu():
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")


def test_reference_schedule_full_marks():
    r = grade_source(CH, NAME, REFERENCE)
    print(f"\nreference: {r.status} {r.points:g}/{r.max_points:g}; "
          + (r.pipeline.summary() if r.pipeline else r.reason))
    assert r.status == Status.PASSED and r.points == r.max_points == 8, r.feedback()


def test_one_stream_gets_correctness_points_only():
    r = grade_source(CH, NAME, text(ONE_STREAM))
    print(f"\none stream: {r.status} {r.points:g}; " + (r.pipeline.summary() if r.pipeline else r.reason))
    assert r.status == Status.SLOW and r.points == 4, r.feedback()


def test_missing_wait_fails_and_the_held_back_run_shows_the_race():
    r = grade_source(CH, NAME, text(NO_EVENT))
    assert r.status == Status.FAILED and r.points == 0, r.feedback()
    failed = [s for s in r.sizes if s.status == Status.FAILED]
    assert failed and all("the output shows the race" in s.message for s in failed), r.feedback()


def in_subprocess(code: str):
    """Run ``code`` (which prints one JSON value last) in a fresh Python, so this test process never
    initializes CUDA itself (as ag_helpers.gpu_present); its printed value."""
    import json
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# each kind of unordered read: the driver's held-back run must show it in the output, every time
UNORDERED = {
    "previous produce -> consume": NO_EVENT,
    "produce -> consume, same chunk": schedule(stream={"h2d": [0, 1], "produce": [0, 1], "consume": [1, 0],
                                                       "d2h": [1, 0]}),
    "h2d -> produce": schedule(stream={"h2d": 0, "produce": 1, "consume": 1, "d2h": 1}),
    "consume -> d2h": schedule(stream={"h2d": 0, "produce": 0, "consume": 0, "d2h": 1}),
}


@pytest.mark.parametrize("which", UNORDERED)
def test_held_back_producer_exposes_each_unordered_read(which):
    s = UNORDERED[which]
    assert two_stage.check_schedule(NAME, s) == "" and sched.missing_dependencies(s, s["chunks"])
    outs = in_subprocess(
        "import json\nfrom drivers import two_stage\n"
        f"print(json.dumps([two_stage.grade_case('{NAME}', {s!r}, {{'n': 1_000_003}}, seed) for seed in range(3)]))")
    for out in outs:
        assert out["status"] == "failed" and "the output shows the race" in out["message"], out["message"]


@pytest.mark.parametrize("stage", sched.STAGES[:3])
def test_an_ordered_schedule_stays_right_whatever_is_held_back(stage):
    """Holding a producer back must not change an ordered schedule's output: the waits absorb it."""
    bad = in_subprocess(
        "import json\nfrom drivers import two_stage\n"
        "bufs, bad = two_stage._Buffers(1_000_003), []\n"
        "for chunk in (0, 1, 5):\n"
        "    bufs.fill(chunk)\n"
        f"    two_stage.run_schedule({REF!r}, bufs, hold=({stage!r}, chunk))\n"
        "    res = two_stage._check(bufs)\n"
        "    bad += [] if res else [f'chunk {chunk}: {res.message}']\n"
        "print(json.dumps(bad))")
    assert bad == [], f"{stage} held back: {bad}"


@pytest.mark.parametrize("path", corpus_cases(), ids=lambda p: p.stem)
def test_corpus_verdict_on_the_gpu(path):
    r = grade_source(CH, NAME, path.read_text())
    problems = check_report(r, parse_expect(path))
    assert not problems, "; ".join(problems) + "\n\n" + r.feedback()
