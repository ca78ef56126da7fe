"""How a CUDA error from a student launch is named (autograder/cuda_errors.py): who is charged for it."""
from __future__ import annotations

import pytest

from autograder import cuda_errors
from autograder.gpulock import NO_LOCK, GpuLock

GEO = ((64, 1, 1), (256, 1, 1), 0)


class OutOfMemoryError(Exception):  # the name CuPy's allocator raises
    pass


class CUDADriverError(Exception):
    pass


@pytest.mark.parametrize("exc", [
    OutOfMemoryError("Out of memory allocating 419,430,400 bytes (allocated so far: 7,516,192,768 bytes)."),
    CUDADriverError("CUDA_ERROR_OUT_OF_MEMORY: out of memory"),
    RuntimeError("cudaErrorMemoryAllocation: out of memory"),
])
def test_out_of_memory_beside_other_gradings_is_not_charged_to_the_student(exc, monkeypatch, tmp_path):
    """While other gradings share the GPU, is running out of device memory a grader error (graded again
    alone), not a crash costing the student?"""
    monkeypatch.setattr(cuda_errors, "context_alive", lambda: True)
    monkeypatch.setattr(cuda_errors, "_LOCK", None)
    cuda_errors.share_gpu(GpuLock(str(tmp_path)))
    res = cuda_errors.classify_cuda_error(exc, "n=13107201", GEO)
    assert res["status"] == "grader error" and res["fatal"]
    assert "ran out of memory" in res["message"] and "not charged to you" in res["message"]
    assert "n=13107201" in res["message"] and cuda_errors.is_out_of_memory(res["message"])


@pytest.mark.parametrize("exc", [
    OutOfMemoryError("Out of memory allocating 419,430,400 bytes (allocated so far: 7,516,192,768 bytes)."),
    CUDADriverError("CUDA_ERROR_OUT_OF_MEMORY: out of memory"),
    RuntimeError("cudaErrorMemoryAllocation: out of memory"),
])
def test_out_of_memory_with_the_gpu_to_itself_is_the_kernels(exc, monkeypatch):
    """With no other grading on the GPU, is running out of memory the student's final "crashed" verdict,
    saying where, what was raised, and what to change?"""
    monkeypatch.setattr(cuda_errors, "context_alive", lambda: True)
    monkeypatch.setattr(cuda_errors, "_LOCK", None)
    cuda_errors.share_gpu(NO_LOCK)
    res = cuda_errors.classify_cuda_error(exc, "n=13107201", GEO)
    assert res["status"] == "crashed" and res["fatal"]
    msg = res["message"]
    assert msg.startswith("crashed at n=13107201 (grid (64, 1, 1), block (256, 1, 1)") and ": out of memory (" in msg
    assert str(exc) in msg and "no other grading on the GPU" in msg
    assert "local memory" in msg and "__shared__" in msg  # the likely cause, and what to do instead


def test_shared_is_read_from_the_lock(monkeypatch, tmp_path):
    """Is "other gradings share the GPU" what the child's lock says (lock files or none), and shared until
    the lock is given (an out-of-memory is then never charged to the student)?"""
    monkeypatch.setattr(cuda_errors, "_LOCK", None)
    assert cuda_errors.gpu_shared()
    cuda_errors.share_gpu(GpuLock(str(tmp_path)))
    assert cuda_errors.gpu_shared()
    cuda_errors.share_gpu(GpuLock(None))
    assert not cuda_errors.gpu_shared()


def test_a_calls_out_of_memory_says_what_happens_next_as_it_is(monkeypatch, tmp_path):
    """A library call's out of memory is always a grader error; does its message promise a second grading
    only in a batch (which gives one), and tell a lone grader what to do instead?"""
    text = "cudaErrorMemoryAllocation: out of memory"
    monkeypatch.setattr(cuda_errors, "_LOCK", None)
    cuda_errors.share_gpu(GpuLock(str(tmp_path)))
    batch = cuda_errors.call_out_of_memory(text, "m=33")
    cuda_errors.share_gpu(NO_LOCK)
    lone = cuda_errors.call_out_of_memory(text, "m=33")
    assert batch["status"] == lone["status"] == "grader error"
    for res in (batch, lone):
        assert "Not charged to you" in res["message"] and "m=33" in res["message"]
        assert cuda_errors.is_out_of_memory(res["message"])   # the batch recognises it to grade it again
    assert "once more with the GPU to itself" in batch["message"] and "close other programs" not in batch["message"]
    assert "close other programs" in lone["message"] and "batch" not in lone["message"]


@pytest.mark.parametrize("text, status", [
    ("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered", "crashed"),
    ("cudaErrorLaunchFailure: unspecified launch failure", "crashed"),
    ("something nobody has seen", "crashed"),
    ("CUDA_ERROR_INVALID_VALUE: invalid argument", "failed"),
])
def test_the_students_own_errors_keep_their_verdicts(text, status, monkeypatch):
    """Do an illegal address, a launch failure, an unknown error and a refused launch keep their verdicts?"""
    monkeypatch.setattr(cuda_errors, "context_alive", lambda: True)
    assert cuda_errors.classify_cuda_error(CUDADriverError(text), "n=1", GEO)["status"] == status


def test_a_lone_grading_that_runs_out_of_memory_gets_a_final_crash(fake_harness):
    """`grade` (one grading, no other on the GPU): does a kernel whose launch runs out of memory at one size
    get "crashed" there, with the out-of-memory explanation, instead of a grader error graded forever?"""
    from pathlib import Path

    from autograder import Status, grade_source
    src = (Path(__file__).parents[2] / "solutions" / "01_first_kernel" / "saxpy.cu").read_text()
    r = grade_source("01_first_kernel", "saxpy", src + "\n// FAKE: oom@1 oomshared@2")
    by_n = {s.sizes["n"]: s for s in r.sizes}
    assert by_n[1].status == Status.CRASHED and "out of memory" in by_n[1].message, r.feedback()
    assert by_n[2].status == Status.PASSED  # oomshared: only beside other gradings
    assert r.status == Status.CRASHED and r.points == 0
