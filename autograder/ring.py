"""Multi-GPU exercises: a kernel that is one step of the grader's ring all-reduce (chapter 16).

A spec gives ``ring=Ring(gpus=2)``. The kernel's contract is a step of `course.multi_gpu.ring_allreduce`:
``(float* mine, const float* left, int n, int rank, int world, int step)``. Its correctness is checked as
any kernel's, one step at a time on one GPU (``left`` is then a second buffer on the same GPU): the usual
size cases, hidden sizes, poison, guard zones, two runs. Its speed is the ring's: in the run child, on the
spec's ``gpus`` GPUs (the machine's first ones), the whole all-reduce of ``nbytes`` per GPU with the student's
kernel on every rank is timed interleaved with NCCL's all-reduce of the same bytes (autograder/ring_timing.py), every timed run on
fresh inputs and checked, so the ratio is NCCL's time over the student ring's: its share of NCCL's bus
bandwidth. A machine with fewer than ``gpus`` GPUs skips the exercise like an older GPU does (points left
out of the total, a reason saying how many GPUs it needs).

Nothing here touches CUDA: the parent imports it.
"""
from __future__ import annotations

import dataclasses

__all__ = ["Ring", "RING_PARAMS", "spec_problem", "ring_spec_problem", "gpus_needed", "skipped_reason"]

RING_PARAMS = ("mine", "left", "n", "rank", "world", "step")
"""The kernel's parameters, in order: the driver passes exactly these."""


@dataclasses.dataclass(frozen=True)
class Ring:
    """The kernel is timed as every step of a ring all-reduce of ``nbytes`` per GPU over exactly ``gpus`` GPUs (the
    thresholds hold for that many, whatever the machine has), against NCCL's all-reduce of the same bytes."""

    gpus: int = 2
    nbytes: int = 256 << 20


def gpus_needed(ex) -> int:
    """GPUs the exercise needs to be graded (1 for a single-GPU exercise)."""
    ring = getattr(ex, "ring", None)
    return ring.gpus if ring is not None else 1


def skipped_reason(ex, gpu_count: int, why: str = "") -> str:
    """The report's reason when this machine cannot time the ring: too few GPUs, or ``why`` (no peer access
    between neighbours, no NCCL: `course.multi_gpu.ring_problem`)."""
    need = gpus_needed(ex)
    what = why or f"needs {need} GPUs of one host (this machine has {gpu_count})"
    return (f"skipped: {what}: the exercise is timed as a ring all-reduce across GPUs. Not graded here, and its "
            f"points are left out of the total; regrade on a machine with {need} or more GPUs whose neighbours "
            f"reach each other's memory, with NCCL installed.")


def ring_spec_problem(ex) -> tuple:
    """(field, problem) for a ``ring`` that does not fit the exercise; ('', '') when it does."""
    ring = getattr(ex, "ring", None)
    if ring is None:
        return "", ""
    if not isinstance(ring, Ring):
        return "ring", f"should be None or Ring(gpus=2, nbytes=256 << 20); got {ring!r}"
    if not isinstance(ring.gpus, int) or not 2 <= ring.gpus <= 8:
        return "ring", f"gpus should be an int from 2 to 8; got {ring.gpus!r}"
    if not isinstance(ring.nbytes, int) or ring.nbytes < 1 << 20 or ring.nbytes % 16:
        return "ring", f"nbytes should be at least 1 MiB and a multiple of 16; got {ring.nbytes!r}"
    names = tuple(p.name for p in ex.params)
    if names != RING_PARAMS:
        return "params", (f"a ring exercise's kernel takes {', '.join(RING_PARAMS)} in that order (the ring driver "
                          f"passes them); got {', '.join(names)}")
    why = ("a ring runs CUDA kernels" if ex.language != "cuda" else
           "the ring driver passes arrays only" if ex.constants else
           "the ring is the exercise's timing; a pipeline would be a second one" if ex.pipeline is not None else
           "speed points come from the ring, so the exercise needs some" if ex.points.speed <= 0 else
           "the ring needs mine and left as float32" if any(p.np_dtype.name != "float32" for p in ex.arrays) else "")
    if why:
        return "ring", why
    return "", ""


def spec_problem(ex) -> tuple:
    """(field, problem) for the exercise kind's own fields: the language and Triton's (triton_source.py), a
    ring's (above); ('', '') when they fit."""
    from .triton_source import spec_problem as language_problem
    field, problem = language_problem(ex)
    return (field, problem) if problem else ring_spec_problem(ex)
