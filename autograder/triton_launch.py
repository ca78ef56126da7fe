"""A compiled Triton kernel in the run child: loaded from its cubins by CuPy, launched like a CUDA kernel.

The run child never imports Triton and never sees the submission's Python: it gets the cubins the compile
child made (autograder/triton_build.py) and launches them the way Triton's own launcher would (one program
per grid cell, 32 x num_warps threads, the kernel's shared memory, and the trailing scratch pointers Triton
adds), so the harness checks and times a Triton kernel through the same code as a CUDA one. Launches go to
CuPy's current stream, the one the course's timer records its events on.
"""
from __future__ import annotations

import base64

import numpy as np

from .spec import Scalar
from .triton_build import int_scalars
from .triton_source import TRITON_SCALARS

__all__ = ["TritonKernel"]

_NUMPY = {"i32": np.int32, "u32": np.uint32, "i64": np.int64, "u64": np.uint64, "fp32": np.float32,
          "fp64": np.float64}
_SMEM_OPTIN = 8  # cudaFuncAttributeMaxDynamicSharedMemorySize


class TritonKernel:
    """``kernel(grid, block, *args, shared_mem=0, stream=None)`` as `course.Kernel` takes it; ``block`` and
    ``shared_mem`` are the compiled kernel's own (its num_warps and shared memory), whatever is passed."""

    def __init__(self, ex, program: dict):
        import cupy
        self.ex, self.name = ex, program["kernel"]
        self.ints = [i for i, _ in int_scalars(ex)]
        self.types = [TRITON_SCALARS[p.ctype] if isinstance(p, Scalar) else None for p in ex.kernel_params]
        self.variants = {}
        for key, v in program["variants"].items():
            module = cupy.cuda.function.Module()
            module.load(base64.b64decode(v["cubin"]))
            fn = module.get_function(v["name"])
            if int(v["shared"]) > 48 << 10:
                cupy.cuda.driver.funcSetAttribute(fn.ptr, _SMEM_OPTIN, int(v["shared"]))
            self.variants[key] = (module, fn, v)
        self.generic = "0" * len(self.ints)
        self._scratch = {}

    def variant(self, args) -> tuple:
        """The variant compiled for these arguments' divisibility, else the one that assumes nothing."""
        key = "".join("1" if int(args[i]) % 16 == 0 else "0" for i in self.ints)
        return self.variants.get(key) or self.variants[self.generic]

    def _scratch_ptr(self, v: dict, programs: int) -> int:
        size, align = v["global_scratch"]
        if not size:
            return 0
        import cupy
        want = size * programs + align
        buf = self._scratch.get(id(v))
        if buf is None or buf.nbytes < want:  # kept across launches: no allocation inside a timed launch
            buf = self._scratch[id(v)] = cupy.empty(want, dtype=cupy.uint8)
        return -(-buf.data.ptr // align) * align

    def __call__(self, grid, block, *args, shared_mem=0, stream=None, cooperative=False):
        _, fn, v = self.variant(args)
        grid = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        packed = [_NUMPY[t](a) if t else a for t, a in zip(self.types, args)]
        extra = int(v["params"]) - len(packed)
        if extra > 0:
            scratch = self._scratch_ptr(v, grid[0] * grid[1] * grid[2])
            packed += [np.uint64(scratch)] + [np.uint64(0)] * (extra - 1)
        fn(grid, (32 * int(v["num_warps"]), 1, 1), tuple(packed), shared_mem=int(v["shared"]), stream=stream)
