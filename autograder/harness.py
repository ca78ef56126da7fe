"""What the grading child does on the GPU: compile, test one size, time against the reference, and run
the kernel through a grader-owned pipeline (exercises with a `Pipeline`).

Imported only inside a grading child (see worker.py); the parent never loads CuPy or CUDA.
Every array the student kernel sees sits inside a larger allocation with random guard bytes before
and after it, so an out-of-bounds write is caught even where compute-sanitizer would miss it (inside
CuPy's pooled blocks). Outputs are poisoned before every call; every run is followed by checks of the
guards, the inputs and the outputs.
"""
from __future__ import annotations

import math
import re
import time

import numpy as np

from . import policy
from .launchcfg import reference_launch
from .loader import reference_source
from .spec import Constant, In, InOut, Out, Scalar, Uniform, cdiv, default_generator, evaluate, shape_of
from .worker import SETUP_TIMEOUT_S

__all__ = ["GUARD_BYTES", "TIMING_SETS", "POISON_BITS", "CupyBackend", "backend", "probe", "limit_printf",
           "Context", "compile_step", "correctness_step", "timing_step", "pipeline_step", "make_inputs",
           "classify_cuda_error", "poison_bits"]

GUARD_BYTES = 1 << 20
TIMING_SETS = 3            # input sets rotated through the timed runs
TIMING_BUDGET_S = 1.0      # per interleaved round
TIMING_MAX_SAMPLES = 60
PRINTF_FIFO_BYTES = 64 << 10

# quiet NaNs with payloads no arithmetic produces, so "never written" can be told from "computed NaN";
# variant 1 differs so an element left unwritten changes between the two runs
POISON_BITS = {
    "float32": (0x7FC0FFEE, 0xFFC0BEEF),
    "float64": (0x7FF8DEADBEEF0001, 0xFFF8DEADBEEF0002),
    "float16": (0x7E5A, 0xFE5B),
}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


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


def poison_bits(dtype, variant: int) -> int:
    dt = np.dtype(dtype)
    if dt.name in POISON_BITS:
        return POISON_BITS[dt.name][variant]
    return (1 << (8 * dt.itemsize)) - 1 if variant == 0 else 0  # 0xFF.. then 0x00..


# -- environment -------------------------------------------------------------------------------

def probe():
    """(True, device dict) or (False, why there is no usable GPU)."""
    import course
    if not course.gpu_available():
        try:
            course.device_info()
        except course.NoGPUError as exc:
            return False, str(exc)
        return False, "no usable GPU"
    d = course.device_info()
    return True, {"name": d.name, "cc": list(d.cc), "arch": d.arch, "l2_bytes": int(d.l2_bytes),
                  "sm_count": int(d.sm_count)}


def limit_printf() -> None:
    """Keep a printf-happy kernel from writing megabytes per launch into the log."""
    try:
        import cupy
        rt = cupy.cuda.runtime
        rt.deviceSetLimit(getattr(rt, "cudaLimitPrintfFifoSize", 1), PRINTF_FIFO_BYTES)
    except Exception:
        pass


class Context:
    """State one child keeps across steps: the exercise, compiled kernels, timing buffers."""

    def __init__(self, ex, source: str, launch_cfg: dict, seed: int, device: dict, arm):
        self.ex, self.source, self.cfg, self.seed = ex, source, dict(launch_cfg), seed
        self.device, self.l2 = device, int(device["l2_bytes"])
        self.arm = arm
        self.student = self.reference = None
        self.timing = None

    def geometry(self, sizes: dict, cfg: dict):
        grid, block, smem = self.ex.launch(dict(sizes), dict(cfg))
        return grid, block, int(smem)


# -- compile -----------------------------------------------------------------------------------

