"""A stand-in for autograder.harness inside grading children, for CPU tests of the parent.

Behaviour is chosen by a comment in the kernel source, e.g. ``// FAKE: hang@2 die@1 slow``:
  compile-error, compile-die (the compile child dies as at its CPU-time limit), hang@I (arms 0.5 s then sleeps), die@I (SIGKILL), fatal@I (crash result, child exits),
  fail@I, raise@I (grader bug), huge@I (a 3 MB message), print (printf-like output), slow, impossible,
  wrongtimed, nogpu, oldgpu (FAKE_GPUS=N in the environment: the machine has N GPUs, default 1; FAKE_RING_PROBLEM=why: they cannot time a ring), oom@I (the launch runs out of device memory every time), oomshared@I (only
  while other gradings share the GPU: their memory filled it). Out-of-memory goes through the real
  autograder.cuda_errors, which decides whose doing it is.
Pipeline step (exercises with a `Pipeline`): pipe=R[,R2...] the pipeline/un-overlapped ratio of each
successive measurement (default 0.58; the real re-measuring rule in autograder.policy decides how many are
taken), pipewrong (the pipeline's output is wrong), pipecrash (an illegal address in the pipeline).
"""
import os
import re
import signal
import sys
import time


def _flags(source):
    m = re.search(r"//\s*FAKE:(.*)", source or "")
    return m.group(1).split() if m else []


class Context:
    def __init__(self, ex, programs, launch_cfg, seed, device, arm, cases=None, reference_launch=None):
        self.ex, self.cfg, self.seed, self.arm = ex, launch_cfg, seed, arm
        self.source = programs["student"]["source"]
        self.flags = _flags(self.source)
        self.cases = cases


def probe():
    # the source is not known yet at probe time; tests put GPU flags in the environment instead
    mode = os.environ.get("FAKE_GPU", "h100")
    if mode == "none":
        return False, "This needs an NVIDIA GPU, and none is usable here: fake machine without a GPU."
    cc = [7, 5] if mode == "t4" else [9, 0]
    return True, {"name": "Fake GPU", "cc": cc, "arch": f"sm_{cc[0]}{cc[1]}", "l2_bytes": 1 << 20, "sm_count": 1,
                  "gpu_count": int(os.environ.get("FAKE_GPUS", "1"))}


def ring_problem(ex):
    """Why this machine cannot time a ring exercise: FAKE_RING_PROBLEM in the environment, else '' (it can)."""
    return os.environ.get("FAKE_RING_PROBLEM", "")


def prepare_ring(ex):
    """The real harness starts NCCL here; the fake machine has nothing to start."""


def limit_printf():
    pass


def compile_task(task):
    """The compile child's work: compile-error gives an error; compile-die kills the child as the
    CPU-time limit would (SIGXCPU); stub (the nbgrader stub comment) compiles."""
    flags = _flags(task["source"])
    if "compile-error" in flags:
        return {"status": "compile error", "message": "kernel.cu(3): error: expected a ';'"}
    if "compile-die" in flags:
        os.kill(os.getpid(), getattr(signal, "SIGXCPU", signal.SIGKILL))
    out = {"status": "ok", "log": "", "notes": [], "student": {"source": task["source"]}, "arch": task["arch"]}
    if task.get("reference_source") is not None:
        out["reference"] = {"source": task["reference_source"]}
    return out


def load_step(ctx):
    ctx.compiled = True
    return {"status": "ok"}


def correctness_step(ctx, index):
    sizes = {"n": index}
    f = ctx.flags
    if not getattr(ctx, "compiled", False):  # like the real harness: no kernel loaded in this child
        raise TypeError("'NoneType' object is not callable")
    if "print" in f:
        print(f"printf from size {index}")
        sys.stdout.flush()
    if f"hang@{index}" in f:
        ctx.arm(0.5, f"your kernel at n={index}")
        time.sleep(60)
    if f"die@{index}" in f:
        ctx.arm(5, f"your kernel at n={index}")
        os.kill(os.getpid(), signal.SIGKILL)
    shared = getattr(getattr(ctx, "gpu_lock", None), "fds", None) is not None  # set by the worker
    if f"oom@{index}" in f or (f"oomshared@{index}" in f and shared):
        from autograder.cuda_errors import classify_cuda_error
        exc = RuntimeError("cudaErrorMemoryAllocation: out of memory (fake)")
        return {"sizes": sizes, **classify_cuda_error(exc, f"n={index}", ((1, 1, 1), (256, 1, 1), 0))}
    if f"fatal@{index}" in f:
        return {"sizes": sizes, "status": "crashed", "message": "crashed: an illegal memory access", "fatal": True}
    if f"fail@{index}" in f or "YOUR CODE HERE" in ctx.source:  # an untouched stub computes nothing
        return {"sizes": sizes, "status": "failed", "message": f"wrong output at {index}"}
    if f"fail@{index}" in f:
        return {"sizes": sizes, "status": "failed", "message": f"wrong output at {index}"}
    if f"raise@{index}" in f:
        raise RuntimeError("a bug in the grader")
    if f"huge@{index}" in f:
        return {"sizes": sizes, "status": "failed", "message": "x" * 3_000_000}
    return {"sizes": sizes, "status": "passed", "ref_ms": 0.01}


