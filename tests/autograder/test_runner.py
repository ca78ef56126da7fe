"""The parent's supervision of grading children, with a fake harness in the children (no GPU).

Each test's source carries `// FAKE: ...` flags that make the child hang, die, crash or misreport
at a chosen step; the report must say what happened, to which size, and score it by the policy.
"""
import time
from pathlib import Path

import pytest

from autograder import Status, grade_source

CH, EX = "01_first_kernel", "saxpy"


def src(base, flags):
    return base + f"\n// FAKE: {flags}\n"


def test_all_steps_pass_gives_full_points(fake_harness, saxpy_source):
    """Does a child that passes every size and times at the reference speed give full marks?"""
    r = grade_source(CH, EX, src(saxpy_source, "ok"))
    assert r.status == Status.PASSED, r.feedback()
    assert r.points == 10 and r.max_points == 10
    assert [s.status for s in r.sizes if not s.hidden] == [Status.PASSED] * 5
    assert r.speed is not None and r.speed.ratio == pytest.approx(1.0)
    assert r.device == "Fake GPU (sm_90)"


def test_hang_is_killed_reported_and_later_sizes_not_run(fake_harness, saxpy_source):
    """Is a kernel that never returns killed after its armed timeout, and are later sizes skipped?"""
    t0 = time.monotonic()
    r = grade_source(CH, EX, src(saxpy_source, "hang@2"))
    assert time.monotonic() - t0 < 30  # killed after 0.5 s, not after the 60 s sleep
    assert r.status == Status.TIMED_OUT and r.points == 0
    st = [s.status for s in r.sizes if not s.hidden]
    assert st == [Status.PASSED, Status.PASSED, Status.TIMED_OUT, Status.NOT_RUN, Status.NOT_RUN]
    assert "timed out" in r.reason and "n=2" in r.reason and "was still running" in r.reason
    assert r.speed is None


def test_child_death_costs_one_size_and_the_rest_run_in_a_fresh_child(fake_harness, saxpy_source):
    """Does a child killed by a signal cost only that size, with the remaining sizes still graded?"""
    r = grade_source(CH, EX, src(saxpy_source, "die@1"))
    st = [s.status for s in r.sizes if not s.hidden]
    assert st == [Status.PASSED, Status.CRASHED, Status.PASSED, Status.PASSED, Status.PASSED]
    assert r.status == Status.CRASHED and r.points == 0
    assert "SIGKILL" in r.reason


def test_fatal_cuda_error_restarts_child_for_remaining_sizes(fake_harness, saxpy_source):
    """After a context-poisoning error the child exits; are later sizes run in a new child?"""
    r = grade_source(CH, EX, src(saxpy_source, "fatal@0"))
    assert [s.status for s in r.sizes if not s.hidden] == [Status.CRASHED] + [Status.PASSED] * 4
    assert r.status == Status.CRASHED
    assert "illegal memory access" in r.reason and "n=0" in r.reason


def test_failure_skips_timing(fake_harness, saxpy_source):
    """Is a kernel wrong at one size given zero points, without speed measured?"""
    r = grade_source(CH, EX, src(saxpy_source, "fail@3"))
    assert r.status == Status.FAILED and r.points == 0 and r.speed is None
    assert "wrong output at 3" in r.reason
    assert "Correct at" in r.reason  # the other sizes are listed as passing


def test_compile_error_stops_everything(fake_harness, saxpy_source):
    """Does a compile error give status 'compile error', zero points and the compiler message?"""
    r = grade_source(CH, EX, src(saxpy_source, "compile-error"))
    assert r.status == Status.COMPILE_ERROR and r.points == 0
    assert "expected a ';'" in r.reason


def test_grader_bug_is_reported_as_grader_error(fake_harness, saxpy_source):
    """Is an exception inside the grader reported as a grader error (not blamed on the student)?"""
    r = grade_source(CH, EX, src(saxpy_source, "raise@2"))
    assert r.sizes[2].status == Status.ERROR
    assert "a bug in the grader" in r.sizes[2].message
    assert r.status == Status.ERROR


def test_oversized_result_is_truncated_not_fatal(fake_harness, saxpy_source):
    """Is a result over the pipe's cap truncated with a note rather than breaking the grading?"""
    r = grade_source(CH, EX, src(saxpy_source, "huge@1"))
    assert r.sizes[1].status == Status.FAILED
    assert "truncated" in r.sizes[1].message
    assert len(r.sizes[1].message) < 300_000
    assert r.sizes[2].status == Status.PASSED


def test_printf_output_is_captured_and_tail_limited(fake_harness, saxpy_source):
    """Does the children's stdout reach the report's printf field, not the parent's stdout?"""
    r = grade_source(CH, EX, src(saxpy_source, "print"))
    assert "printf from size 0" in r.printf and "printf from size 4" in r.printf
    assert len(r.printf) <= 4096 + 100


def test_slow_kernel_gets_correctness_points_only(fake_harness, saxpy_source):
    r = grade_source(CH, EX, src(saxpy_source, "slow"))
    assert r.status == Status.SLOW and r.points == 6
    assert "0.40x" in r.reason and "0.80x" in r.reason


def test_impossible_speed_is_flagged_without_speed_points(fake_harness, saxpy_source):
    r = grade_source(CH, EX, src(saxpy_source, "impossible"))
    assert r.status == Status.FLAGGED and r.points == 6
    assert "faster than this GPU" in r.reason


