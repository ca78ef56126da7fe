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
    import dataclasses
    r = policy.skipped_report(dataclasses.replace(SAXPY, min_cc=(8, 0)), "sm_75")
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


# -- partial credit by size group ----------------------------------------------------------------

def results(ex, large=Status.PASSED, small=Status.PASSED, hidden=3, message="y: 5 of 9 values wrong"):
    """Results in the runner's order (public cases as the spec lists them, then hidden ones): ``large`` for
    every case larger than L2, ``small`` for the first small public case, the others passing."""
    out, first_small = [], True
    for case in ex.sizes:
        label = {k: (13_107_201 if not isinstance(v, int) else v) for k, v in case.items()}
        if ex.is_large_case(case):
            out.append(SizeResult(label, large, "" if large == Status.PASSED else message))
        else:
            status = small if first_small else Status.PASSED
            first_small = False
            out.append(SizeResult(label, status, "" if status == Status.PASSED else message))
    out += [SizeResult({k: 257 + i for k in ex.size_names}, Status.PASSED, hidden=True) for i in range(hidden)]
    return out


def variant(ex, partial, correctness=None):
    """``ex`` with another ``partial`` (and correctness points), as a spec would set them."""
    import dataclasses
    from autograder import Points
    points = ex.points if correctness is None else Points(correctness=correctness, speed=ex.points.speed)
    return dataclasses.replace(ex, partial=partial, points=points)


def test_every_spec_has_a_small_group_and_a_large_group():
    """Can the rule split every kernel exercise's public cases into small ones and larger-than-L2 ones?"""
    from autograder import CallExercise, chapters, load_chapter
    for ch in chapters():
        for ex in load_chapter(ch):
            if isinstance(ex, CallExercise):
                assert ex.partial is None, (ch, ex.name)  # calls have no large case: all-or-nothing
                continue
            flags = [ex.is_large_case(c) for c in ex.sizes]
            assert any(flags) and not all(flags), (ch, ex.name, flags)


def test_failing_only_larger_than_l2_gets_the_partial_points():
    """Is a kernel right at every small, edge and hidden size but wrong larger than L2 given the spec's
    partial points (half its correctness points by default), with no speed points and status 'failed'?"""
    for ex in (SAXPY, GRAY):
        assert ex.partial == 0.5 and ex.partial_points == ex.points.correctness / 2
        r = policy.score(ex, results(ex, large=Status.FAILED), speed(1.0))
        assert (r.status, r.points) == (Status.FAILED, ex.partial_points)
        assert r.speed is None


def test_a_small_size_failure_gives_zero_even_if_the_large_one_passes():
    r = policy.score(SAXPY, results(SAXPY, small=Status.FAILED), speed(1.0))
    assert (r.status, r.points) == (Status.FAILED, 0)
    assert "No partial credit: 1 of the 7 small and edge sizes is not right" in r.reason


def test_a_hidden_size_failure_gives_zero():
    """Hidden sizes belong to the small group: failing one costs the partial points too."""
    sizes = results(SAXPY, large=Status.FAILED)
    sizes[-1] = SizeResult({"n": 1024}, Status.FAILED, "y: 1 of 1024 values wrong", hidden=True)
    r = policy.score(SAXPY, sizes)
    assert r.points == 0 and "drawn at random" in r.reason and "No partial credit" in r.reason


def test_a_crash_at_the_large_size_keeps_the_partial_points():
    """An illegal address at the large size costs that size only: later sizes run in a fresh child, so the
    small group is complete and earns its points; the status stays 'crashed'."""
    r = policy.score(SAXPY, results(SAXPY, large=Status.CRASHED, message="crashed: an illegal memory access"))
    assert (r.status, r.points) == (Status.CRASHED, SAXPY.partial_points)
    assert "crashed at n=13107201" in r.reason and "illegal memory access" in r.reason


def test_a_timeout_that_stopped_small_sizes_gives_zero():
    """After a timeout the sizes after it are not run; unproven small sizes earn nothing."""
    sizes = results(SAXPY, large=Status.TIMED_OUT, message="timed out: your kernel was still running after 10 s")
    sizes = sizes[:5] + [SizeResult(s.sizes, Status.NOT_RUN, "an earlier step timed out", hidden=True)
                         for s in sizes[5:]]
    r = policy.score(SAXPY, sizes)
    assert (r.status, r.points) == (Status.TIMED_OUT, 0)
    assert "the timeout at n=13107201 stopped the sizes after it" in r.reason


