"""What a grading child does: load the compiled kernels, test one size, time against the reference, and
run the kernel through a grader-owned pipeline (exercises with a `Pipeline`).

Imported only inside a grading child (see worker.py); the parent never loads CuPy or CUDA. The parts
live in their own modules: compiling.py (the compile child), buffers.py (inputs, guards, poison,
checks), cuda_errors.py, device.py (the backend and launching), timing.py (the speed step).
"""
from __future__ import annotations

import time

import numpy as np

from . import policy
from .buffers import (GUARD_BYTES, POISON_BITS, UINT, Guarded, device_bad_count, fill_output, make_inputs,
                      numpy_reference, output_problem, poison_bits, runs_differ, flat_index)
from .device_ops import count_differ
from .compiling import compile_task, program_from_dict
from .cuda_errors import classify_cuda_error, module_load_problem
from .device import CupyBackend, backend, gpu_sections, kernel_args, launch, set_constants
from .spec import In, InOut, Out, cdiv, shape_of
from .gpulock import NO_LOCK
from .timing import timing_step as _kernel_timing_step
from .worker import SETUP_TIMEOUT_S

__all__ = ["GUARD_BYTES", "POISON_BITS", "CupyBackend", "backend", "probe", "limit_printf", "Context",
           "compile_task", "load_step", "correctness_step", "timing_step", "pipeline_step", "prepare_ring", "ring_problem", "make_inputs",
           "classify_cuda_error", "poison_bits"]

PRINTF_FIFO_BYTES = 64 << 10
_ATTR_CLOCK_RATE = 13  # cudaDevAttrClockRate, kHz: the highest SM clock, for the FLOP floors

# -- environment -------------------------------------------------------------------------------

def _max_clock_mhz():
    try:
        import cupy
        return cupy.cuda.runtime.deviceGetAttribute(_ATTR_CLOCK_RATE, cupy.cuda.Device().id) / 1000.0
    except Exception:
        from course import sm_clock_mhz
        clocks = sm_clock_mhz()
        return float(clocks[1]) if clocks else None


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
                  "sm_count": int(d.sm_count), "max_clock_mhz": _max_clock_mhz(),
                  "gpu_count": course.multi_gpu.gpu_count()}


def limit_printf() -> None:
    """Keep a printf-happy kernel from writing megabytes per launch into the log."""
    try:
        import cupy
        rt = cupy.cuda.runtime
        rt.deviceSetLimit(getattr(rt, "cudaLimitPrintfFifoSize", 1), PRINTF_FIFO_BYTES)
    except Exception:
        pass


class Context:
    """State one child keeps across steps: the exercise, its size cases, the loaded kernels.

    ``programs`` holds the compile child's output ({"student": ..., "reference": ...} as data);
    ``cases`` the size cases of this grading (the spec's public ones, then the hidden ones).
    """

    def __init__(self, ex, programs: dict, launch_cfg: dict, seed: int, device: dict, arm, cases=None,
                 reference_launch=None):
        self.ex, self.programs, self.cfg, self.seed = ex, programs or {}, dict(launch_cfg), seed
        self.device, self.l2 = device, int(device["l2_bytes"])
        self.arm = arm
        self.cases = list(cases) if cases is not None else list(ex.sizes)
        self.reference_launch = dict(reference_launch or ex.launch_defaults)
        self.student = self.reference = None
        self.gpu_lock = NO_LOCK  # set by the run child when gradings share the GPU (gpulock.py)

    def geometry(self, sizes: dict, cfg: dict):
        grid, block, smem = self.ex.launch(dict(sizes), dict(cfg))
        return grid, block, int(smem)


def timing_step(ctx: Context) -> dict:
    """The speed step: the kernel against the reference (timing.py), or a ring exercise's ring against NCCL
    (ring_timing.py)."""
    if getattr(ctx.ex, "ring", None) is not None:
        from .ring_timing import ring_timing_step
        return ring_timing_step(ctx)
    return _kernel_timing_step(ctx)


