"""The grader's driver for chapter 10's cuBLAS calls: one hidden case per call, on the GPU."""
from __future__ import annotations

from course.calls import check_call, run_case

__all__ = ["check_call", "grade_case"]


def grade_case(problem: str, call: dict, sizes: dict, seed: int, *, backend: str = "cupy") -> dict:
    """The call made once by cuBLAS on fresh inputs of ``sizes`` drawn from ``seed``, rows padded to their
    leading dimensions and the output poisoned: ``{"status": "passed" | "failed", "message": str}``."""
    return run_case(problem, call, sizes, seed, backend=backend)
