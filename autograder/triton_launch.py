"""A compiled Triton kernel in the run child: loaded from its cubins by CuPy, launched like a CUDA kernel.

The run child never imports Triton and never sees the submission's Python: it gets the cubins the compile
child made (autograder/triton_build.py, through `course.triton.compile_for`) and launches them with
`course.triton.Loaded`, the lesson's own launcher (one program per grid cell, 32 x num_warps threads, the
kernel's shared memory and Triton's trailing scratch pointers, on CuPy's current stream, where the course's
timer records its events). So the harness checks and times a Triton kernel through the same code as a CUDA one.
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


class TritonKernel:
    """``kernel(grid, block, *args, shared_mem=0, stream=None)`` as `course.Kernel` takes it; ``block`` and
    ``shared_mem`` are the compiled kernel's own (its num_warps and shared memory), whatever is passed, and it
    runs on CuPy's current stream."""

    def __init__(self, ex, program: dict):
        from course.triton import Compiled, Loaded
        self.ex, self.name = ex, program["kernel"]
        self.ints = [i for i, _ in int_scalars(ex)]
        self.types = [TRITON_SCALARS[p.ctype] if isinstance(p, Scalar) else None for p in ex.kernel_params]
        fields = {f for f in Compiled.__dataclass_fields__}
        self.variants = {key: Loaded(Compiled(**{k: v[k] for k in fields if k in v} | {
                             "cubin": base64.b64decode(v["cubin"]), "scratch": tuple(v["scratch"]),
                             "cluster": tuple(v["cluster"])}))
                         for key, v in program["variants"].items()}
        self.generic = "0" * len(self.ints)

    def variant(self, args):
        """The variant compiled for these arguments' divisibility, else the one that assumes nothing."""
        key = "".join("1" if int(args[i]) % 16 == 0 else "0" for i in self.ints)
        return self.variants.get(key) or self.variants[self.generic]

    def __call__(self, grid, block, *args, shared_mem=0, stream=None, cooperative=False):
        self.variant(args)(grid, [_NUMPY[t](a) if t else a for t, a in zip(self.types, args)])
