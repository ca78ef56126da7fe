"""What a Dask worker runs: one grading per task, with one warm grading session per worker process.

A worker owns one GPU (``CUDA_VISIBLE_DEVICES`` set when it started) and runs several tasks at once in its
threads: each grading's children are forked from the process's warm server, its correctness steps overlap
with the others' and its timing runs alone on the GPU (autograder/gpulock.py), against the reference
timed in the same child. The session compiles each reference once and keeps CuPy's kernel cache warm.
"""
from __future__ import annotations

import os
import socket
import threading

__all__ = ["grade_job", "worker_gpu", "problem_report"]

_SESSION = None
_LOCK = threading.Lock()


def _session(harness: str | None):
    global _SESSION
    from .. import runner
    with _LOCK:
        if harness is not None:  # CPU tests: a fake harness in the children
            runner.HARNESS_MODULE = harness
        if _SESSION is None:
            _SESSION = runner.Session(shared_gpu=True)
        return _SESSION


def worker_gpu(harness: str | None = None) -> str:
    """This worker's GPU as its gradings will record it (asked once; also warms the session up)."""
    session = _session(harness)
    session.probe()
    return (session.gpu or {}).get("name") or "none"


def problem_report(job: dict) -> dict:
    """The verdict of a job whose submission could not be read (no GPU involved)."""
    from ..loader import get_exercise
    from ..report import ExerciseReport, Status
    ex = get_exercise(job["assignment"], job["exercise"])
    rep = ExerciseReport(chapter=ex.chapter, exercise=ex.name, status=Status.FAILED, points=0.0,
                         max_points=ex.max_points, reason=job["problem"], submission=job["student"])
    return {**rep.to_dict(), "_feedback": rep.feedback()}


def grade_job(job: dict, speed: bool = True, harness: str | None = None) -> dict:
    """Grade one job (a `Job` as a dict); the report as a dict, plus the GPU and the worker."""
    from ..runner import grade_source
    if job.get("problem"):
        return {"report": problem_report(job), "gpu": "none", "worker": socket.gethostname()}
    session = _session(harness)
    rep = grade_source(job["assignment"], job["exercise"], job["source"], launch=job["launch"],
                       submission=job["student"], session=session, speed=speed,
                       first_line=int(job.get("first_line", 1)))
    if job.get("note"):
        rep.notes.insert(0, job["note"])
    gpu = (session.gpu or {}).get("name") or "none"
    return {"report": {**rep.to_dict(), "_feedback": rep.feedback()}, "gpu": gpu,
            "worker": f"{socket.gethostname()}:{os.getpid()}"}