def test_a_timeout_after_every_small_size_ran_keeps_the_partial_points():
    """The rule looks at which sizes ran, not at their order: a timeout at the large size after every small
    and hidden size passed (a runner that ran the large case last) earns the partial points."""
    sizes = results(SAXPY, large=Status.TIMED_OUT, message="timed out")
    order = [s for s in sizes if s.hidden] + [s for s in sizes if not s.hidden]
    r = policy.score(SAXPY, order)
    assert (r.status, r.points) == (Status.TIMED_OUT, SAXPY.partial_points)


def test_a_grader_error_at_the_large_size_gives_no_partial_points():
    r = policy.score(SAXPY, results(SAXPY, large=Status.ERROR, message="a bug in the grader"))
    assert (r.status, r.points) == (Status.ERROR, 0)
    assert "Rule for this exercise" not in r.reason  # a regrade is due, not a verdict on the kernel


def test_opting_out_makes_correctness_all_or_nothing():
    ex = variant(SAXPY, None)
    assert ex.partial_points is None
    r = policy.score(ex, results(ex, large=Status.FAILED))
    assert (r.status, r.points) == (Status.FAILED, 0)
    assert "no partial credit for this exercise" in r.reason


def test_a_spec_can_set_its_own_fraction_rounded_down_to_half_points():
    ex = variant(SAXPY, 0.3)  # 0.3 x 6 = 1.8 -> 1.5
    assert ex.partial_points == 1.5
    assert policy.score(ex, results(ex, large=Status.FAILED)).points == 1.5
    assert variant(SAXPY, 0.5, correctness=5).partial_points == 2.5
    assert variant(SAXPY, 0.29, correctness=100).partial_points == 29  # 28.999999999999996 in floats


def test_results_that_do_not_match_the_spec_get_no_partial_points():
    """If the public results cannot be matched to the spec's cases, the grader cannot tell the groups
    apart and stays all-or-nothing rather than guess."""
    sizes = results(SAXPY, large=Status.FAILED)
    del sizes[0]
    assert policy.large_flags(SAXPY, sizes) is None
    assert policy.score(SAXPY, sizes).points == 0


def test_a_literal_case_of_256_mib_counts_as_larger_than_l2():
    from autograder.spec import LARGE_LITERAL_BYTES
    n = LARGE_LITERAL_BYTES // 8  # saxpy: x and y, 4 bytes each
    assert SAXPY.is_large_case({"n": n}) and not SAXPY.is_large_case({"n": n - 1})


def test_partial_feedback_names_the_groups_the_failing_size_and_the_rule():
    r = policy.score(SAXPY, results(SAXPY, large=Status.FAILED, message="y: 1 of 13107201 values wrong"))
    text = r.feedback()
    head = text.split("\n")[0]
    assert head == "saxpy: failed - 3 / 10 points"
    first = r.reason.split("\n")[0]
    assert first.startswith("Correctness 3/6 points (partial credit): right at all 7 small and edge sizes "
                            "(3 of them drawn at random for this grading)")
    assert "failed at n=13107201" in first
    assert "At size n=13107201: y: 1 of 13107201 values wrong" in r.reason
    assert "Rule for this exercise: all 6 correctness points" in r.reason and "3 for one right" in r.reason
    assert "Speed points need every size right" in r.reason
    from autograder.report import Report
    assert "Correctness 3/6 points" in Report([r]).table(width=200)  # the instructor's table shows it too


def test_the_rule_mentions_what_each_exercise_really_loses():
    from autograder import get_exercise
    streams = get_exercise("03_streams", "process_chunk")   # pipeline points, no speed points
    wmma = get_exercise("08_tensor_cores", "wmma_gemm")      # correctness only
    assert "Overlap points need every size right" in policy.partial_rule(streams)
    assert "Speed" not in policy.partial_rule(streams)
    assert "points need" not in policy.partial_rule(wmma) and "2.5 for one right" in policy.partial_rule(wmma)