def compile_step(ctx: Context) -> dict:
    import course
    ex = ctx.ex
    try:
        module = course.compile(ctx.source, options=tuple(ex.options), name=f"{ex.name}.cu")
    except course.CompileError as exc:
        return {"status": "compile error", "message": str(exc), "log": exc.log}
    try:
        ctx.student = module.kernel(ex.kernel)
    except KeyError as exc:
        return {"status": "compile error", "message": exc.args[0] if exc.args else str(exc)}
    for c in ex.constants:  # the symbols the grader fills before every run must be there to fill
        try:
            module.get_global(c.name)
        except Exception as exc:
            return {"status": "compile error", "message": (
                f"the compiled module has no __constant__ symbol {c.name!r} to fill ({type(exc).__name__}: "
                f"{exc}). Declare `{ex.constant_declaration(c)};` at file scope, outside any namespace, "
                "without `static`, and read it in the kernel.")}
    ref_module = course.compile(reference_source(ex), options=tuple(ex.options), name=ex.source_file)
    ctx.reference = ref_module.kernel(ex.kernel)
    notes = []
    try:
        res = ctx.student.resources
        if res.spill_stores or res.spill_loads:
            notes.append(f"{ex.kernel} spills registers to local memory ({res.summary()}); that costs speed.")
    except Exception:
        pass
    if ex.required_sass:
        try:
            sass = module.sass()
        except (FileNotFoundError, RuntimeError) as exc:
            notes.append(f"the required instructions ({', '.join(ex.required_sass)}) were not checked: {exc}")
        else:
            missing = [op for op in ex.required_sass if not re.search(rf"\b{re.escape(op)}\b", sass)]
            if missing:
                return {"status": "failed", "notes": notes, "message": (
                    f"This exercise must use {', '.join(ex.required_sass)} instructions, and the machine code "
                    f"(SASS) of your kernel has no {', '.join(missing)}. Check that the intended path "
                    f"(e.g. WMMA / mma.sync for HMMA) is really compiled in and not behind a disabled branch.")}
    return {"status": "ok", "log": (module.log or "").strip()[-2000:], "notes": notes}


# -- inputs ------------------------------------------------------------------------------------

def _draw(gen, rng, shape, dtype):
    dt = np.dtype(dtype)
    gen = gen or default_generator(dt)
    if isinstance(gen, Uniform):
        if dt.kind == "f" and dt.itemsize <= 4:  # float32 draws are twice as fast for big arrays
            return (rng.random(size=shape, dtype=np.float32) * np.float32(gen.high - gen.low)
                    + np.float32(gen.low)).astype(dt)
        return gen.draw(rng, shape, dt)
    return np.ascontiguousarray(np.asarray(gen(rng, shape, dt), dtype=dt).reshape(shape))


def _scalar_value(p: Scalar, sizes: dict, rng):
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
            scalars[p.name] = _scalar_value(p, sizes, rng)
        elif isinstance(p, (In, InOut, Constant)):
            arrays[p.name] = _draw(p.gen, rng, shape_of(p.shape, sizes), p.np_dtype)
    return arrays, scalars


def _py(v):
    return v.item() if isinstance(v, np.generic) else v


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

class _Guarded:
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

    def guard_problem(self, cp) -> str:
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
        if msgs:
            msgs.append("Check the bounds test (e.g. `if (i < n)`, for x and y in 2D) and that the last, "
                        "partly filled block does not write.")
        return " ".join(msgs)


def _flat_index(shape, flat: int) -> str:
    if len(shape) <= 1:
        return f"[{flat}]"
    return "[" + ", ".join(str(int(i)) for i in np.unravel_index(flat, shape)) + "]"


# -- launching ---------------------------------------------------------------------------------

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
    for pattern, what in _STICKY:
        if re.search(pattern, text):
            return {"status": "crashed", "message": f"crashed {where}: {what} ({text})", "fatal": True}
    for pattern, what in _REFUSED:
        if re.search(pattern, text):
            return {"status": "failed", "message": f"could not launch {where}: {what} ({text})",
                    "fatal": not _context_alive()}
    return {"status": "crashed", "message": f"crashed {where}: {text}", "fatal": True}


