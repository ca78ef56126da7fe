"""The grading child's view of the GPU: one backend object, and launching with typed arguments.

The harness reaches the device only through `backend()`, so CPU tests substitute a NumPy backend and
Python "kernels" and exercise the whole checking protocol without a GPU.
"""
from __future__ import annotations

import contextlib

import numpy as np

from .spec import Scalar

__all__ = ["CupyBackend", "backend", "launch", "kernel_args", "set_constants", "context_alive", "py_value",
           "gpu_sections"]


class CupyBackend:
    """The GPU: CuPy arrays, CUDA events, the course's interleaved timer.

    The harness reaches the device only through this object, so CPU tests substitute a NumPy
    backend and Python "kernels" and exercise the whole checking protocol without a GPU.
    """

    def __init__(self):
        import cupy
        self.xp = cupy

    def sync(self) -> None:
        self.xp.cuda.runtime.deviceSynchronize()

    def host(self, a) -> np.ndarray:
        return self.xp.asnumpy(a)

    def time_ms(self, fn) -> float:
        start, end = self.xp.cuda.Event(), self.xp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return self.xp.cuda.get_elapsed_time(start, end)

    def interleaved(self, fns: dict, **kw) -> dict:
        import course
        return course.interleaved(fns, **kw)

    def copy_fn(self, dst, src):
        cp = self.xp
        return lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, 3,
                                                   cp.cuda.get_current_stream().ptr)

    def free_cached(self) -> None:
        self.xp.get_default_memory_pool().free_all_blocks()

    def set_constant(self, kernel, name: str, values) -> None:
        """Copy device array ``values`` into the ``__constant__`` symbol ``name`` of ``kernel``'s module.

        On the current stream (`course.interleaved` times on its own non-blocking stream; the synchronous
        ``copy_from_device`` would go to the legacy default stream, unordered with its launches).
        """
        symbol = kernel.module.get_global(name)
        symbol.copy_from_device_async(values.data, values.nbytes, self.xp.cuda.get_current_stream())


BACKEND = None


def backend():
    global BACKEND
    if BACKEND is None:
        BACKEND = CupyBackend()
    return BACKEND


def py_value(v):
    return v.item() if isinstance(v, np.generic) else v


def kernel_args(ex, arrays: dict, scalars: dict, cfg: dict) -> list:
    """The kernel's arguments in C order; `Constant` arrays are not arguments (see `set_constants`).

    A `TensorMap` param's argument is the TMA map of ``arrays[name]`` (that very buffer: the map holds its
    address), its box from the launch configuration ``cfg`` this kernel runs with: the student's LAUNCH for the
    student's kernel, ``launch_defaults`` for the reference. Encoding a map is a driver call: make the
    arguments before a timed region, not inside it.
    """
    from .tensormaps import TensorMap, argument
    return [py_value(scalars[p.name]) if isinstance(p, Scalar) else
            argument(p, arrays[p.name], cfg) if isinstance(p, TensorMap) else arrays[p.name]
            for p in ex.kernel_params]


def set_constants(ex, kernel, values: dict) -> None:
    """Copy the drawn `Constant` values (device arrays by name) into ``kernel``'s module's symbols.

    Called before every launch that uses another input set, never inside a timed region.
    """
    for c in ex.constants:
        backend().set_constant(kernel, c.name, values[c.name])


def launch(kernel, geo, args, sync=True):
    grid, block, smem = geo
    kernel(grid, block, *args, shared_mem=smem)
    if sync:
        backend().sync()


def context_alive() -> bool:
    try:
        backend().sync()
        return True
    except Exception:
        return False


def gpu_sections(ctx) -> tuple:
    """(shared, alone): context-manager factories for this grading's GPU work beside other gradings'.

    Untimed work (correctness runs and checks, fresh inputs, expected outputs) runs ``shared``: it overlaps
    other gradings' untimed work, and it has finished (device synchronised) before the lock is let go.
    Timed work runs ``alone``: the lock held exclusive, so no other grading's kernel runs during it (one
    pass of `course.interleaved` at a time in the speed step; the whole pipeline step). A lone grading has
    no lock (NO_LOCK).
    """
    lock = getattr(ctx, "gpu_lock", None)
    if getattr(lock, "fds", None) is None:  # NO_LOCK, or GpuLock(None) in a lone grading's child
        return contextlib.nullcontext, contextlib.nullcontext

    @contextlib.contextmanager
    def shared():
        with lock.shared():
            yield
            try:
                backend().sync()
            except Exception:
                pass  # a sticky CUDA error, already reported by the body: nothing of ours runs on any more

    @contextlib.contextmanager
    def alone():
        backend().sync()
        with lock.exclusive():
            yield
    return shared, alone
