"""Inputs, guard zones, poison and output checks: what makes a wrong kernel visible.

Every array the student kernel sees sits inside a larger allocation with random guard bytes before
and after it, so an out-of-bounds write is caught even where compute-sanitizer would miss it (inside
CuPy's pooled blocks). Outputs are poisoned before every call with NaN payloads no arithmetic makes.
"""
from __future__ import annotations

import math

import numpy as np

from .spec import Constant, In, InOut, Out, Scalar, Uniform, default_generator, evaluate, shape_of

__all__ = ["sample_inputs", "GUARD_BYTES", "POISON_BITS", "UINT", "poison_bits", "fill_output", "draw", "scalar_value", "make_inputs",
           "numpy_reference", "Guarded", "flat_index", "tolerance", "output_problem", "runs_differ",
           "device_bad_count"]

# a multiple of 128 bytes: a guarded view keeps its allocation's alignment (CuPy's 512 bytes), and a TMA map
# of it (tensormaps.py) needs a 16-byte aligned base
GUARD_BYTES = 1 << 20
# quiet NaNs with payloads no arithmetic produces, so "never written" can be told from "computed NaN";
# variant 1 differs so an element left unwritten changes between the two runs
POISON_BITS = {
    "float32": (0x7FC0FFEE, 0xFFC0BEEF),
    "float64": (0x7FF8DEADBEEF0001, 0xFFF8DEADBEEF0002),
    "float16": (0x7E5A, 0xFE5B),
}
UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def poison_bits(dtype, variant: int) -> int:
    dt = np.dtype(dtype)
    if dt.name in POISON_BITS:
        return POISON_BITS[dt.name][variant]
    return (1 << (8 * dt.itemsize)) - 1 if variant == 0 else 0  # 0xFF.. then 0x00..


def fill_output(buf, p, variant: int = 0) -> None:
    """Fill output ``buf`` of param ``p`` before a run: its ``fill`` value, or the poison of ``variant``."""
    if p.fill != "poison":
        buf.fill(p.fill)
    else:
        u = UINT[p.np_dtype.itemsize]
        buf.reshape(-1).view(u).fill(u(poison_bits(p.np_dtype, variant)))


def draw(gen, rng, shape, dtype):
    dt = np.dtype(dtype)
    gen = gen or default_generator(dt)
    if isinstance(gen, Uniform):
        if dt.kind == "f" and dt.itemsize <= 4:  # float32 draws are twice as fast for big arrays
            return (rng.random(size=shape, dtype=np.float32) * np.float32(gen.high - gen.low)
                    + np.float32(gen.low)).astype(dt)
        return gen.draw(rng, shape, dt)
    return np.ascontiguousarray(np.asarray(gen(rng, shape, dt), dtype=dt).reshape(shape))


def scalar_value(p: Scalar, sizes: dict, rng):
    dt = p.np_dtype
    if isinstance(p.value, Uniform):
        v = p.value.draw(rng, (), dt)
    elif callable(p.value):
        v = p.value(dict(sizes), rng)
    else:
        v = evaluate(p.value, sizes)
    return dt.type(v)


def make_inputs(ex, sizes: dict, rng) -> tuple:
    """(host arrays of In/InOut/Constant by name, typed scalars by name) for one size case."""
    arrays, scalars = {}, {}
    for p in ex.params:
        if isinstance(p, Scalar):
            scalars[p.name] = scalar_value(p, sizes, rng)
        elif isinstance(p, (In, InOut, Constant)):
            arrays[p.name] = draw(p.gen, rng, shape_of(p.shape, sizes), p.np_dtype)
    return arrays, scalars


def sample_inputs(ex, sizes: dict, seed: int = 0) -> dict:
    """Inputs of one size case drawn as the grader draws them (the spec's own generators and scalars), on the host,
    from ``seed``: name -> array or typed scalar, in the order of the kernel's parameters (outputs left out).
    For notebooks' self-checks and benchmark rows, which should test what the grader tests; never the grading's
    own seed."""
    arrays, scalars = make_inputs(ex, sizes, np.random.default_rng(seed))
    both = {**arrays, **scalars}
    return {p.name: both[p.name] for p in ex.params if p.name in both}


def numpy_reference(ex, sizes, host, scalars) -> dict:
    inputs = {**sizes, **scalars, **{k: v.copy() for k, v in host.items()}}
    got = ex.reference(inputs)
    out = {}
    for p in ex.arrays:
        if isinstance(p, (Out, InOut)):
            if p.name not in got:
                raise RuntimeError(f"the spec's reference for {ex.name} returned no {p.name!r} (it returned "
                                   f"{sorted(got)})")
            out[p.name] = np.asarray(got[p.name]).astype(p.np_dtype, copy=False).reshape(shape_of(p.shape, sizes))
    return out


# -- buffers with guard zones ------------------------------------------------------------------

