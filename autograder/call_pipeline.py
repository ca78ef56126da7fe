"""The pipeline step of a `CallExercise` that has a `Pipeline` (chapter 03's ``two_stage``: a stream schedule
written as data): in the run child, after every case passed, the grader's pipeline driver runs the reference
schedule and then the student's, holding the GPU alone, re-measuring near a tier boundary as
`policy.decide_pipeline` says. Nothing of the student's runs but data, so there is no deadline to arm: the
step's own deadline covers the driver's work, and an exception from the driver is a grader error (out of
memory as `cuda_errors.call_out_of_memory` words it). A kernel exercise's pipeline step is `harness.pipeline_step`.
"""
from __future__ import annotations

from . import policy
from .cuda_errors import driver_failure

__all__ = ["call_pipeline_step"]


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
    except Exception as exc:   # a wrong output is caught inside; anything else is the driver's
        return {**base, **driver_failure(ex, exc, what, driver=ex.pipeline.driver)}


def _step(ex, driver, call: dict, reference_call: dict, seed: int, alone, base: dict, what: str) -> dict:
    pl = ex.pipeline
    nbytes = int(pl.nbytes)
    with alone():
        ref = driver(ex.name, reference_call, seed=seed, nbytes=nbytes)
        if not ref.get("correct"):
            return {**base, "status": "grader error", "message": (
                f"the reference schedule's pipeline output is wrong, so the driver {pl.driver} or the spec is "
                f"broken: {ref.get('message', '')}")}
        try:
            d, last = policy.decide_checked_pipeline(
                lambda i: driver(ex.name, call, seed=seed + i * policy.PIPELINE_SEED_STRIDE, nbytes=nbytes), pl)
        except policy.WrongPipelineOutput as exc:
            return {**base, "status": "failed", "message": f"wrong output from {what}: {exc}"}
    result = policy.pipeline_result(d, pl, last, streams=last["streams"], chunks=last["chunks"],
                                    block=last.get("block", 0), nbytes=nbytes, reference=ref)
    return {**base, "status": "ok", "pipeline": result}