def test_wrong_while_timed_loses_all_points(fake_harness, saxpy_source):
    """Does a kernel that is right at every size but wrong during timing get zero?"""
    r = grade_source(CH, EX, src(saxpy_source, "wrongtimed"))
    assert r.status == Status.FAILED and r.points == 0
    assert "while being timed" in r.reason


def test_no_gpu_in_child_gives_needs_gpu(fake_harness, saxpy_source, monkeypatch):
    monkeypatch.setenv("FAKE_GPU", "none")
    r = grade_source(CH, EX, src(saxpy_source, "ok"))
    assert r.status == Status.NEEDS_GPU and r.points == 0
    assert "needs a GPU" in r.reason


def test_old_gpu_skips_with_documented_policy(fake_harness, saxpy_source, monkeypatch):
    """Is an exercise needing a newer GPU skipped with its points left out of the total (not a silent 0)?"""
    from autograder import get_exercise
    ex = get_exercise(CH, EX)
    monkeypatch.setattr(ex, "min_cc", (8, 0))
    monkeypatch.setenv("FAKE_GPU", "t4")
    r = grade_source(CH, EX, src(saxpy_source, "ok"))
    assert r.status == Status.SKIPPED
    assert r.points == 0 and r.counted_max_points == 0
    assert "skipped: needs sm_80 (this GPU is sm_75)" in r.reason


def test_signature_mismatch_is_found_without_spawning(fake_harness, saxpy_source):
    """Is a wrong parameter type reported by name before any child runs?"""
    bad = saxpy_source.replace("float a", "double a")
    r = grade_source(CH, EX, bad)
    assert r.status == Status.COMPILE_ERROR
    assert "double a" in r.reason and "float a" in r.reason


def test_missing_kernel_and_bad_launch_data(fake_harness, saxpy_source):
    r = grade_source(CH, EX, "")
    assert r.status == Status.FAILED and "%%cuda --name saxpy" in r.reason
    r = grade_source(CH, EX, saxpy_source, launch={"blok": 128})
    assert r.status == Status.FAILED and "Did you mean 'block'" in r.reason


def test_compile_stopped_at_its_cpu_limit_is_the_students_result(fake_harness, saxpy_source):
    """Is a compile child killed by its CPU-time limit reported as the source's problem, not the grader's?"""
    r = grade_source(CH, EX, src(saxpy_source, "compile-die"))
    assert r.status == Status.COMPILE_ERROR and r.points == 0, r.feedback()
    assert "CPU time to compile" in r.reason


def test_a_planted_compile_cache_entry_is_never_used(tmp_path, monkeypatch, saxpy_source):
    """Does the grader ignore a compile-cache entry planted under the exact key of the source it grades?"""
    course = pytest.importorskip("course")
    from autograder import get_exercise
    from course._compile import cache_dir
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    ex = get_exercise(CH, EX)
    try:
        course.compile_for_arch(saxpy_source, "sm_75", options=tuple(ex.options))
    except course.CompileError as exc:
        if "could not be loaded" in str(exc):
            pytest.skip("no NVRTC here")
        raise
    entries = list((cache_dir() / "nvrtc").iterdir())
    assert len(entries) == 1
    meta = entries[0] / "meta.json"
    import json
    planted = json.loads(meta.read_text())
    planted["log"] = "PLANTED-ENTRY"
    meta.write_text(json.dumps(planted))
    (entries[0] / "kernel.cubin").write_bytes(b"\x7fELF planted")
    r = grade_source(CH, EX, saxpy_source)
    assert r.status == Status.NEEDS_GPU, r.feedback()  # compiled for real, then found no GPU
    assert "PLANTED" not in r.compile_log
    assert list((cache_dir() / "nvrtc").iterdir()) == entries  # nor did grading write to the user's cache


def test_no_speed_gives_a_clear_correctness_only_status(fake_harness, saxpy_source):
    """With --no-speed, is a correct kernel 'correct, not timed' with its correctness points, not a grader error?"""
    r = grade_source(CH, EX, src(saxpy_source, "ok"), speed=False)
    assert (r.status, r.points) == (Status.UNTIMED, 6), r.feedback()
    assert "--no-speed" in r.reason and r.speed is None


@pytest.mark.slow
def test_compile_bomb_is_stopped_by_the_cpu_limit(monkeypatch):
    """Does a source that keeps NVRTC busy for minutes get stopped at the compile CPU limit and graded as a
    compile error (the student's result), with no GPU needed? (The limit is lowered to keep CI fast.)"""
    course = pytest.importorskip("course")
    try:
        course.compile_for_arch("extern \"C\" __global__ void k() {}", "sm_75", use_cache=False)
    except course.CompileError:
        pytest.skip("no NVRTC here")
    from autograder import compiling
    monkeypatch.setattr(compiling, "COMPILE_CPU_S", 3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    source = (Path(__file__).parent / "attacks" / "compile_bomb.cu").read_text()
    t0 = time.monotonic()
    r = grade_source(CH, EX, source)
    assert r.status == Status.COMPILE_ERROR and r.points == 0, r.feedback()
    assert "CPU time to compile" in r.reason
    assert time.monotonic() - t0 < 60