class Guarded:
    def __init__(self, cp, p, shape, before, after):
        self.p, self.shape, self.dtype = p, shape, p.np_dtype
        self.n = math.prod(shape)
        self.nbytes = self.n * self.dtype.itemsize
        self.raw = cp.empty(2 * GUARD_BYTES + self.nbytes, dtype=cp.uint8)
        self.raw[:GUARD_BYTES] = before
        self.raw[GUARD_BYTES + self.nbytes:] = after
        self.bytes = self.raw[GUARD_BYTES:GUARD_BYTES + self.nbytes]
        self.view = self.bytes.view(self.dtype).reshape(shape)
        self.before, self.after = before, after

    def guard_problem(self, cp, language: str = "cuda") -> str:
        name, n, size = self.p.name, self.n, self.dtype.itemsize
        bad_after = cp.flatnonzero(self.raw[GUARD_BYTES + self.nbytes:] != self.after)
        bad_before = cp.flatnonzero(self.raw[:GUARD_BYTES] != self.before)
        msgs = []
        if bad_after.size:
            lo, hi = n + int(bad_after[0]) // size, n + int(bad_after[-1]) // size
            span = f"{name}[{lo}]" if lo == hi else f"{name}[{lo}] .. {name}[{hi}]"
            msgs.append(f"out of bounds: your kernel wrote {span}, past the end of {name} ({n} elements, "
                        f"valid indices 0..{n - 1}).")
        if bad_before.size:
            lo = (int(bad_before[0]) - GUARD_BYTES) // size
            hi = (int(bad_before[-1]) - GUARD_BYTES) // size
            span = f"{name}[{lo}]" if lo == hi else f"{name}[{lo}] .. {name}[{hi}]"
            msgs.append(f"out of bounds: your kernel wrote {span}, before the start of {name}.")
        if msgs and language == "triton":
            msgs.append("Check the mask of every tl.store (e.g. `mask=offs < n`, rows and columns in 2D): the last "
                        "program's tile reaches past the end of the array.")
        elif msgs:
            msgs.append("Check the bounds test (e.g. `if (i < n)`, for x and y in 2D) and that the last, "
                        "partly filled block does not write.")
        return " ".join(msgs)


def flat_index(shape, flat: int) -> str:
    if len(shape) <= 1:
        return f"[{flat}]"
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


def tolerance(ex, dtype):
    """(rtol, atol) for course.check; None lets course pick the dtype default (atol scaled to the data)."""
    if np.dtype(dtype).kind in "iub" or ex.tolerance == "exact":
        return 0.0, 0.0
    if ex.tolerance is None:
        return None, None
    return ex.tolerance.rtol, ex.tolerance.atol


def output_problem(ex, p, got: np.ndarray, want: np.ndarray, variant: int) -> str:
    import course
    rtol, atol = tolerance(ex, p.np_dtype)
    if ex.tolerance == "exact" and p.np_dtype.kind == "f":
        same = got.view(UINT[p.np_dtype.itemsize]) == want.view(UINT[p.np_dtype.itemsize])
        if same.all():
            return ""
    res = course.check(got, want, rtol=rtol, atol=atol, name=p.name)
    if res:
        return ""
    msg = res.message
    if p.np_dtype.kind == "f" and isinstance(p, Out) and p.fill == "poison":
        bits = got.view(UINT[p.np_dtype.itemsize])
        unwritten = int(np.count_nonzero(bits == poison_bits(p.np_dtype, variant)))
        nans = int(np.count_nonzero(np.isnan(got)))
        if unwritten:
            first = int(np.flatnonzero(bits.ravel() == poison_bits(p.np_dtype, variant))[0])
            msg += (f"\n{unwritten} element(s) still hold the NaN the grader fills outputs with, first "
                    f"{p.name}{flat_index(got.shape, first)}: never written (does the grid cover every "
                    f"element?), or computed from {p.name} itself, which is output-only.")
        if nans > unwritten:
            msg += (f"\n{nans - unwritten} element(s) are a NaN your kernel computed. The grader fills outputs "
                    f"with NaN before each run, so reading {p.name} before writing it (e.g. `+=` on an "
                    "output-only array) gives NaN.")
    return msg


def runs_differ(ex, first: dict, second: dict) -> str:
    for p in ex.arrays:
        if not isinstance(p, (Out, InOut)):
            continue
        a, b = first[p.name], second[p.name]
        u = UINT[p.np_dtype.itemsize]
        diff = np.flatnonzero((a.view(u) != b.view(u)).ravel())
        if diff.size:
            i = int(diff[0])
            return (f"{p.name}: {diff.size} of {a.size} values differ between two runs on the same inputs (first "
                    f"at {p.name}{flat_index(a.shape, i)}: {a.ravel()[i]!r}, then {b.ravel()[i]!r}). A correct "
                    "kernel gives the same result every time: this is a race (threads reading or writing data "
                    "other threads write, without __syncthreads() or atomics), or elements that are never "
                    "written (the grader fills outputs differently before each run).")
    return ""



def device_bad_count(ex, p, got, want) -> int:
    """Elements of ``got`` that the host check (`output_problem`) would call wrong against ``want``, counted
    on the device with the same rule; 0 is a pass, anything else goes to `output_problem` for the message."""
    from .device_ops import count_bad
    rtol, atol = tolerance(ex, p.np_dtype)
    n = count_bad(got, want, rtol, atol)
    if n is not None:
        return n
    # dtypes the device rule does not cover: the host check on copies (rare: no spec has one now)
    from .device import backend
    be = backend()
    return 0 if not output_problem(ex, p, be.host(got), be.host(want), 0) else 1
