"""Name the CUDA error a student launch raised, in words a student can act on.

A sticky error (illegal address, ...) poisons the CUDA context: the result is ``fatal`` and the child
exits, so the remaining steps run in a fresh one. A refused launch leaves the context usable.

Running out of device memory is charged by who else is on the GPU: while other gradings share it (a batch),
their buffers may be what filled it, so it is a grader error and the batch grades the kernel once more with
the GPU to itself (batch/work.py); with no other grading on the GPU, a launch that runs out of memory is the
kernel's doing (local arrays reserved for every resident thread), a final "crashed" verdict.
"""
from __future__ import annotations

import re

from .device import context_alive

__all__ = ["classify_cuda_error", "module_load_problem", "share_gpu", "gpu_shared", "is_out_of_memory",
           "call_out_of_memory", "driver_failure"]

_STICKY = [
    (r"ILLEGAL_ADDRESS|illegal memory access|IllegalAddress",
     "an illegal memory access: your kernel read or wrote memory it does not own (an index far out of "
     "bounds, a negative index, or a pointer into the wrong array). Check the index arithmetic."),
    (r"MISALIGNED|misaligned",
     "a misaligned address: a wide load or store (float4, double) at an address not aligned to its size."),
    (r"ILLEGAL_INSTRUCTION|illegal instruction", "an illegal instruction was executed."),
    (r"HARDWARE_STACK_ERROR|stack error", "a hardware stack error (deep recursion or huge local arrays)."),
    (r"INVALID_PC|program counter", "an invalid program counter (a corrupted function pointer or stack)."),
    (r"ASSERT|assert", "a device-side assert() failed."),
    (r"LAUNCH_FAILED|unspecified launch failure|LaunchFailure", "the launch failed while running (unspecified "
     "launch failure: often an out-of-bounds access)."),
    (r"LAUNCH_TIMEOUT|timed out", "the kernel ran into the display watchdog timeout."),
]
_OUT_OF_MEMORY = r"OutOfMemoryError|OUT_OF_MEMORY|out of memory|MemoryAllocation"
# the run child's GPU lock (gpulock.GpuLock), given by `share_gpu`: gradings that share a GPU share a lock
# folder, a lone grading has none. Until it is given, an out-of-memory is not charged to the student.
_LOCK = None
_REFUSED = [
    (r"OUT_OF_RESOURCES|too many resources",
     "the GPU refused the launch: this block size needs more registers (or shared memory) than an SM has. "
     "Use a smaller block, or __launch_bounds__ to cap registers."),
    (r"INVALID_VALUE|invalid argument|INVALID_CONFIGURATION|invalid configuration",
     "the GPU refused the launch configuration: at most 1024 threads per block (blockDim.z <= 64), "
     "grid.y and grid.z at most 65535, and shared memory within the per-block limit."),
]


def classify_cuda_error(exc: BaseException, label: str, geo) -> dict:
    """A result dict for an exception raised by a student launch; ``fatal`` when the context is lost."""
    import course
    grid, block, smem = geo
    where = f"at {label} (grid {grid}, block {block}, {smem} B dynamic shared memory)"
    if isinstance(exc, course.LaunchError):
        return {"status": "failed", "message": f"could not launch {where}: {exc}", "fatal": False}
    text = f"{type(exc).__name__}: {exc}"
    if is_out_of_memory(text):
        return _out_of_memory(text, where)
    for pattern, what in _STICKY:
        if re.search(pattern, text):
            return {"status": "crashed", "message": f"crashed {where}: {what} ({text})", "fatal": True}
    for pattern, what in _REFUSED:
        if re.search(pattern, text):
            return {"status": "failed", "message": f"could not launch {where}: {what} ({text})",
                    "fatal": not context_alive()}
    return {"status": "crashed", "message": f"crashed {where}: {text}", "fatal": True}


def share_gpu(lock) -> None:
    """Give this grading child's GPU lock: other gradings share the GPU exactly when it has lock files."""
    global _LOCK
    _LOCK = lock