def timing_step(ctx):
    f = ctx.flags
    if not getattr(ctx, "compiled", False):
        raise TypeError("'NoneType' object is not callable")
    if "wrongtimed" in f:
        return {"sizes": {"n": 99}, "status": "failed", "message": "wrong while timed (launch 31)"}
    ratio = 0.4 if "slow" in f else 1.0
    student = 0.1 if "impossible" in f else 1.0 / ratio
    speed = {"student_ms": student, "reference_ms": 1.0, "student_iqr_ms": 0.01, "reference_iqr_ms": 0.01,
             "ratio": 1.0 / student, "threshold": 0.8, "rounds": 1, "sizes": {"n": 99},
             "floor_ms": 0.5, "impossible": "impossible" in f, "samples": 10, "note": ""}
    return {"sizes": {"n": 99}, "status": "ok", "speed": speed}


SERIAL_MS = 10.0  # the fake un-overlapped time: copy-in + kernel + copy-out


def _pipe_ratios(flags):
    for f in flags:
        if f.startswith("pipe="):
            return [float(r) for r in f.split("=", 1)[1].split(",")]
    return [0.58]


def pipeline_step(ctx):
    from autograder import policy
    f = ctx.flags
    if not getattr(ctx, "compiled", False):
        raise TypeError("'NoneType' object is not callable")
    pl = ctx.ex.pipeline
    streams, chunks, block = ctx.cfg["streams"], ctx.cfg["chunks"], ctx.cfg["block"]
    base = {"sizes": {"n": ctx.ex.pipeline_n()}}
    if "pipecrash" in f:
        return {**base, "status": "crashed", "fatal": True,
                "message": "crashed at the pipeline (4 streams, 16 chunks): an illegal memory access"}
    if "pipewrong" in f:
        return {**base, "status": "failed", "message": (
            f"wrong output from the pipeline ({streams} streams, {chunks} chunks). pipeline output: 1048576 of "
            "67108864 values wrong")}
    ratios = iter(_pipe_ratios(f) + [None] * 8)
    taken = []

    def measure():
        r = next(ratios)
        r = taken[-1] if r is None else r
        taken.append(r)
        return r * SERIAL_MS, SERIAL_MS

    d = policy.decide_pipeline(measure, pl)
    result = {"ratio": d.ratio, "total_ms": d.total_ms, "serial_ms": d.serial_ms, "full_at": pl.full_at,
              "half_at": pl.half_at, "streams": streams, "chunks": chunks, "block": block, "nbytes": pl.nbytes,
              "ideal_ms": 0.53 * SERIAL_MS, "rounds": d.rounds, "settled": d.settled, "reference_ratio": 0.58,
              "reference_streams": 4, "reference_chunks": 16, "spans": [["stream 0", "H2D", 0.0, 1.0]],
              "note": "" if d.settled else "decided on the pooled times"}
    return {**base, "status": "ok", "pipeline": result}


def kernel_driver(kernel, *, streams, chunks, block, n, seed, reference=None, reference_block=None):
    """A pipeline driver for CPU tests of the real harness: the "kernel" is a callable that returns the
    driver's report (correct, message, total_ms, serial_ms, ratio, ideal_ms, spans) itself."""
    return kernel(streams=streams, chunks=chunks, block=block, n=n, seed=seed, reference=reference,
                  reference_block=reference_block)


def call_driver(ex):
    """Library-call exercises on a CPU: the NumPy model of cublasSgemm in place of cuBLAS. A call whose
    ldc is the literal 4242 raises at the 33 x 65 case, as a CUDA error from cuBLAS would; 4343 runs out of
    device memory there. Chapter 03's schedule: `two_stage_case`."""
    if ex.name == "two_stage":
        return two_stage_case
    from drivers import cublas_calls as ch10_calls

    def drive(name, call, sizes, seed):
        if call.get("ldc") == 4242 and sizes.get("m") == 33:
            raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED (fake)")
        if call.get("ldc") == 4343 and sizes.get("m") == 33:
            raise RuntimeError("cudaErrorMemoryAllocation: out of memory (fake)")
        return ch10_calls.grade_case(name, call, sizes, seed, backend="numpy")
    return drive


def two_stage_case(name, schedule, sizes, seed):
    """Chapter 03's schedule on a CPU: the driver's own order analysis (drivers.two_stage.case_verdict) gives
    the verdict, as on the GPU; nothing runs, so the held-back run's evidence is left out. A schedule of 251
    chunks makes the driver raise, as a fault in the grader's own kernels would; 253 runs out of memory."""
    from drivers import two_stage
    if schedule.get("chunks") == 251:
        raise RuntimeError("cudaErrorLaunchFailure: unspecified launch failure (fake)")
    if schedule.get("chunks") == 253:
        raise RuntimeError("cudaErrorMemoryAllocation: out of memory (fake)")
    missing, _ = two_stage.case_verdict(schedule, int(sizes["n"]))
    return {"status": "failed", "message": two_stage.order_message(missing)} if missing else {"status": "passed",
                                                                                             "message": ""}


def call_pipeline_driver(ex):
    """The overlap of chapter 03's schedule on a CPU: no overlap (ratio 1.0) on one stream or with one chunk,
    else 0.58 (about what 16-chunk pipelines measure)."""
    from drivers import two_stage

    def drive(name, schedule, *, seed, nbytes):
        _, hold = two_stage.case_verdict(schedule, nbytes // 4)
        if hold is not None:
            return {"correct": False, "message": "unordered"}
        s, c = schedule["streams"], schedule["chunks"]
        ratio = 1.0 if s == 1 or c == 1 else 0.58
        return {"correct": True, "message": "", "total_ms": 10 * ratio, "serial_ms": 10.0, "ratio": ratio,
                "ideal_ms": 5.3, "spans": [["stream 0", "H2D", 0.0, 1.0]], "streams": s, "chunks": c}
    return drive
