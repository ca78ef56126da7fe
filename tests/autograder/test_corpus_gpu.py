"""GPU tier: every corpus submission gets the verdict its first line states; the reference passes the
speed check 20 times out of 20 and the 2x-slow kernel fails it 20 times out of 20.

Run on a GPU machine:  python -m pytest tests/autograder -m gpu -v -s
(AUTOGRADER_SPEED_TRIALS=N changes the 20.) Budget: a few minutes on an H100.
"""
import json
import os
import subprocess
import sys
import time

import pytest

from ag_corpus import CORPUS, ROOT, case_id, check_report, corpus_files, corpus_source, expectation, solution_cases
from autograder import SpeedResult, get_exercise, grade_path, speed_trials
from ag_helpers import gpu_count, gpu_present

pytestmark = pytest.mark.gpu
TRIALS = int(os.environ.get("AUTOGRADER_SPEED_TRIALS", "20"))
CASES = solution_cases() + corpus_files()


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu():
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")


@pytest.mark.parametrize("path", CASES, ids=case_id)
def test_corpus_verdict(path, tmp_path):
    t0 = time.monotonic()
    if path.suffix == ".mutant":   # graded as the .cu file it stands for, in its chapter's and exercise's folders
        written = tmp_path / path.parent.parent.name / path.parent.name / f"{path.stem}.cu"
        written.parent.mkdir(parents=True)
        written.write_text(corpus_source(path))
        path = written
    report = grade_path(path)
    assert len(report.exercises) == 1
    e = report.exercises[0]
    if e.chapter == "16_multi_gpu" and gpu_count() < 2:   # a ring exercise: graded on two or more GPUs only
        assert e.status == "skipped" and e.counted_max_points == 0 and "needs 2 GPUs" in e.reason, e.reason
        return
    problems = check_report(e, expectation(path))
    print(f"\n{case_id(path)}: {e.status} {e.points:g}/{e.max_points:g} in {time.monotonic() - t0:.1f} s; "
          f"{(e.reason.splitlines() or [''])[0][:160]}")
    if e.speed:
        print(f"  speed: ratio {e.speed.ratio:.3f} (student {e.speed.student_ms:.4f} ms, reference "
              f"{e.speed.reference_ms:.4f} ms, floor {e.speed.floor_ms}, rounds {e.speed.rounds})")
    assert not problems, "; ".join(problems) + "\n\n" + e.feedback()


def _trials(path):
    ch, ex = "01_first_kernel", "saxpy"
    results = speed_trials(ch, ex, path.read_text(), trials=TRIALS)
    bad = [r for r in results if not isinstance(r, SpeedResult)]
    assert not bad, bad
    return results


def test_reference_passes_speed_check_every_time():
    sol = ROOT / "solutions" / "01_first_kernel" / "saxpy.cu"
    results = _trials(sol)
    ratios = [round(r.ratio, 3) for r in results]
    print(f"\nreference vs reference, {TRIALS} trials: ratios {ratios}, rounds {[r.rounds for r in results]}")
    assert all(r.ratio >= r.threshold for r in results), ratios
    assert not any(r.impossible for r in results)


def test_slow_kernel_fails_speed_check_every_time():
    results = _trials(CORPUS / "01_first_kernel" / "saxpy" / "slow.cu")
    ratios = [round(r.ratio, 3) for r in results]
    print(f"\n2x-slow vs reference, {TRIALS} trials: ratios {ratios}")
    assert all(r.ratio < r.threshold for r in results), ratios


def test_chapter_reference_grades_within_60_s(tmp_path):
    """Does the CLI grade a chapter's reference solutions, full marks, exit 0, within 60 s (warm cache)?"""
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [sys.executable, "-m", "autograder", "grade", str(ROOT / "solutions" / "01_first_kernel"),
           "--json", str(out)]
    subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT))  # warms the compile cache
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT))
    elapsed = time.monotonic() - t0
    print(f"\n{r.stdout}\nchapter 01 reference graded in {elapsed:.1f} s")
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    total = sum(get_exercise("01_first_kernel", e["exercise"]).max_points for e in data["exercises"])
    assert data["points"] == total and total > 0
    assert elapsed <= 60
