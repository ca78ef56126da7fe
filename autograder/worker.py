"""The grading child: entered by `multiprocessing` (spawn) with a task; the only place CUDA runs.

The child runs the task's steps in order (compile, each test size, timing, pipeline), sending one message per
step so that the parent knows how far it got if the child hangs or dies. After a CUDA error that
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

__all__ = ["MESSAGE_CAP", "Channel", "child_main", "shrink"]

MESSAGE_CAP = 1 << 20
SETUP_TIMEOUT_S = 180.0  # generating and uploading inputs larger than L2, computing the reference
COMPILE_TIMEOUT_S = 180.0


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


def child_main(conn, task: dict) -> None:
    """Entry point of a grading child (spawned; the parent never imports CUDA)."""
    if task.get("log_path"):
        _redirect_output(task["log_path"])
    chan = Channel(conn, task.get("cap", MESSAGE_CAP))
    code = 0
    try:
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


def _run(chan: Channel, task: dict) -> None:
    import importlib

    from .loader import get_exercise
    # tests substitute a fake harness to exercise the parent's supervision without a GPU
    harness = importlib.import_module(task.get("harness") or "autograder.harness")

    ok, info = harness.probe()
    if not ok:
        chan.send(kind="nogpu", reason=info)
        return
    chan.send(kind="device", **info)
    ex = get_exercise(task["chapter"], task["exercise"])
    if tuple(info["cc"]) < tuple(task.get("min_cc") or ex.min_cc):
        chan.send(kind="skipped", arch=info["arch"])
        return
    harness.limit_printf()
    if "call" in task:
        # CPU tests' fake harness supplies a driver without a GPU; the real one uses the spec's
        make = getattr(harness, "call_driver", None)
        _run_call(chan, task, ex, make(ex) if make else ex.resolve("driver"))
        return

    def arm(timeout: float, what: str) -> None:
        chan.send(kind="arm", timeout=float(timeout), what=what)

    ctx = harness.Context(ex, task["source"], task["launch"], int(task["seed"]), info, arm)
    failed = bool(task.get("failed_before"))
    steps = task["steps"]
    start = int(task.get("start", 0))
    if "compile" in steps[:start]:
        # a fresh child after a crash: the kernels the previous child compiled are not loaded here
        # (the disk cache makes this cheap); it compiled fine there, so it compiles here
        task["_current"] = steps.index("compile")
        harness.compile_step(ctx)
    for i in range(start, len(steps)):
        step = steps[i]
        task["_current"] = i
        chan.send(kind="begin", step=i, timeout=COMPILE_TIMEOUT_S if step == "compile" else SETUP_TIMEOUT_S)
        if step == "compile":
            data = harness.compile_step(ctx)
            fatal = data["status"] != "ok"
        elif step.startswith("size:"):
            data = harness.correctness_step(ctx, int(step.split(":", 1)[1]))
            fatal = bool(data.pop("fatal", False))
        elif step in ("timing", "pipeline"):
            if failed:
                data, fatal = {"status": "not run", "message": "correctness failed"}, False
            else:
                data = getattr(harness, f"{step}_step")(ctx)
                fatal = bool(data.pop("fatal", False))
        else:
            raise ValueError(f"unknown step {step!r}")
        if data.get("status") not in ("ok", "passed", "not run"):
            failed = True
        chan.send(kind="result", step=i, data=data, fatal=fatal)
        if fatal:
            return


def _run_call(chan: Channel, task: dict, ex, driver) -> None:
    """Steps "size:i" of a library-call exercise: the grader's driver makes the student's call."""
    steps = task["steps"]
    for i in range(int(task.get("start", 0)), len(steps)):
        task["_current"] = i
        # the driver's work is the grader's and the library's: no student code runs, one deadline a case
        chan.send(kind="begin", step=i, timeout=max(float(ex.timeout_s), SETUP_TIMEOUT_S))
        case = ex.sizes[int(steps[i].split(":", 1)[1])]
        try:
            data = driver(ex.name, task["call"], dict(case), int(task["seed"]) + i)
        except Exception as exc:  # a CUDA error from cuBLAS: report it, and leave this context
            chan.send(kind="result", step=i, fatal=True, data={"status": "crashed", "message": (
                f"the call failed on the GPU ({type(exc).__name__}: {exc}). Check every size and leading "
                "dimension against the buffers they describe.")})
            return
        chan.send(kind="result", step=i, data=dict(data), fatal=False)