def _context_alive() -> bool:
    try:
        backend().sync()
        return True
    except Exception:
        return False


def _args(ex, arrays: dict, scalars: dict) -> list:
    """The kernel's arguments in C order; `Constant` arrays are not arguments (see `_set_constants`)."""
    return [_py(scalars[p.name]) if isinstance(p, Scalar) else arrays[p.name] for p in ex.kernel_params]


def _set_constants(ex, kernel, values: dict) -> None:
    """Copy the drawn `Constant` values (device arrays by name) into ``kernel``'s module's symbols.

    Called before every launch that uses another input set, never inside a timed region.
    """
    for c in ex.constants:
        backend().set_constant(kernel, c.name, values[c.name])


def _launch(kernel, geo, args, sync=True):
    grid, block, smem = geo
    kernel(grid, block, *args, shared_mem=smem)
    if sync:
        backend().sync()


def _timed_reference(ctx, sizes, host, scalars) -> tuple:
    """Run the reference kernel once; (outputs on the host, milliseconds)."""
    be = backend()
    cp = be.xp
    ex = ctx.ex
    arrays = {}
    for p in ex.arrays:
        shape = shape_of(p.shape, sizes)
        if isinstance(p, (In, InOut)):
            arrays[p.name] = cp.asarray(host[p.name])
        else:
            arrays[p.name] = cp.zeros(shape, dtype=p.np_dtype)
            if p.fill != "poison":
                arrays[p.name].fill(p.fill)
    geo = ctx.geometry(sizes, ex.launch_defaults)
    if ex.constants:
        _set_constants(ex, ctx.reference, {c.name: cp.asarray(host[c.name]) for c in ex.constants})
        be.sync()
    ms = be.time_ms(lambda: _launch(ctx.reference, geo, _args(ex, arrays, scalars), sync=False))
    outs = {p.name: be.host(arrays[p.name]) for p in ex.arrays if isinstance(p, (Out, InOut))}
    return outs, ms


def _tolerance(ex, dtype):
    """(rtol, atol) for course.check; None lets course pick the dtype default (atol scaled to the data)."""
    if np.dtype(dtype).kind in "iub" or ex.tolerance == "exact":
        return 0.0, 0.0
    if ex.tolerance is None:
        return None, None
    return ex.tolerance.rtol, ex.tolerance.atol


def _output_problem(ex, p, got: np.ndarray, want: np.ndarray, variant: int) -> str:
    import course
    rtol, atol = _tolerance(ex, p.np_dtype)
    if ex.tolerance == "exact" and p.np_dtype.kind == "f":
        same = got.view(_UINT[p.np_dtype.itemsize]) == want.view(_UINT[p.np_dtype.itemsize])
        if same.all():
            return ""
    res = course.check(got, want, rtol=rtol, atol=atol, name=p.name)
    if res:
        return ""
    msg = res.message
    if p.np_dtype.kind == "f" and isinstance(p, Out) and p.fill == "poison":
        bits = got.view(_UINT[p.np_dtype.itemsize])
        unwritten = int(np.count_nonzero(bits == poison_bits(p.np_dtype, variant)))
        nans = int(np.count_nonzero(np.isnan(got)))
        if unwritten:
            first = int(np.flatnonzero(bits.ravel() == poison_bits(p.np_dtype, variant))[0])
            msg += (f"\n{unwritten} element(s) still hold the NaN the grader fills outputs with, first "
                    f"{p.name}{_flat_index(got.shape, first)}: never written (does the grid cover every "
                    f"element?), or computed from {p.name} itself, which is output-only.")
        if nans > unwritten:
            msg += (f"\n{nans - unwritten} element(s) are a NaN your kernel computed. The grader fills outputs "
                    f"with NaN before each run, so reading {p.name} before writing it (e.g. `+=` on an "
                    "output-only array) gives NaN.")
    return msg


