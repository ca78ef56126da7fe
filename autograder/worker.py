"""The grading children: entered by `multiprocessing` (spawn) with a task; the only place CUDA runs.

Three phases, each in its own child: ``probe`` (which GPU, once per grading session), ``compile`` (NVRTC
only, no CUDA context, under memory and CPU-time limits and file-system confinement: see compiling.py)
and ``run`` (load the cubins, then each test size, timing, pipeline; confined too). A run child sends one
message per step so that the parent knows how far it got if the child hangs or dies. After a CUDA error that
poisons the context (an illegal address, for instance) it reports and exits; the parent starts a
fresh child for the remaining steps. Its stdout and stderr (student printf included) go to a file.

Messages, all JSON over a size-capped pipe:
  {"kind": "device", ...}                       the GPU, once per child
  {"kind": "nogpu", "reason": str}              no usable GPU; the child exits
  {"kind": "skipped", "arch": str}              the GPU is older than the exercise needs
  {"kind": "begin", "step": i, "timeout": s}    step i started; the grader's own work gets s seconds
  {"kind": "arm", "timeout": s, "what": str}    a student kernel is about to run; kill after s seconds
  {"kind": "result", "step": i, "data": {...}, "fatal": bool}
  {"kind": "done"}
"""
from __future__ import annotations

import json
import os
import sys
import traceback
import types

__all__ = ["MESSAGE_CAP", "Channel", "child_main", "shrink"]

MESSAGE_CAP = 1 << 20
SETUP_TIMEOUT_S = 180.0  # generating and uploading inputs larger than L2, computing the reference
COMPILE_TIMEOUT_S = 180.0
LOG_FILE_BYTES = 64 << 20  # stdout, stderr and printf of one grading: a runaway kernel cannot fill the disk


def shrink(msg: dict, cap: int) -> bytes:
    """JSON bytes of ``msg`` at most ``cap`` long: long strings are cut first, with a note."""
    data = json.dumps(msg, default=str).encode()
    if len(data) <= cap:
        return data
    limit = max(256, cap // 8)

    def cut(x):
        if isinstance(x, str) and len(x) > limit:
            return x[:limit] + f"\n... [truncated: the grader caps results at {cap} bytes]"
        if isinstance(x, dict):
            return {k: cut(v) for k, v in x.items()}
        if isinstance(x, list):
            return [cut(v) for v in x[:200]]
        return x

    data = json.dumps(cut(msg), default=str).encode()
    if len(data) <= cap:
        return data
    small = {"kind": msg.get("kind"), "step": msg.get("step"), "fatal": msg.get("fatal", False),
             "data": {"status": "grader error", "message": f"result larger than {cap} bytes; dropped"}}
    return json.dumps(small).encode()


class Channel:
    """The child's end of the pipe; every message is JSON and at most ``cap`` bytes."""

    def __init__(self, conn, cap: int = MESSAGE_CAP):
        self.conn, self.cap = conn, cap

    def send(self, **msg) -> None:
        self.conn.send_bytes(shrink(msg, self.cap))


def _redirect_output(path: str) -> None:
    # fd-level, so the CUDA driver's printf (written by C stdio) lands in the file too
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def _flush_c_stdio() -> None:
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)
    except Exception:
        pass


def _private_environment(task: dict) -> None:
    """Point every cache and temp folder at the grading run's private folder: nothing a notebook
    cell planted in the user's caches is read, and nothing is left behind for one to find."""
    private = task.get("private_dir")
    if not private:
        return
    for var in ("TMPDIR", "COURSE_CACHE_DIR", "CUPY_CACHE_DIR", "XDG_CACHE_HOME", "CUDA_CACHE_PATH"):
        os.environ[var] = private
    import tempfile
    tempfile.tempdir = None  # a child forked from the warm server must not keep the server's temp folder
    kernels = task.get("kernel_cache")
    if kernels:
        # CuPy's own kernels: the grading process's cache (see supervise.py), never one a user could plant in
        os.environ["CUPY_CACHE_DIR"] = kernels
        if "cupy" in sys.modules:  # imported by the warm server, which read its cache folder then
            from cupy.cuda import _compiler_cache, compiler
            disk = getattr(_compiler_cache, "DiskKernelCacheBackend", None)
            if disk is not None and hasattr(compiler, "_set_kernel_cache_backend"):
                compiler._set_kernel_cache_backend(disk(kernels))
    os.chdir(private)  # NVRTC looks for a quoted #include in the working folder first: an empty one


