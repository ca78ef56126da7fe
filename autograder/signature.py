"""Compare a kernel's C parameter list with what the exercise declares, before anything runs.

A student who writes `double a` or swaps two parameters gets told so by name, instead of a
mismatch report full of garbage values.
"""
from __future__ import annotations

import re

import numpy as np

from course.source import strip_comments  # linear-time; the regex it replaces was quadratic

from .spec import Exercise, Scalar, _ctype_of, did_you_mean
from .tensormaps import TensorMap, param_problem

__all__ = ["compare_signature", "check_constants"]

# Every regex below runs on student text in the grader's parent process, so none may backtrack
# super-linearly: adjacent quantifiers never compete for the same characters, and scans that look for
# a closing bracket stop at the next opening one (tests/autograder/test_source_check.py times them).


def compare_signature(ex: Exercise, source: str) -> str:
    """'' when ``source`` defines ``ex.kernel`` with the expected parameters; else what differs."""
    if getattr(ex, "language", "cuda") == "triton":
        from .triton_source import compare_params
        return compare_params(ex, source)
    from course.source import parse_kernels
    kernels = parse_kernels(source)
    want = f"extern \"C\" __global__ void {ex.kernel}({ex.signature()})"
    if ex.kernel not in kernels:
        found = ", ".join(kernels) or "none"
        return (f"there is no kernel named {ex.kernel!r} (kernels found: {found})."
                f"{did_you_mean(ex.kernel, list(kernels))} The exercise expects: {want}")
    if not re.search(r'extern\s+"C"', strip_comments(source)):
        return (f"{ex.kernel} is not declared extern \"C\", so its compiled name is mangled and the grader "
                f"cannot find it. Declare it as: {want}")
    params = kernels[ex.kernel]
    expected = ex.kernel_params  # Constant arrays live in __constant__ symbols, not in the signature
    if len(params) != len(expected):
        got = ", ".join(p.describe() for p in params)
        extra = ""
        if ex.constants and any(p.name in {c.name for c in ex.constants} for p in params):
            extra = (" " + " and ".join(f"{c.name}" for c in ex.constants)
                     + " is not a parameter: the kernel reads it from "
                     + ", ".join(f"`{ex.constant_declaration(c)}`" for c in ex.constants) + ".")
        return (f"{ex.kernel} takes {len(params)} parameter(s) ({got}); the exercise expects "
                f"{len(expected)}: ({ex.signature()}).{extra}")
    for i, (mine, theirs) in enumerate(zip(expected, params), start=1):
        if isinstance(mine, TensorMap):  # a TMA map by value, not a pointer
            problem = param_problem(i, mine, theirs, source, ex.signature())
            if problem:
                return problem
        elif isinstance(mine, Scalar):
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
    return check_constants(ex, source)


def _defines(src: str) -> dict:
    """``#define NAME 1024`` (integer literals only) by name."""
    # "[ \t]*(?:\([ \t]*)?" rather than "[ \t]+\(?[ \t]*": two blank runs around an optional "(" let
    # a long run of blanks be split in quadratically many ways before the match fails
    return {m.group(1): int(m.group(2), 0) for m in re.finditer(
        r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(?:\([ \t]*)?(0[xX][0-9a-fA-F]+|\d+)[uUlL]*"
        r"[ \t]*(?:\)[ \t]*)?$", src, flags=re.M)}


def _extent(expr: str, defines: dict):
    """The value of an array extent: an integer literal, a #define'd one, or a product of those; else None."""
    total = 1
    for part in expr.split("*"):
        part = part.strip().strip("()").strip()
        part = re.sub(r"(?<=\d)[uUlL]+$", "", part)
        if re.fullmatch(r"0[xX][0-9a-fA-F]+|\d+", part):
            total *= int(part, 0)
        elif part in defines:
            total *= defines[part]
        else:
            return None
    return total


# The qualifiers are matched atomically (a lookahead's capture, then a backreference to it: Python 3.10
# has no (?>...)), else k of them could be shared out between them and the type words in k ways, each
# rescanning the rest. A type is words, none __constant__, so a match never runs into the next
# declaration; an extent holds no bracket, brace or semicolon.
_QUALIFIERS = r"(?=(?P<quals>(?:\s+(?:__device__|const|static|volatile|__align__\s*\(\s*\d+\s*\)))*))(?P=quals)"
_TYPE = r"(?P<type>(?!__constant__\b)[A-Za-z_]\w*(?:\s+(?!__constant__\b)[A-Za-z_]\w*)*?)"
_EXTENTS = r"(?P<extents>(?:\[[^\[\];{}]*\]\s*)+)"


def check_constants(ex: Exercise, source: str) -> str:
    """'' when ``source`` declares each `Constant` of ``ex`` as a big enough ``__constant__`` array."""
    if not ex.constants:
        return ""
    src = strip_comments(source)
    defines = _defines(src)
    for c in ex.constants:
        ctype = _ctype_of(c.np_dtype)
        try:
            need = ex.constant_capacity(c)
        except Exception:
            need = None
        decl = f"__constant__ {ctype} {c.name}[{need if need is not None else 'N'}]"
        how = (f"Declare it at file scope (outside any function, above the kernel), e.g. `{decl};`, and read "
               f"{c.name}[j] in the kernel: the grader copies the values into it before every launch. It is "
               f"not a kernel parameter: the exercise expects ({ex.signature()}).")
        m = re.search(rf"\b__constant__{_QUALIFIERS}\s+{_TYPE}\s*\b{re.escape(c.name)}\s*{_EXTENTS}", src)
        if m is None:
            other = re.search(rf"\b{re.escape(c.name)}\s*\[", src) and re.search(
                rf"\b__constant__(?:(?!__constant__)[^;{{}}])*?\b{re.escape(c.name)}\b", src)
            if other:
                return (f"the exercise reads {c.name} from `{decl}`, and the __constant__ declaration of "
                        f"{c.name} in your source is not an array of {ctype}. {how}")
            return f"the exercise reads {c.name} from `{decl}`, and your source declares no such array. {how}"
        got_type = " ".join(m.group("type").split())
        got_type = re.sub(r"^(?:const|volatile)\s+", "", got_type)
        if got_type != ctype:
            return (f"your source declares `__constant__ {got_type} {c.name}[...]`, but the grader fills {c.name} "
                    f"with {c.np_dtype.name} values: declare `{decl}`.")
        if need is None:
            continue
        dims = [_extent(d, defines) for d in re.findall(r"\[([^\]]*)\]", m.group("extents"))]
        if any(d is None for d in dims):
            continue  # an extent we cannot resolve simply: the capacity is not checked
        cap = 1
        for d in dims:
            cap *= d
        if cap < need:
            return (f"`__constant__ {ctype} {c.name}` holds {cap} elements, but the exercise fills up to {need} "
                    f"of them (its largest size): declare `{decl}`.")
    return ""
