"""Name the CUDA error a student launch raised, in words a student can act on.

A sticky error (illegal address, ...) poisons the CUDA context: the result is ``fatal`` and the child
exits, so the remaining steps run in a fresh one. A refused launch leaves the context usable.
"""
from __future__ import annotations

import re

from .device import context_alive

__all__ = ["classify_cuda_error", "module_load_problem"]

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
    if re.search(_OUT_OF_MEMORY, text):
        # not charged to the student: gradings sharing a GPU can run it out of memory between them
        return {"status": "grader error", "fatal": True, "message": (
            f"the GPU ran out of memory {where} ({text}). When several gradings share the GPU this is the "
            "grader's doing, and a batch grades the kernel again on its next run; graded alone, a launch "
            "needs more memory than the GPU has (huge local arrays per thread?).")}
    for pattern, what in _STICKY:
        if re.search(pattern, text):
            return {"status": "crashed", "message": f"crashed {where}: {what} ({text})", "fatal": True}
    for pattern, what in _REFUSED:
        if re.search(pattern, text):
            return {"status": "failed", "message": f"could not launch {where}: {what} ({text})",
                    "fatal": not context_alive()}
    return {"status": "crashed", "message": f"crashed {where}: {text}", "fatal": True}


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
