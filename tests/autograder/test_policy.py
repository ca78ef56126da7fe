"""Scoring rules with fake results: tiers, re-measuring inside the noise band, impossible speed,
timeouts and the skip policy. Each test fails if the rule it names is broken."""
import itertools

import pytest

from autograder import Status, get_exercise, policy
from autograder.report import SizeResult, SpeedResult

SAXPY = get_exercise("01_first_kernel", "saxpy")      # 6 + 4 points, threshold 0.8, no partial tier
GRAY = get_exercise("01_first_kernel", "rgb_to_gray")  # 6 + 4 points, threshold 0.8, (0.5, half)


def passed_sizes(n=5):
    return [SizeResult({"n": i}, Status.PASSED) for i in range(n)]


def speed(ratio, impossible=False, floor=None):
    return SpeedResult(student_ms=1.0 / ratio, reference_ms=1.0, student_iqr_ms=0.01, reference_iqr_ms=0.01,
                       ratio=ratio, threshold=0.8, rounds=1, floor_ms=floor, impossible=impossible)


# -- tiers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio,fraction", [(1.2, 1.0), (0.8, 1.0), (0.79, 0.5), (0.5, 0.5), (0.49, 0.0)])
def test_speed_fraction_takes_the_best_tier_met(ratio, fraction):
    assert policy.speed_fraction(ratio, GRAY.tiers) == fraction


def test_tiers_are_built_from_threshold_and_partial_tiers():
    assert GRAY.tiers == [(0.8, 1.0), (0.5, 0.5)]
    assert SAXPY.tiers == [(0.8, 1.0)]


# -- scoring -------------------------------------------------------------------------------------

def test_correct_and_fast_gets_all_points():
    r = policy.score(SAXPY, passed_sizes(), speed(0.95))
    assert (r.status, r.points, r.max_points) == (Status.PASSED, 10, 10)


def test_correct_but_slow_gets_correctness_points_and_a_reason_with_both_times():
    r = policy.score(SAXPY, passed_sizes(), speed(0.5))
    assert (r.status, r.points) == (Status.SLOW, 6)
    assert "2.0000 ms" in r.reason and "1.0000 ms" in r.reason and "0.50x" in r.reason and "0.80x" in r.reason


def test_partial_speed_tier():
    r = policy.score(GRAY, passed_sizes(4), speed(0.6))
    assert (r.status, r.points) == (Status.SLOW, 8)
    assert "50% of the speed points" in r.reason


def test_one_failing_size_gives_zero_and_names_the_size():
    sizes = passed_sizes()
    sizes[3] = SizeResult({"n": 1000003}, Status.FAILED, "y: 3 of 1000003 values wrong")
    r = policy.score(SAXPY, sizes, speed(1.0))
    assert (r.status, r.points) == (Status.FAILED, 0)
    assert "n=1000003" in r.reason and "values wrong" in r.reason
    assert r.speed is None  # no speed credit, and no speed shown, for a wrong kernel


def test_worst_status_wins():
    sizes = passed_sizes()
    sizes[1] = SizeResult({"n": 2}, Status.FAILED, "wrong")
    sizes[2] = SizeResult({"n": 33}, Status.CRASHED, "illegal address")
    assert policy.score(SAXPY, sizes).status == Status.CRASHED
    sizes[4] = SizeResult({"n": 9}, Status.TIMED_OUT, "timed out")
    assert policy.score(SAXPY, sizes).status == Status.TIMED_OUT


def test_not_run_sizes_do_not_count_as_passing():
    sizes = [SizeResult({"n": 1}, Status.NOT_RUN)] * 5
    r = policy.score(SAXPY, sizes, speed(1.0))
    assert r.points == 0 and r.status != Status.PASSED


def test_wrong_while_timed_loses_correctness_points_too():
    r = policy.score(SAXPY, passed_sizes(), None,
                     timing_failure=SizeResult({"n": 99}, Status.FAILED, "timed run 12: y wrong"))
    assert (r.status, r.points) == (Status.FAILED, 0)
    assert "while being timed" in r.reason


def test_impossible_speed_is_flagged_with_zero_speed_points():
    r = policy.score(SAXPY, passed_sizes(), speed(5.0, impossible=True, floor=0.6))
    assert (r.status, r.points) == (Status.FLAGGED, 6)
    assert "faster than this GPU" in r.reason


def test_compile_failure():
    r = policy.score(SAXPY, [], compile_failure=(Status.COMPILE_ERROR, "kernel.cu(3): error"))
    assert (r.status, r.points) == (Status.COMPILE_ERROR, 0) and "kernel.cu(3)" in r.reason


def test_missing_speed_is_a_grader_error_not_full_marks():
    r = policy.score(SAXPY, passed_sizes(), None)
    assert r.status == Status.ERROR and r.points == 6


