"""The pipeline step of a `CallExercise` that has a `Pipeline` (chapter 03's ``two_stage``: a stream schedule
written as data): in the run child, after every case passed, the grader's pipeline driver runs the reference
schedule and then the student's, holding the GPU alone, re-measuring near a tier boundary as
`policy.decide_pipeline` says. Nothing of the student's runs but data, so there is no deadline to arm: the
step's own deadline covers the driver's work, and an exception from the driver is a grader error (out of
memory as `cuda_errors.call_out_of_memory` words it). A kernel exercise's pipeline step is `harness.pipeline_step`.
"""
from __future__ import annotations

from . import policy
from .cuda_errors import call_out_of_memory, is_out_of_memory

__all__ = ["call_pipeline_step"]


class _Wrong(Exception):
    """A timed run's output was wrong: no points at all, as for a kernel's pipeline."""


def call_pipeline_step(ex, driver, call: dict, reference_call: dict, seed: int, alone) -> dict:
    """The step's result dict (``status`` "ok" with ``pipeline``, or a failure). ``driver(name, call, *, seed,
    nbytes)`` returns the keys of `course.streams.pipeline_report` plus ``streams`` and ``chunks``; ``alone``
    is the exclusive GPU section (`device.gpu_sections`)."""
    pl = ex.pipeline
    nbytes = int(pl.nbytes)
    seed = (int(seed) + 20_000) % (1 << 63)   # secret, like the cases' inputs
    base = {"sizes": {"n": nbytes // 4}}
    what = f"the pipeline run ({nbytes / 2**20:g} MiB each way)"
    try:
        return _step(ex, driver, call, reference_call, seed, alone, base, what)
    except Exception as exc:   # _Wrong is caught inside; anything else is the driver's (the grader's)
        text = f"{type(exc).__name__}: {exc}"
        if is_out_of_memory(text):
            return {**base, **call_out_of_memory(text, what)}
        return {**base, "status": "grader error", "message": (
            f"the grader's pipeline driver {pl.driver} failed in {what} ({text}). Every case passed before it, "
            "on the same data, so this is the grader's fault: not charged to you.")}


def _step(ex, driver, call: dict, reference_call: dict, seed: int, alone, base: dict, what: str) -> dict:
    pl = ex.pipeline
    nbytes = int(pl.nbytes)
    with alone():
        ref = driver(ex.name, reference_call, seed=seed, nbytes=nbytes)
        if not ref.get("correct"):
            return {**base, "status": "grader error", "message": (
                f"the reference schedule's pipeline output is wrong, so the driver {pl.driver} or the spec is "
                f"broken: {ref.get('message', '')}")}
        reports = []

        def run():
            rep = driver(ex.name, call, seed=seed + len(reports) + 1, nbytes=nbytes)
            if not rep.get("correct"):
                raise _Wrong(rep.get("message", "") or "wrong output")
            reports.append(rep)
            return rep["total_ms"], rep["serial_ms"]

        try:
            d = policy.decide_pipeline(run, pl)
        except _Wrong as exc:
            return {**base, "status": "failed", "message": f"wrong output from {what}: {exc}"}
    last = reports[-1]
    result = policy.pipeline_result(d, pl, last, streams=last["streams"], chunks=last["chunks"],
                                    block=last.get("block", 0), nbytes=nbytes, reference=ref)
    return {**base, "status": "ok", "pipeline": result}
