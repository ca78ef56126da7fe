"""How a CUDA error from a student launch is named (autograder/cuda_errors.py): who is charged for it."""
from __future__ import annotations

import pytest

from autograder import cuda_errors

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
def test_out_of_memory_is_not_charged_to_the_student(exc, monkeypatch):
    """Is running out of device memory a grader error (graded again), not a crash costing the student?"""
    monkeypatch.setattr(cuda_errors, "context_alive", lambda: True)
    res = cuda_errors.classify_cuda_error(exc, "n=13107201", GEO)
    assert res["status"] == "grader error" and res["fatal"]
    assert "ran out of memory" in res["message"] and "graded" in res["message"] and "n=13107201" in res["message"]


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