def _confine(task: dict, compile_phase: bool) -> str:
    """Limits and file-system confinement for this child; a note when confinement is unavailable.

    Everything the child needs from outside the Python installation (the spec, the reference source,
    the cubins) is already in ``task`` or loaded before this runs.
    """
    from . import sandbox
    if compile_phase:
        from .compiling import COMPILE_CPU_S, COMPILE_MEMORY_BYTES
        sandbox.limit(memory_bytes=int(task.get("compile_memory") or COMPILE_MEMORY_BYTES),
                      cpu_seconds=int(task.get("compile_cpu_s") or COMPILE_CPU_S), file_bytes=LOG_FILE_BYTES)
    else:
        sandbox.limit(file_bytes=LOG_FILE_BYTES)
    try:
        import course
        read = (sandbox.python_read_paths(packages=True) + sandbox.system_read_paths(procfs=not compile_phase)
                + list(course.include_dirs()))
        # the threads already running are native library workers (OpenBLAS's pool, the CUDA driver's):
        # they open no files on anyone's behalf; NVRTC and every launch run in this, the confined thread
        write = [p for p in (task.get("private_dir"), task.get("kernel_cache")) if p]
        if task.get("untrusted_python"):
            # a Triton submission runs here: its own folder only (never the CuPy kernel cache the run children
            # load from), and no network
            write = [task["private_dir"]]
        sandbox.confine(read=read, write=write, devices=not compile_phase,
                        allow_threads=True, network=not task.get("untrusted_python"))
    except sandbox.SandboxUnavailable as exc:
        return f"not confined: {exc}"
    return ""


def child_main(conn, task: dict) -> None:
    """Entry point of a grading child (forked from the warm server, or spawned; the parent never imports CUDA)."""
    if task.get("environ") is not None:
        os.environ.clear()
        os.environ.update(task["environ"])
    if task.get("log_path"):
        _redirect_output(task["log_path"])
    _private_environment(task)
    chan = Channel(conn, task.get("cap", MESSAGE_CAP))
    code = 0
    try:
        phase = task.get("phase", "run")
        if phase == "probe":
            _probe(chan, task)
        elif phase == "compile":
            _compile(chan, task)
        else:
            _run(chan, task)
    except BaseException:  # a grader bug: report it rather than leaving the parent to guess
        code = 1
        try:
            chan.send(kind="result", step=task.get("_current", -1), fatal=True,
                      data={"status": "grader error", "message": traceback.format_exc()[-4000:]})
        except Exception:
            pass
    finally:
        try:
            chan.send(kind="done")
        except Exception:
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        _flush_c_stdio()
        # skip interpreter teardown: CuPy's destructors raise on a context an illegal address poisoned
        os._exit(code)


def _harness(task: dict):
    import importlib
    # tests substitute a fake harness to exercise the parent's supervision without a GPU
    return importlib.import_module(task.get("harness") or "autograder.harness")


def _probe(chan: Channel, task: dict) -> None:
    ok, info = _harness(task).probe()
    if ok:
        chan.send(kind="device", **info)
    else:
        chan.send(kind="nogpu", reason=info)


def _compile(chan: Channel, task: dict) -> None:
    """The compile phase: one step, no CUDA context, under limits and confinement."""
    harness = _harness(task)
    from .loader import get_exercise
    get_exercise(task["chapter"], task["exercise"])  # load the spec before the file system closes
    import course  # noqa: F401 - NVRTC and the header folders are found before confinement
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception:
        pass
    if task.get("language") == "triton":
        _triton_environment(task)
    task["_current"] = 0
    chan.send(kind="begin", step=0, timeout=COMPILE_TIMEOUT_S)
    note = _confine(task, compile_phase=True)
    if task.get("language") == "triton":
        from . import triton_build
        ex = get_exercise(task["chapter"], task["exercise"])
        work = triton_build.student_task if task.get("untrusted_python") else triton_build.reference_task
        data = work(task, ex)
    else:
        data = harness.compile_task(task)
    if note:
        data.setdefault("notes", []).append(note)
    chan.send(kind="result", step=0, data=data, fatal=data.get("status") != "ok")


def _triton_environment(task: dict) -> None:
    """Triton's caches and settings for this child alone: its cache in the child's private folder, and none
    of the TRITON_* variables a user set (a kernel override or dump folder would be read or written)."""
    for var in [v for v in os.environ if v.startswith("TRITON_")]:
        del os.environ[var]
    cache = os.path.join(task["private_dir"], "triton")
    os.makedirs(cache, mode=0o700, exist_ok=True)
    os.environ["TRITON_CACHE_DIR"] = cache
    os.environ["TRITON_HOME"] = task["private_dir"]
    import triton  # noqa: F401 - imported (its compiler, ptxas found) before the file system closes
    from triton.compiler import ASTSource  # noqa: F401