def ring_problem(ex) -> str:
    """'' when this machine can time a ring exercise, else why not (no peer access between neighbours, no NCCL)."""
    from course.multi_gpu import ring_problem as problem

    from .ring import gpus_needed
    return problem(gpus_needed(ex))


def prepare_ring(ex) -> None:
    """A ring exercise's peer access and NCCL communicators, before the child's file system closes."""
    from .ring_timing import before_confinement
    before_confinement(ex)


# -- load --------------------------------------------------------------------------------------

def load_step(ctx: Context) -> dict:
    """Load the student's and the reference's cubins; a module that cannot load is the student's problem."""
    import course
    ex = ctx.ex
    if ctx.programs["student"].get("kind") == "triton":
        from .triton_launch import TritonKernel
        try:
            ctx.student = TritonKernel(ex, ctx.programs["student"])
        except Exception as exc:
            return {"status": "compile error", "message": module_load_problem(exc)}
        ctx.reference = TritonKernel(ex, ctx.programs["reference"])
        return {"status": "ok"}
    try:
        module = course.Module(program_from_dict(ctx.programs["student"]))
    except Exception as exc:
        return {"status": "compile error", "message": module_load_problem(exc)}
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
    ctx.reference = course.Module(program_from_dict(ctx.programs["reference"])).kernel(ex.kernel)
    return {"status": "ok"}


# -- one test size -----------------------------------------------------------------------------

def _timed_reference(ctx, sizes, host, scalars, keep: bool) -> tuple:
    """Run the reference kernel once; (its outputs on the host if ``keep``, else {}; milliseconds)."""
    be = backend()
    cp = be.xp
    ex = ctx.ex
    arrays = {}
    for p in ex.arrays:
        shape = shape_of(p.shape, sizes)
        if isinstance(p, (In, InOut)):
            arrays[p.name] = cp.array(host[p.name])  # a copy on every backend: the host inputs stay pristine
        else:
            arrays[p.name] = cp.zeros(shape, dtype=p.np_dtype)
            if p.fill != "poison":
                arrays[p.name].fill(p.fill)
    geo = ctx.geometry(sizes, ex.launch_defaults)
    if ex.constants:
        set_constants(ex, ctx.reference, {c.name: cp.asarray(host[c.name]) for c in ex.constants})
        be.sync()
    args = kernel_args(ex, arrays, scalars, ex.launch_defaults)  # untimed: a map is encoded by the driver
    ms = be.time_ms(lambda: launch(ctx.reference, geo, args, sync=False))
    outs = {p.name: be.host(arrays[p.name]) for p in ex.arrays if keep and isinstance(p, (Out, InOut))}
    for p in ex.arrays:  # the student kernel runs next: leave no answer in device memory it could scan
        if isinstance(p, (Out, InOut)):
            arrays[p.name].fill(0)
    be.sync()
    return outs, ms


def correctness_step(ctx: Context, index: int) -> dict:
    """Run the student kernel twice at one size case and check everything; a result dict.

    Host work (drawing inputs, the NumPy reference) runs before the GPU lock is taken; the GPU work,
    comparisons included, holds it shared once, so a grading timing on the same GPU waits as little as
    possible.
    """
    be = backend()
    cp = be.xp
    ex = ctx.ex
    sizes = ex.resolve_sizes(ctx.cases[index], ctx.l2)
    label = ex.size_label(sizes)
    base = {"sizes": sizes}
    rng = np.random.default_rng([ctx.seed, index])
    host, scalars = make_inputs(ex, sizes, rng)
    try:
        geo = ctx.geometry(sizes, ctx.cfg)
    except Exception as exc:
        return {**base, "status": "failed",
                "message": f"the launch configuration {ctx.cfg} does not work at {label}: {exc}"}
    on_device = ex.reference == "kernel"
    expected = None if on_device else numpy_reference(ex, sizes, host, scalars)
    guards = (rng.integers(0, 256, GUARD_BYTES, dtype=np.uint8), rng.integers(0, 256, GUARD_BYTES, dtype=np.uint8))
    shared, _ = gpu_sections(ctx)
    with shared():  # one hold for the size: the reference, both runs, the checks
        ref_out, ref_ms = _timed_reference(ctx, sizes, host, scalars, keep=on_device)
        if on_device:
            expected = ref_out
        base["ref_ms"] = ref_ms
        state = _upload(ctx, cp, sizes, host, guards)
        first = {}  # the first run's outputs, kept on the device for the determinism check
        for variant in (0, 1):
            kind, outs = _run_variant(ctx, be, sizes, label, geo, scalars, ref_ms, variant, state)
            if kind == "problem":  # what went wrong on the device
                return {**base, "status": "failed", "message": outs}
            if kind == "error":
                return {**base, **outs}
            problem = ""
            if variant == 0 or not ex.deterministic:
                problem = _wrong_output(ctx, be, outs, expected, variant)
            if not problem and ex.deterministic:
                if variant == 0:
                    first = {k: v.copy() for k, v in outs.items()}
                else:
                    problem = _runs_differ(ctx, be, first, outs)
            if problem:
                return {**base, "status": "failed", "message": problem}
    return {**base, "status": "passed"}


