"""Compare a kernel's C parameter list with what the exercise declares, before anything runs.

A student who writes `double a` or swaps two parameters gets told so by name, instead of a
mismatch report full of garbage values.
"""
from __future__ import annotations

import re

import numpy as np

from .spec import Exercise, Scalar, did_you_mean

__all__ = ["compare_signature"]


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def compare_signature(ex: Exercise, source: str) -> str:
    """'' when ``source`` defines ``ex.kernel`` with the expected parameters; else what differs."""
    from course._signature import parse_kernels
    kernels = parse_kernels(source)
    want = f"extern \"C\" __global__ void {ex.kernel}({ex.signature()})"
    if ex.kernel not in kernels:
        found = ", ".join(kernels) or "none"
        return (f"there is no kernel named {ex.kernel!r} (kernels found: {found})."
                f"{did_you_mean(ex.kernel, list(kernels))} The exercise expects: {want}")
    if not re.search(r'extern\s+"C"', _strip_comments(source)):
        return (f"{ex.kernel} is not declared extern \"C\", so its compiled name is mangled and the grader "
                f"cannot find it. Declare it as: {want}")
    params = kernels[ex.kernel]
    if len(params) != len(ex.params):
        got = ", ".join(p.describe() for p in params)
        return (f"{ex.kernel} takes {len(params)} parameter(s) ({got}); the exercise expects "
                f"{len(ex.params)}: ({ex.signature()})")
    for i, (mine, theirs) in enumerate(zip(ex.params, params), start=1):
        if isinstance(mine, Scalar):
            if theirs.pointer:
                return (f"parameter {i} ({theirs.describe()}) should be the value {mine.ctype} {mine.name}, "
                        f"not a pointer; expected ({ex.signature()})")
            if theirs.dtype is None or np.dtype(theirs.dtype) != mine.np_dtype:
                return (f"parameter {i} is {theirs.describe()}, but the exercise passes {mine.ctype} "
                        f"{mine.name}; expected ({ex.signature()})")
        else:
            if not theirs.pointer:
                return (f"parameter {i} ({theirs.describe()}) should be a pointer to the array {mine.name}; "
                        f"expected ({ex.signature()})")
            if theirs.dtype is not None and np.dtype(theirs.dtype) != mine.np_dtype:
                return (f"parameter {i} is {theirs.describe()}, but {mine.name} holds {mine.np_dtype.name}; "
                        f"expected ({ex.signature()})")
    return ""
