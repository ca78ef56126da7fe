"""What a Dask worker runs: one grading per task, with one warm grading session per worker process.

A worker owns one GPU (``CUDA_VISIBLE_DEVICES`` set when it started) and runs several tasks at once in its
threads: each grading's children are forked from the process's warm server, its correctness steps overlap
with the others' and its timing runs alone on the GPU (autograder/gpulock.py), against the reference
timed in the same child. The session compiles each reference once and keeps CuPy's kernel cache warm.

A grading that ran out of device memory beside the others (a grader error: their buffers may have filled
the GPU) is graded once more with the GPU to itself: the worker lets the gradings under way finish (their
children exit, freeing their memory), starts no other until it is done, and grades it without a lock, so
that another out-of-memory is the kernel's own verdict (autograder/cuda_errors.py).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading

__all__ = ["grade_job", "worker_gpu", "problem_report", "Gradings"]

_SESSION = None
_LOCK = threading.Lock()


class Gradings:
    """The gradings of one worker on its GPU: any number side by side, or one alone."""

    def __init__(self):
        self._cond = threading.Condition()
        self._running = 0        # gradings side by side now
        self._queued_alone = 0   # gradings waiting to run alone: new ones wait behind them
        self._alone = False

    @contextlib.contextmanager
    def beside(self):
        with self._cond:
            self._cond.wait_for(lambda: not (self._alone or self._queued_alone))
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self):
        with self._cond:
            self._queued_alone += 1
            self._cond.wait_for(lambda: not (self._alone or self._running))
            self._queued_alone -= 1
            self._alone = True
        try:
            yield
        finally:
            with self._cond:
                self._alone = False
                self._cond.notify_all()


_GRADINGS = Gradings()


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

    def grade(s):
        return grade_source(job["assignment"], job["exercise"], job["source"], launch=job["launch"],
                            submission=job["student"], session=s, speed=speed, first_line=int(job.get("first_line", 1)))
    with _GRADINGS.beside():
        rep = grade(session)
    if _out_of_memory(rep):
        with _GRADINGS.alone():
            rep = grade(_alone(session))
    if job.get("note"):
        rep.notes.insert(0, job["note"])
    gpu = (session.gpu or {}).get("name") or "none"
    return {"report": {**rep.to_dict(), "_feedback": rep.feedback()}, "gpu": gpu,
            "worker": f"{socket.gethostname()}:{os.getpid()}"}


def _out_of_memory(rep) -> bool:
    """Whether a grading's verdict is a grader error because the GPU ran out of memory."""
    from ..cuda_errors import is_out_of_memory
    from ..report import Status
    return rep.status == Status.ERROR and is_out_of_memory("\n".join([rep.reason] + [s.message for s in rep.sizes]))


def _alone(session):
    """A session like ``session`` (the same GPU, compiled references and seed, every field copied) whose
    gradings take no GPU lock: they run with no other grading on the GPU."""
    return dataclasses.replace(session, shared_gpu=False, lock_dir=None, _lock=threading.Lock())