def _wrong_output(ctx, be, outs: dict, expected: dict, variant: int) -> str:
    """'' when every output on the device matches ``expected`` (host arrays), else the message.

    The comparison runs on the device (`device_bad_count`, the host check's own rule); only a mismatch
    brings the output to the host, where `output_problem` words it. The expected values reach the device
    after the student's run and are zeroed before their memory goes back to the pool.
    """
    ex, cp = ctx.ex, be.xp
    for p in ex.arrays:
        if not isinstance(p, (Out, InOut)):
            continue
        want = cp.array(expected[p.name])  # a copy on every backend, so zeroing it leaves the host's intact
        try:
            bad = device_bad_count(ex, p, outs[p.name], want)
        finally:
            want.fill(0)
        if bad:
            problem = output_problem(ex, p, be.host(outs[p.name]), expected[p.name], variant)
            if problem:
                return f"wrong output. {problem}"
    return ""


def _runs_differ(ctx, be, first: dict, second: dict) -> str:
    """'' when two runs' outputs (on the device) agree bit for bit, else `runs_differ`'s message."""
    if not any(count_differ(first[k], second[k]) for k in first):
        return ""
    return runs_differ(ctx.ex, {k: be.host(v) for k, v in first.items()}, {k: be.host(v) for k, v in second.items()})


def _upload(ctx, cp, sizes, host, guards) -> dict:
    """Guarded device buffers and pristine copies of the inputs for the student's runs at one size."""
    ex = ctx.ex
    before, after = (cp.asarray(g) for g in guards)
    return {"bufs": {p.name: Guarded(cp, p, shape_of(p.shape, sizes), before, after) for p in ex.arrays},
            "pristine": {p.name: cp.asarray(host[p.name]) for p in ex.arrays if isinstance(p, (In, InOut))},
            "consts": {c.name: cp.asarray(host[c.name]) for c in ex.constants}}  # no guards: kernels cannot write them


def _run_variant(ctx, be, sizes, label, geo, scalars, ref_ms, variant, state):
    """One student run on the device: ("ok", its outputs, still on the device), ("error", a CUDA error's
    result dict) or ("problem", a message)."""
    cp, ex = be.xp, ctx.ex
    bufs, pristine, consts = state["bufs"], state["pristine"], state["consts"]
    for p in ex.arrays:
        b = bufs[p.name]
        if isinstance(p, (In, InOut)):
            b.view[...] = pristine[p.name]
        else:
            fill_output(b.view, p, variant)
    if consts:
        set_constants(ex, ctx.student, consts)
    args = kernel_args(ex, {k: b.view for k, b in bufs.items()}, scalars, ctx.cfg)  # maps of the guarded views
    ctx.arm(policy.timeout_for(ex.timeout_s, ref_ms / 1e3), f"your kernel at {label} (the reference takes "
            f"{ref_ms:.3f} ms there)")
    try:
        launch(ctx.student, geo, args)
    except Exception as exc:
        return "error", classify_cuda_error(exc, label, geo)
    finally:
        ctx.arm(SETUP_TIMEOUT_S, "")
    problem = " ".join(filter(None, (b.guard_problem(cp, getattr(ctx.ex, "language", "cuda")) for b in bufs.values())))
    if problem:
        return "problem", problem
    for p in ex.arrays:
        if not isinstance(p, In):
            continue
        u = UINT[p.np_dtype.itemsize]
        changed = cp.flatnonzero(bufs[p.name].view.ravel().view(u) != pristine[p.name].ravel().view(u))
        if changed.size:
            i = int(changed[0])
            return "problem", (f"your kernel changed its input {p.name} ({changed.size} elements, first "
                               f"{p.name}{flat_index(bufs[p.name].shape, i)}). Inputs are read-only (const).")
    return "ok", {p.name: bufs[p.name].view for p in ex.arrays if isinstance(p, (Out, InOut))}