def gpu_shared() -> bool:
    """Whether other gradings may hold memory on this child's GPU now (True until `share_gpu` is called)."""
    return _LOCK is None or _LOCK.fds is not None


def is_out_of_memory(text: str) -> bool:
    """Whether an error's text (or a report's) says the GPU ran out of memory."""
    return bool(re.search(_OUT_OF_MEMORY, text or ""))


def _out_of_memory(text: str, where: str) -> dict:
    if gpu_shared():
        return {"status": "grader error", "fatal": True, "message": (
            f"the GPU ran out of memory {where} ({text}) in a batch, where other gradings share the GPU; "
            "their buffers may be what filled it, so this is not charged to you: the kernel is graded once "
            "more with the GPU to itself.")}
    return {"status": "crashed", "fatal": True, "message": (
        f"crashed {where}: out of memory ({text}), with no other grading on the GPU. Your launch needs more "
        "device memory than the GPU has free. The usual cause is local memory: an array declared inside the "
        "kernel (or deep recursion) is reserved for every thread the GPU can keep resident at once, so a "
        "100 KB array per thread asks for tens of GB. Keep per-thread arrays to a few values held in "
        "registers, or share a tile through __shared__ memory. (Graded on your own machine? Close other "
        "programs using the GPU, such as a notebook kernel, and grade again.)")}


def call_out_of_memory(text: str, label: str) -> dict:
    """A library call (or a grader-owned driver) that ran out of device memory: the buffers and the library's
    workspace are the grader's, never the student's doing, so a grader error. Beside other gradings the batch
    grades it again with the GPU to itself; alone, what else holds the GPU is the grader's machine's."""
    if gpu_shared():
        then = ("other gradings share the GPU in this batch and their buffers may be what filled it; the batch "
                "grades it once more with the GPU to itself.")
    else:
        then = ("no other grading was on the GPU, so another program holds its memory: close other programs "
                "using the GPU (a notebook kernel, say) and grade again.")
    return {"status": "grader error", "message": (
        f"the GPU ran out of memory making the call at {label} ({text}): the grader's buffers and the "
        f"library's workspace did not fit beside what else was on the GPU. Not charged to you: {then}")}


def module_load_problem(exc: BaseException) -> str:
    """Why a compiled module would not load, as the student's problem (never a grader error)."""
    text = f"{type(exc).__name__}: {exc}"
    if re.search(r"OUT_OF_MEMORY|out of memory|MemoryAllocation", text):
        what = ("it needs more device memory than this GPU has: a very large __device__ or __constant__ "
                "array? Allocate big buffers at run time, not as globals")
    elif re.search(r"NO_BINARY|INVALID_IMAGE|invalid.*image|SHARED_OBJECT", text):
        what = "the GPU rejected the compiled image"
    else:
        what = "the GPU refused it"
    return f"your compiled kernel could not be loaded on the GPU: {what} ({text})."


def driver_failure(ex, exc: BaseException, label: str, driver: str | None = None) -> dict:
    """The result of a `CallExercise` driver that raised (in a case or the pipeline step): out of memory is
    never the student's; nor is anything else when the driver is grader-owned (its kernels, buffers and
    copies), a grader error; a library call's failure is the student's arguments' doing, "crashed".
    ``driver``: the one that raised, when not the cases' (``ex.driver``)."""
    text = f"{type(exc).__name__}: {exc}"
    if is_out_of_memory(text):
        return call_out_of_memory(text, label)
    if ex.grader_owned:
        return {"status": "grader error", "message": (
            f"the grader's driver {driver or ex.driver} failed at {label} ({text}). It runs only the grader's own kernels, "
            "buffers and copies, so this is the grader's fault: not charged to you.")}
    return {"status": "crashed", "message": (
        f"the call failed on the GPU ({text}). Check every size and leading dimension against the buffers they "
        "describe.")}