def test_skip_policy_excludes_points_from_total():
    r = policy.skipped_report(SAXPY.__class__(**{**SAXPY.__dict__, "min_cc": (8, 0)}), "sm_75")
    assert r.status == Status.SKIPPED and r.points == 0 and r.counted_max_points == 0 and r.max_points == 10
    assert "skipped: needs sm_80 (this GPU is sm_75)" in r.reason


# -- noise band and re-measuring -----------------------------------------------------------------

def scripted(rounds):
    """A measure() that returns the given (student, reference) sample lists, one pair per call."""
    it = iter(rounds)
    calls = []

    def measure():
        calls.append(1)
        return next(it)
    return measure, calls


def noisy(center, spread, n=20):
    return [center * (1 + spread * ((i % 5) - 2) / 2) for i in range(n)]


def test_clear_verdicts_need_one_round():
    m, calls = scripted([(noisy(1.0, 0.01), noisy(1.0, 0.01))])
    d = policy.decide_speed(m, SAXPY.tiers)
    assert len(calls) == 1 and d.fraction == 1.0 and d.settled
    m, calls = scripted([(noisy(2.0, 0.01), noisy(1.0, 0.01))])
    d = policy.decide_speed(m, SAXPY.tiers)
    assert len(calls) == 1 and d.fraction == 0.0 and d.ratio == pytest.approx(0.5)


def test_ratio_inside_the_noise_band_is_remeasured():
    """A ratio of 0.81 with 10% noise is not a verdict: the grader must measure again."""
    first = (noisy(1 / 0.81, 0.2), noisy(1.0, 0.2))
    quiet = (noisy(1 / 0.81, 0.001, 200), noisy(1.0, 0.001, 200))
    m, calls = scripted([first, quiet])
    d = policy.decide_speed(m, SAXPY.tiers)
    assert len(calls) == 2 and d.settled and d.fraction == 1.0


def test_remeasuring_stops_after_max_rounds_on_pooled_medians():
    m, calls = scripted(itertools.repeat((noisy(1 / 0.79, 0.3), noisy(1.0, 0.3))))
    d = policy.decide_speed(m, SAXPY.tiers)
    assert len(calls) == policy.MAX_ROUNDS and not d.settled
    assert d.samples == 20 * policy.MAX_ROUNDS and d.fraction == 0.0


def test_noise_band_has_a_floor_and_grows_with_iqr():
    assert policy.noise_band([1.0] * 10, [1.0] * 10) == policy.MIN_BAND
    assert policy.noise_band(noisy(1.0, 0.2), noisy(1.0, 0.2)) > policy.noise_band(noisy(1.0, 0.02), noisy(1.0, 0.02))


def test_near_boundary():
    assert policy.near_boundary(0.81, 0.05, SAXPY.tiers) == 0.8
    assert policy.near_boundary(0.9, 0.05, SAXPY.tiers) is None
    assert policy.near_boundary(0.52, 0.05, GRAY.tiers) == 0.5


# -- impossible speed and timeouts ---------------------------------------------------------------

def test_floor_from_bytes_and_bandwidth():
    assert policy.floor_ms(3e9, None, 3000.0, None) == pytest.approx(1.0)
    assert policy.floor_ms(None, 2e12, None, 100.0) == pytest.approx(20.0)
    assert policy.floor_ms(3e9, 2e12, 3000.0, 100.0) == pytest.approx(20.0)
    assert policy.floor_ms(None, None, 3000.0, None) is None


def test_impossible_only_well_below_the_floor():
    assert policy.is_impossible(0.5, 1.0)
    assert not policy.is_impossible(0.9, 1.0)  # a kernel may beat a memcpy a little
    assert not policy.is_impossible(0.5, None)
    assert not policy.is_impossible(0.5, 1.0, reference_ms=0.5)  # the ceiling is off, not the student


def test_timeout_is_max_of_floor_and_50x_reference():
    assert policy.timeout_for(10, 0.001) == 10
    assert policy.timeout_for(10, 1.0) == 50
    assert policy.timeout_for(10, None) == 10


def test_feedback_wraps_prose_but_not_source_or_printf():
    """Does feedback wrap long prose at 100 columns (feedback pages do not wrap) and leave numbered
    source, compiler log and the student's printf as they are?"""
    from autograder.report import ExerciseReport
    prose = "your kernel " * 30
    src = ">  12 |     y[i] = a * x[i] + y[i];" + " " * 90 + "// long line"
    r = ExerciseReport(chapter="01_first_kernel", exercise="saxpy", status="failed", points=0, max_points=10,
                       reason=prose + "\n" + src, printf="p" * 150)
    lines = r.feedback().split("\n")
    assert src in lines and "p" * 150 in lines
    assert all(len(ln) <= 100 for ln in lines if ln not in (src, "p" * 150))
    assert " ".join(lines).count("your kernel") == 30  # nothing lost in the wrapping