def _run(chan: Channel, task: dict) -> None:
    from .loader import get_exercise
    harness = _harness(task)
    ok, info = harness.probe()
    if not ok:
        chan.send(kind="nogpu", reason=info)
        return
    chan.send(kind="device", **info)
    ex = get_exercise(task["chapter"], task["exercise"])
    from .tensormaps import prepare_driver, runs_on
    need = types.SimpleNamespace(min_cc=tuple(task.get("min_cc") or ex.min_cc),
                                 arch=task.get("arch", getattr(ex, "arch", None)))
    from .ring import gpus_needed
    gpus, ring = info.get("gpu_count", 1), getattr(ex, "ring", None) is not None
    why = harness.ring_problem(ex) if ring and gpus >= gpus_needed(ex) else ""   # no peer access, or no NCCL
    if not runs_on(need, info["cc"]) or gpus < gpus_needed(ex) or why:
        # an older GPU, not the one an arch-specific target runs on, or a machine that cannot time a ring
        chan.send(kind="skipped", arch=info["arch"], gpus=gpus, why=why)
        return
    harness.limit_printf()
    from .cuda_errors import share_gpu
    from .gpulock import GpuLock
    lock = GpuLock(task.get("gpu_lock"))  # opened before the file system closes
    share_gpu(lock)  # who is charged for running out of memory (cuda_errors.py)
    if "call" in task:
        # CPU tests' fake harness supplies a driver without a GPU; the real one uses the spec's
        make = getattr(harness, "call_driver", None)
        driver = make(ex) if make else ex.resolve("driver")
        if "pipeline" in task["steps"]:  # an overlap step (chapter 03's schedule): its driver, imported now
            make = getattr(harness, "call_pipeline_driver", None)
            task["_pipeline_driver"] = make(ex) if make else ex.pipeline.resolve_driver()
        for fn in (driver, task.get("_pipeline_driver")):  # a driver compiling its own kernels does it now
            warm = getattr(sys.modules.get(getattr(fn, "__module__", "")), "before_confinement", None)
            if warm is not None:
                warm()
        _confine(task, compile_phase=False)
        _run_call(chan, task, ex, driver, lock)
        return

    def arm(timeout: float, what: str) -> None:
        chan.send(kind="arm", timeout=float(timeout), what=what)

    ctx = harness.Context(ex, task["programs"], task["launch"], int(task["seed"]), info, arm,
                          cases=task.get("cases"), reference_launch=task.get("reference_launch"))
    ctx.gpu_lock = lock
    if ex.pipeline is not None:
        ex.pipeline.resolve_driver()  # imported before the file system closes
    prepare_driver(ex)  # TMA maps are encoded by the driver's bindings, loaded before the file system closes
    if ring and "timing" in task["steps"]:
        harness.prepare_ring(ex)  # NCCL starts (reading /sys and /proc) before the file system closes
    _confine(task, compile_phase=False)
    failed = bool(task.get("failed_before"))
    steps = task["steps"]
    start = int(task.get("start", 0))
    if "load" in steps[:start]:
        # a fresh child after a crash: load the kernels again (it worked in the previous child)
        task["_current"] = steps.index("load")
        harness.load_step(ctx)
    for i in range(start, len(steps)):
        step = steps[i]
        task["_current"] = i
        chan.send(kind="begin", step=i, timeout=SETUP_TIMEOUT_S)
        if step == "load":
            data = harness.load_step(ctx)
            fatal = data["status"] != "ok"
        elif step.startswith("size:"):
            data = harness.correctness_step(ctx, int(step.split(":", 1)[1]))
            fatal = bool(data.pop("fatal", False))
        elif step in ("timing", "pipeline"):
            if failed:
                data, fatal = {"status": "not run", "message": "correctness failed"}, False
            else:  # each step takes the GPU lock itself (device.gpu_sections)
                data = getattr(harness, f"{step}_step")(ctx)
                fatal = bool(data.pop("fatal", False))
        else:
            raise ValueError(f"unknown step {step!r}")
        if data.get("status") not in ("ok", "passed", "not run"):
            failed = True
        chan.send(kind="result", step=i, data=data, fatal=fatal)
        if fatal:
            return


def _run_call(chan: Channel, task: dict, ex, driver, lock) -> None:
    """Steps "size:i" of a library-call exercise: the grader's driver makes the student's call.

    Each case's GPU work (inputs, the call, the checks) holds the GPU lock shared, as a kernel's
    correctness step does: it overlaps other gradings' untimed work, never another grading's timed pass.
    """
    import types
    from .cuda_errors import driver_failure
    from .device import gpu_sections
    shared, alone = gpu_sections(types.SimpleNamespace(gpu_lock=lock))  # alone: the timed pipeline step
    steps = task["steps"]
    failed = bool(task.get("failed_before"))
    for i in range(int(task.get("start", 0)), len(steps)):
        task["_current"] = i
        # the driver's work is the grader's and the library's: no student code runs, one deadline a case
        chan.send(kind="begin", step=i, timeout=max(float(ex.timeout_s), SETUP_TIMEOUT_S))
        if steps[i] == "pipeline":
            from .call_pipeline import call_pipeline_step
            data = {"status": "not run", "message": "correctness failed"} if failed else call_pipeline_step(
                ex, task["_pipeline_driver"], task["call"], task["reference_call"], int(task["seed"]), alone)
            chan.send(kind="result", step=i, data=data, fatal=False)
            continue
        case = (task.get("cases") or ex.sizes)[int(steps[i].split(":", 1)[1])]
        try:
            with shared():
                data = driver(ex.name, task["call"], dict(case), int(task["seed"]) + i)
        except Exception as exc:  # a CUDA error from cuBLAS or the driver: report it, and leave this context
            chan.send(kind="result", step=i, fatal=True, data=driver_failure(ex, exc, ex.size_label(case)))
            return
        failed = failed or data.get("status") != "passed"
        chan.send(kind="result", step=i, data=dict(data), fatal=False)