# -- pipeline ----------------------------------------------------------------------------------

PIPELINE_MAX_GRID = 1024  # blocks per chunk launch, as drivers.pipeline launches (its MAX_GRID)


def _run_driver(driver, kernel, cfg: dict, n: int, seed: int, reference=None, reference_block=None) -> dict:
    return driver(kernel, streams=int(cfg["streams"]), chunks=int(cfg["chunks"]), block=int(cfg["block"]), n=n,
                  seed=seed, reference=reference, reference_block=reference_block)


def pipeline_step(ctx: Context) -> dict:
    """The student kernel in the spec's pipeline driver with the student's streams and chunks.

    The reference kernel runs through the same driver first, with its own LAUNCH, for context. The
    output of every pipeline run is checked (by the driver, on fresh inputs); a ratio inside the noise
    band of a tier boundary is measured once more (policy.decide_pipeline). The time without overlap is
    the reference kernel's (the driver's ``reference``), so a kernel slow only over the whole array gains
    nothing. Every call is timed, so the step holds the GPU alone (`gpu_sections`).
    """
    _, alone = gpu_sections(ctx)
    with alone():
        return _pipeline(ctx)


def _pipeline(ctx: Context) -> dict:
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

    rcfg = ctx.reference_launch
    t0 = time.monotonic()
    ref = _run_driver(driver, ctx.reference, rcfg, n, seed)
    ref_s = time.monotonic() - t0
    if not ref.get("correct"):
        return {**base, "status": "grader error", "message": (
            f"the reference kernel's pipeline output is wrong, so the pipeline driver {pl.driver} or the spec "
            f"is broken: {ref.get('message', '')}")}

    def run_once(i):
        ctx.arm(policy.timeout_for(ex.timeout_s, ref_s), f"your kernel in {what}")
        try:
            # seeds PIPELINE_SEED_STRIDE apart: a driver call fills from its seed upwards (one per run), so no
            # two calls, the reference's included, ever time the same inputs
            return _run_driver(driver, ctx.student, cfg, n, seed + i * policy.PIPELINE_SEED_STRIDE, reference=ctx.reference,
                               reference_block=int(rcfg["block"]))
        finally:
            ctx.arm(SETUP_TIMEOUT_S, "")

    try:
        d, last = policy.decide_checked_pipeline(run_once, pl)
    except policy.WrongPipelineOutput as exc:
        run_no = f" (measurement {exc.measurement})" if exc.measurement > 1 else ""
        return {**base, "status": "failed", "message": (
            f"wrong output from {what}{run_no}. {exc}\nEach launch must read and write only its own chunk, "
            "[offset, offset + count), and must be right for every chunk: the copies of the other chunks run at "
            "the same time on other streams.")}
    except Exception as exc:
        return {**base, **classify_cuda_error(exc, what, geo)}
    result = policy.pipeline_result(d, pl, last, streams=streams, chunks=chunks, block=block,
                                    nbytes=pl.nbytes, reference={"ratio": ref["ratio"], **rcfg})
    return {**base, "status": "ok", "pipeline": result}