def _runs_differ(ex, first: dict, second: dict) -> str:
    for p in ex.arrays:
        if not isinstance(p, (Out, InOut)):
            continue
        a, b = first[p.name], second[p.name]
        u = _UINT[p.np_dtype.itemsize]
        diff = np.flatnonzero((a.view(u) != b.view(u)).ravel())
        if diff.size:
            i = int(diff[0])
            return (f"{p.name}: {diff.size} of {a.size} values differ between two runs on the same inputs (first "
                    f"at {p.name}{_flat_index(a.shape, i)}: {a.ravel()[i]!r}, then {b.ravel()[i]!r}). A correct "
                    "kernel gives the same result every time: this is a race (threads reading or writing data "
                    "other threads write, without __syncthreads() or atomics), or elements that are never "
                    "written (the grader fills outputs differently before each run).")
    return ""


# -- one test size -----------------------------------------------------------------------------

def correctness_step(ctx: Context, index: int) -> dict:
    """Run the student kernel twice at one size case and check everything; a result dict."""
    be = backend()
    cp = be.xp
    ex = ctx.ex
    sizes = ex.resolve_sizes(ex.sizes[index], ctx.l2)
    label = ex.size_label(sizes)
    base = {"sizes": sizes}
    rng = np.random.default_rng([ctx.seed, index])
    host, scalars = make_inputs(ex, sizes, rng)
    try:
        geo = ctx.geometry(sizes, ctx.cfg)
    except Exception as exc:
        return {**base, "status": "failed",
                "message": f"the launch configuration {ctx.cfg} does not work at {label}: {exc}"}
    ref_out, ref_ms = _timed_reference(ctx, sizes, host, scalars)
    expected = ref_out if ex.reference == "kernel" else numpy_reference(ex, sizes, host, scalars)
    base["ref_ms"] = ref_ms
    before = cp.asarray(rng.integers(0, 256, GUARD_BYTES, dtype=np.uint8))
    after = cp.asarray(rng.integers(0, 256, GUARD_BYTES, dtype=np.uint8))
    bufs, pristine = {}, {}
    for p in ex.arrays:
        bufs[p.name] = _Guarded(cp, p, shape_of(p.shape, sizes), before, after)
        if isinstance(p, (In, InOut)):
            pristine[p.name] = cp.asarray(host[p.name])
    consts = {c.name: cp.asarray(host[c.name]) for c in ex.constants}  # no guards: kernels cannot write them
    timeout = policy.timeout_for(ex.timeout_s, ref_ms / 1e3)
    runs = []
    for variant in (0, 1):
        for p in ex.arrays:
            b = bufs[p.name]
            if isinstance(p, (In, InOut)):
                b.view[...] = pristine[p.name]
            elif p.fill != "poison":
                b.view.fill(p.fill)
            else:
                u = _UINT[p.np_dtype.itemsize]
                b.bytes.view(u).fill(u(poison_bits(p.np_dtype, variant)))
        if consts:
            _set_constants(ex, ctx.student, consts)
        ctx.arm(timeout, f"your kernel at {label} (the reference takes {ref_ms:.3f} ms there)")
        try:
            _launch(ctx.student, geo, _args(ex, {k: b.view for k, b in bufs.items()}, scalars))
        except Exception as exc:
            return {**base, **classify_cuda_error(exc, label, geo)}
        finally:
            ctx.arm(SETUP_TIMEOUT_S, "")
        problem = " ".join(filter(None, (b.guard_problem(cp) for b in bufs.values())))
        if problem:
            return {**base, "status": "failed", "message": problem}
        for p in ex.arrays:
            if not isinstance(p, In):
                continue
            u = _UINT[p.np_dtype.itemsize]
            changed = cp.flatnonzero(bufs[p.name].view.ravel().view(u) != pristine[p.name].ravel().view(u))
            if changed.size:
                i = int(changed[0])
                return {**base, "status": "failed", "message": (
                    f"your kernel changed its input {p.name} ({changed.size} elements, first "
                    f"{p.name}{_flat_index(bufs[p.name].shape, i)}). Inputs are read-only (const).")}
        outs = {p.name: be.host(bufs[p.name].view) for p in ex.arrays if isinstance(p, (Out, InOut))}
        if variant == 0 or not ex.deterministic:
            for p in ex.arrays:
                if isinstance(p, (Out, InOut)):
                    problem = _output_problem(ex, p, outs[p.name], expected[p.name], variant)
                    if problem:
                        return {**base, "status": "failed", "message": f"wrong output. {problem}"}
        runs.append(outs)
    if ex.deterministic:
        problem = _runs_differ(ex, runs[0], runs[1])
        if problem:
            return {**base, "status": "failed", "message": problem}
    return {**base, "status": "passed"}


# -- timing ------------------------------------------------------------------------------------

class _WrongWhileTimed(Exception):
    pass


def _draw_device(cp, p, rng, shape):
    return cp.asarray(_draw(getattr(p, "gen", None), rng, shape, p.np_dtype))


def _device_bad_count(cp, ex, p, got, want, atol_default) -> int:
    rtol, atol = _tolerance(ex, p.np_dtype)
    if rtol == 0.0 and atol == 0.0:
        u = _UINT[p.np_dtype.itemsize]
        return int(cp.count_nonzero(got.view(u) != want.view(u)))
    import course
    d_rtol, _ = course.default_tolerance(p.np_dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = atol_default if atol is None else atol
    ok = cp.abs(got.astype(cp.float64) - want) <= atol + rtol * cp.abs(want.astype(cp.float64))
    return int(got.size - cp.count_nonzero(ok))  # NaN compares False, so it counts as bad


def _build_timing(ctx, sizes) -> dict:
    import course
    be = backend()
    cp = be.xp
    ex = ctx.ex
    be.free_cached()
    rng = np.random.default_rng([ctx.seed, 10_000])
    geo_r = ctx.geometry(sizes, ex.launch_defaults)
    sets = []
    for _ in range(TIMING_SETS):
        s = {"in": {}, "pristine": {}, "expected": {}, "student": {}, "reference": {}, "atol": {}, "const": {}}
        for p in ex.params:  # in params order, so the draws do not depend on which kinds come first
            if isinstance(p, Scalar):
                continue
            if isinstance(p, Constant):
                s["const"][p.name] = _draw_device(cp, p, rng, shape_of(p.shape, sizes))
                continue
            shape = shape_of(p.shape, sizes)
            if isinstance(p, In):
                s["in"][p.name] = _draw_device(cp, p, rng, shape)
            elif isinstance(p, InOut):
                s["pristine"][p.name] = _draw_device(cp, p, rng, shape)
            if isinstance(p, (Out, InOut)):
                for who in ("student", "reference", "expected"):
                    s[who][p.name] = cp.empty(shape, dtype=p.np_dtype)
        scalars = {p.name: _scalar_value(p, sizes, rng) for p in ex.params if isinstance(p, Scalar)}
        s["scalars"] = scalars
        _reset(cp, ex, s, "expected")
        _set_constants(ex, ctx.reference, s["const"])
        _launch(ctx.reference, geo_r, _args(ex, {**s["in"], **s["expected"]}, scalars))
        for p in ex.arrays:
            if isinstance(p, (Out, InOut)) and p.np_dtype.kind == "f":
                _, scale = course.default_tolerance(p.np_dtype)
                e = s["expected"][p.name]
                finite = cp.abs(e[cp.isfinite(e)])
                s["atol"][p.name] = scale * max(float(finite.max()) if finite.size else 0.0, 1e-30)
        sets.append(s)
    copy = None
    if ex.floor_bytes is not None:
        half = max(int(ex.floor_bytes(dict(sizes))) // 2, 1)
        src, dst = cp.zeros(half, dtype=cp.uint8), cp.empty(half, dtype=cp.uint8)
        copy = be.copy_fn(dst, src)
    return {"sizes": sizes, "sets": sets, "copy": copy, "geo_r": geo_r}


def _reset(cp, ex, s, who):
    for p in ex.arrays:
        if isinstance(p, InOut):
            s[who][p.name][...] = s["pristine"][p.name]
        elif isinstance(p, Out):
            buf = s[who][p.name]
            if p.fill != "poison":
                buf.fill(p.fill)
            else:
                u = _UINT[p.np_dtype.itemsize]
                buf.view(u).fill(u(poison_bits(p.np_dtype, 0)))


def _check_set(cp, ex, s, who) -> str:
    for p in ex.arrays:
        if isinstance(p, (Out, InOut)):
            got, want = s[who][p.name], s["expected"][p.name]
            if _device_bad_count(cp, ex, p, got, want, s["atol"].get(p.name, 0.0)):
                be = backend()
                return _output_problem(ex, p, be.host(got), be.host(want), 0) or \
                    f"{p.name} differs from the reference"
    return ""


def timing_step(ctx: Context) -> dict:
    """Time student and reference interleaved at the speed size; check the timed runs' outputs."""
    import course
    be = backend()
    cp = be.xp
    ex = ctx.ex
    sizes = ex.resolve_sizes(ex.default_speed_size(), ctx.l2)
    label = ex.size_label(sizes)
    base = {"sizes": sizes}
    try:
        geo_s = ctx.geometry(sizes, ctx.cfg)
    except Exception as exc:
        return {**base, "status": "failed", "message": f"the launch configuration {ctx.cfg} does not work "
                f"at {label}: {exc}"}
    if ctx.timing is None or ctx.timing["sizes"] != sizes:
        ctx.timing = _build_timing(ctx, sizes)
    t = ctx.timing
    sets, geo_r = t["sets"], t["geo_r"]

    # the timing size is new to the student kernel: run and check it once per input set first
    _reset(cp, ex, sets[0], "reference")
    _set_constants(ex, ctx.reference, sets[0]["const"])
    ref_s = be.time_ms(lambda: _launch(ctx.reference, geo_r, _args(ex, {**sets[0]["in"], **sets[0]["reference"]},
                                                                  sets[0]["scalars"]), False)) / 1e3
    for j, s in enumerate(sets):
        _reset(cp, ex, s, "student")
        _set_constants(ex, ctx.student, s["const"])
        ctx.arm(policy.timeout_for(ex.timeout_s, ref_s), f"your kernel at the timing size {label}")
        try:
            _launch(ctx.student, geo_s, _args(ex, {**s["in"], **s["student"]}, s["scalars"]))
        except Exception as exc:
            return {**base, **classify_cuda_error(exc, label, geo_s)}
        problem = _check_set(cp, ex, s, "student")
        if problem:
            return {**base, "status": "failed", "message": f"wrong output at the timing size {label}. {problem}"}

    # warm-up outside `interleaved`, so every timed call starts from freshly reset buffers
    for s in sets:
        for who, kern, geo in (("student", ctx.student, geo_s), ("reference", ctx.reference, geo_r)):
            _reset(cp, ex, s, who)
            _set_constants(ex, kern, s["const"])
            _launch(kern, geo, _args(ex, {**s["in"], **s[who]}, s["scalars"]))
    for s in sets:
        _reset(cp, ex, s, "student")
        _reset(cp, ex, s, "reference")
    copy_ms = []

    # which input set each kernel's latest timed call used: on_sample checks and resets exactly that one
    # (its sample index restarts at 0 in every re-measuring round, the rotation does not)
    calls = {"student": 0, "reference": 0}
    last = {}

    def make(who, kern, geo):
        def fn():
            j = calls[who] % len(sets)
            calls[who] += 1
            last[who] = j
            s = sets[j]
            _launch(kern, geo, _args(ex, {**s["in"], **s[who]}, s["scalars"]), sync=False)
        return fn

    kernels = {"student": ctx.student, "reference": ctx.reference}
    fns = {"student": make("student", ctx.student, geo_s), "reference": make("reference", ctx.reference, geo_r)}

    def next_constants(who):
        # the __constant__ symbols of the set this kernel's next timed call uses, filled between samples
        if ex.constants:
            _set_constants(ex, kernels[who], sets[calls[who] % len(sets)]["const"])
    if t["copy"] is not None:
        fns["copy"] = t["copy"]

    def on_sample(name, i):
        if name == "copy":
            return
        s = sets[last[name]]
        if name == "student":
            problem = _check_set(cp, ex, s, "student")
            if problem:
                raise _WrongWhileTimed(f"timed run {i + 1}: {problem}")
        _reset(cp, ex, s, name)
        next_constants(name)

    def measure():
        if ex.constants:  # outside `interleaved` (and its stream): copy, then wait for the copies
            next_constants("student")
            next_constants("reference")
            be.sync()
        res = be.interleaved(fns, warmup=0, min_samples=10, max_samples=TIMING_MAX_SAMPLES,
                             budget_s=TIMING_BUDGET_S, on_sample=on_sample)
        for s in sets:  # a round may stop between samples; start the next from clean buffers
            _reset(cp, ex, s, "student")
            _reset(cp, ex, s, "reference")
        if "copy" in res:
            copy_ms.extend(res["copy"].samples_ms)
        return res["student"].samples_ms, res["reference"].samples_ms

    ctx.arm(policy.MAX_ROUNDS * (TIMING_BUDGET_S * 3 + 2 * TIMING_MAX_SAMPLES * 3 * ref_s) + 60
            + policy.timeout_for(ex.timeout_s, ref_s), f"your kernel while being timed at {label}")
    try:
        d = policy.decide_speed(measure, ex.tiers)
    except _WrongWhileTimed as exc:
        return {**base, "status": "failed", "message": (
            f"your kernel gave wrong results while being timed ({exc}). Its output must be right on every "
            "launch, not only the first ones.")}
    except Exception as exc:
        return {**base, **classify_cuda_error(exc, label, geo_s)}
    finally:
        ctx.arm(SETUP_TIMEOUT_S, "")
    floor = None
    if copy_ms:
        floor = float(np.median(copy_ms))
    if ex.floor_flops is not None:
        try:
            c = course.ceilings()
            peak = max(c.sgemm_tflops, c.tf32_tflops, c.bf16_tflops, getattr(c, "fp16_tflops", 0.0))
            flop_floor = policy.floor_ms(None, ex.floor_flops(dict(sizes)), None, peak)
            floor = max(floor or 0.0, flop_floor or 0.0) or None
        except Exception:
            pass
    impossible = policy.is_impossible(d.student_ms, floor, d.reference_ms)
    note = "" if d.settled else (f"the ratio stayed within the noise band (+-{100 * d.band:.1f}%) after "
                                 f"{d.rounds} rounds; decided on the pooled medians")
    speed = {"student_ms": d.student_ms, "reference_ms": d.reference_ms, "student_iqr_ms": d.student_iqr_ms,
             "reference_iqr_ms": d.reference_iqr_ms, "ratio": d.ratio, "threshold": float(ex.speed_threshold),
             "rounds": d.rounds, "sizes": sizes, "floor_ms": floor, "impossible": impossible,
             "samples": d.samples, "note": note}
    return {**base, "status": "ok", "speed": speed}


# -- pipeline ----------------------------------------------------------------------------------

PIPELINE_MAX_GRID = 1024  # blocks per chunk launch, as course.lessons.ch03.offset_process launches
SPAN_DIGITS = 4


def _run_driver(driver, kernel, cfg: dict, n: int, seed: int) -> dict:
    return driver(kernel, streams=int(cfg["streams"]), chunks=int(cfg["chunks"]), block=int(cfg["block"]), n=n,
                  seed=seed)


def pipeline_step(ctx: Context) -> dict:
    """The student kernel in the spec's pipeline driver with the student's streams and chunks.

    The reference kernel runs through the same driver first, with its own LAUNCH, for context. The
    output of every pipeline call is checked (by the driver, against NumPy); a ratio inside the noise
    band of a tier boundary is measured once more (policy.decide_pipeline).
    """
    ex, cfg = ctx.ex, ctx.cfg
    pl = ex.pipeline
    driver = pl.resolve_driver()
    backend().free_cached()  # the driver allocates nbytes each way, pinned and on the device
    n = ex.pipeline_n()
    seed = (int(ctx.seed) + 20_000) % (1 << 63)  # secret, like the test inputs
    streams, chunks, block = int(cfg["streams"]), int(cfg["chunks"]), int(cfg["block"])
    base = {"sizes": {"n": n}}
    what = (f"the pipeline ({streams} stream{'s' * (streams != 1)}, {chunks} chunk{'s' * (chunks != 1)}, "
            f"{pl.nbytes / 2**20:g} MiB each way)")
    first_chunk = cdiv(n, chunks)
    geo = (max(1, min(cdiv(first_chunk, block), PIPELINE_MAX_GRID)), block, 0)

    rcfg = reference_launch(ex)
    t0 = time.monotonic()
    ref = _run_driver(driver, ctx.reference, rcfg, n, seed)
    ref_s = time.monotonic() - t0
    if not ref.get("correct"):
        return {**base, "status": "grader error", "message": (
            f"the reference kernel's pipeline output is wrong, so the pipeline driver {pl.driver} or the spec "
            f"is broken: {ref.get('message', '')}")}

    reports = []

    def run():
        ctx.arm(policy.timeout_for(ex.timeout_s, ref_s), f"your kernel in {what}")
        try:
            rep = _run_driver(driver, ctx.student, cfg, n, seed + len(reports) + 1)
        finally:
            ctx.arm(SETUP_TIMEOUT_S, "")
        if not rep.get("correct"):
            raise _WrongWhileTimed(rep.get("message", "") or "wrong output")
        reports.append(rep)
        return rep["total_ms"], rep["serial_ms"]

    try:
        d = policy.decide_pipeline(run, pl)
    except _WrongWhileTimed as exc:
        run_no = f" (measurement {len(reports) + 1})" if reports else ""
        return {**base, "status": "failed", "message": (
            f"wrong output from {what}{run_no}. {exc}\nEach launch must read and write only its own chunk, "
            "[offset, offset + count), and must be right for every chunk: the copies of the other chunks run at "
            "the same time on other streams.")}
    except Exception as exc:
        return {**base, **classify_cuda_error(exc, what, geo)}
    last = reports[-1]
    spans = [[str(lane), str(label), round(float(a), SPAN_DIGITS), round(float(b), SPAN_DIGITS)]
             for lane, label, a, b in last.get("spans", [])]
    note = "" if d.settled else (f"the pipeline ratio stayed within {100 * policy.PIPELINE_BAND:.0f}% of a tier "
                                 f"boundary after {d.rounds} rounds; decided on the pooled times")
    result = {"ratio": d.ratio, "total_ms": d.total_ms, "serial_ms": d.serial_ms, "full_at": float(pl.full_at),
              "half_at": float(pl.half_at), "streams": streams, "chunks": chunks, "block": block,
              "nbytes": int(pl.nbytes), "ideal_ms": last.get("ideal_ms"), "rounds": d.rounds, "settled": d.settled,
              "reference_ratio": float(ref["ratio"]), "reference_streams": int(rcfg["streams"]),
              "reference_chunks": int(rcfg["chunks"]), "spans": spans, "note": note}
    return {**base, "status": "ok", "pipeline": result}
