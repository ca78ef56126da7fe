"""Supervise grading children: start one, follow its messages, kill it at its deadline, and run a list of
steps in as many fresh children as crashes and hangs make necessary (one lost step per crash).

Children are forked from a warm server process (multiprocessing's forkserver) that has imported NumPy, CuPy
and the grader but never touched CUDA, so a child starts in milliseconds instead of importing CuPy again.
CuPy's own kernels (the elementwise and reduction kernels the grader's checks use) compile into one cache
folder that this process creates for its children (0700, removed at exit): no cache of the user's is
read, and the compilations are paid once per grading process instead of once per grading.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time

from .report import Status
from .trace import tracer
from .worker import MESSAGE_CAP, child_main

__all__ = ["STARTUP_TIMEOUT_S", "KILL_WAIT_S", "PRINTF_TAIL_BYTES", "START_METHOD", "ChildOutcome", "run_child",
           "run_steps", "read_tail", "signal_name", "kernel_cache_dir"]

PRINTF_TAIL_BYTES = 4096
STARTUP_TIMEOUT_S = 120.0  # importing CuPy and creating a CUDA context on a cold machine
KILL_WAIT_S = 30.0
# "spawn" starts every child from scratch (slower; for debugging the warm server)
START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
PRELOAD = ["numpy", "cupy", "course", "autograder.worker", "autograder.harness", "autograder.loader"]
_STATE = {"ctx": None, "cache": None}
_STATE_LOCK = threading.Lock()


def kernel_cache_dir() -> str:
    """The folder this process's children compile CuPy's kernels into (made on first use)."""
    with _STATE_LOCK:
        if _STATE["cache"] is None:
            path = tempfile.mkdtemp(prefix="autograder-kernels-")
            atexit.register(shutil.rmtree, path, True)
            _STATE["cache"] = path
        return _STATE["cache"]


def _context():
    cache = kernel_cache_dir()
    with _STATE_LOCK:
        if _STATE["ctx"] is None:
            ctx = multiprocessing.get_context(START_METHOD)
            if START_METHOD == "forkserver":
                from multiprocessing import forkserver
                ctx.set_forkserver_preload(PRELOAD)
                # the server imports CuPy with this environment: its cache is ours, never the user's
                old = os.environ.get("CUPY_CACHE_DIR")
                os.environ["CUPY_CACHE_DIR"] = cache
                try:
                    forkserver.ensure_running()
                finally:
                    if old is None:
                        os.environ.pop("CUPY_CACHE_DIR", None)
                    else:
                        os.environ["CUPY_CACHE_DIR"] = old
            _STATE["ctx"] = ctx
        return _STATE["ctx"]


@dataclasses.dataclass
class ChildOutcome:
    results: dict = dataclasses.field(default_factory=dict)  # step -> (data, fatal)
    device: dict | None = None
    nogpu: str | None = None
    skipped: str | None = None
    skipped_gpus: int | None = None   # the GPUs the child saw, when it skipped (a ring exercise needs several)
    skipped_why: str = ""             # why those GPUs cannot time a ring (no peer access, no NCCL)
    current: int | None = None  # step begun without a result
    armed: str = ""             # what ran when the deadline was set by "arm"
    armed_timeout: float = 0.0
    end: str = "done"           # done | killed | died
    exitcode: int | None = None


def run_child(task: dict) -> ChildOutcome:
    ctx = _context()
    # a forked child starts with the server's environment; give it this process's, as spawn would
    task = {**task, "kernel_cache": kernel_cache_dir(), "environ": dict(os.environ)}
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child_main, args=(send, task), daemon=True, name="autograder-child")
    proc.start()
    send.close()
    out = ChildOutcome()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    trace, born, step_t, steps = tracer(), time.monotonic(), None, {}
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                out.end = "killed"
                break
            try:
                ready = recv.poll(min(remaining, 0.5))
            except (EOFError, OSError):
                ready = False
            if ready:
                try:
                    msg = json.loads(recv.recv_bytes(maxlength=task.get("cap", MESSAGE_CAP)))
                except EOFError:
                    out.end = "died"  # closed without a "done" message
                    break
                except (OSError, ValueError):
                    out.end = "killed"  # oversized or garbled: do not trust the child further
                    break
                if not isinstance(msg, dict) or ("step" in msg and not isinstance(msg["step"], int)):
                    out.end = "killed"  # a child that ran student Python may send anything: the same
                    break
                kind = msg.get("kind")
                if kind in ("begin", "arm"):
                    wait = _timeout(msg, task.get("max_step_s"))
                    if wait is None:
                        out.end = "killed"
                        break
                    deadline = time.monotonic() + wait
                if kind == "begin":
                    if trace:
                        step_t = (_step_name(task, msg.get("step")), time.monotonic())
                    out.current, out.armed = msg.get("step"), ""
                elif kind == "arm":
                    out.armed, out.armed_timeout = str(msg.get("what", "")), wait
                elif kind == "result":
                    if trace and step_t:
                        steps[step_t[0]] = round(steps.get(step_t[0], 0.0) + time.monotonic() - step_t[1], 4)
                    data = msg.get("data")
                    out.results[msg.get("step")] = (data if isinstance(data, dict) else {}, bool(msg.get("fatal")))
                    out.current = None
                elif kind == "device":
                    if trace:
                        steps["startup"] = round(time.monotonic() - born, 4)
                    out.device = msg
                elif kind == "nogpu":
                    out.nogpu = msg.get("reason") or "no usable GPU"
                elif kind == "skipped":
                    out.skipped = msg.get("arch", "?")
                    out.skipped_gpus = msg.get("gpus")
                    out.skipped_why = str(msg.get("why") or "")[:500]
                elif kind == "done":
                    break
            elif not proc.is_alive():
                out.end = "died"
                break
    finally:
        if out.end == "killed" or proc.is_alive():
            proc.join(5 if out.end != "killed" else 0)
            if proc.is_alive():
                proc.kill()
            proc.join(KILL_WAIT_S)
        out.exitcode = proc.exitcode
        recv.close()
        if trace:
            trace.event("child", phase=task.get("phase") or "run", exercise=task.get("exercise"), end=out.end,
                        seconds=round(time.monotonic() - born, 4), steps=steps)
    if out.end == "done" and out.current is not None:
        out.end = "died"  # said done in the middle of a step: treat as a crash of that step
    return out


def _timeout(msg: dict, cap) -> float | None:
    """A begin or arm message's deadline in seconds, at most ``cap`` (a child that ran student Python could ask
    for days); None when it is not a number."""
    try:
        wait = float(msg["timeout"])
    except (KeyError, TypeError, ValueError):
        return None
    if wait != wait:  # NaN
        return None
    return min(max(wait, 0.0), float(cap)) if cap else wait


def _step_name(task: dict, step) -> str:
    names = task.get("steps") or []
    name = names[step] if isinstance(step, int) and 0 <= step < len(names) else task.get("phase") or "step"
    return name if isinstance(name, str) else str(name)


def signal_name(code) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def read_tail(path: str, limit: int = PRINTF_TAIL_BYTES) -> str:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").strip()
    if size > limit:
        text = f"[... {size - limit} earlier bytes cut]\n" + text
    return text


def run_steps(base_task: dict, steps: list, log_path: str) -> tuple:
    """Run ``steps`` in as many children as it takes; (results by step, last outcome, log text).

    The children's output goes to ``log_path`` (in the grading's private folder); its tail comes back.
    """
    results = {}
    outcome = None
    start = 0
    try:
        while start < len(steps):
            failed = any(d.get("status") not in ("ok", "passed", "not run") for d, _ in results.values())
            if steps[start] in ("timing", "pipeline") and failed:
                results[start] = ({"status": Status.NOT_RUN, "message": "correctness failed"}, False)
                start += 1
                continue
            task = {**base_task, "steps": steps, "start": start, "failed_before": failed, "log_path": log_path}
            outcome = run_child(task)
            if outcome.nogpu or outcome.skipped:
                break
            for k, v in outcome.results.items():
                results[k] = v
            if outcome.end in ("killed", "died"):
                k = outcome.current
                if k is None:  # died between steps, or before the first one
                    k = next((j for j in range(start, len(steps)) if j not in results), None)
                    if k is None:
                        break
                    results[k] = ({"status": Status.ERROR, "message": (
                        f"the grading process stopped outside a step ({signal_name(outcome.exitcode)})"
                        + (": it did not start within the time limit" if outcome.end == "killed" else "")
                        + ". Grader problem; its log: " + read_tail(log_path, 1500))}, True)
                elif outcome.end == "killed" and outcome.armed:
                    results[k] = ({"status": Status.TIMED_OUT, "message": (
                        f"timed out: {outcome.armed} was still running after {outcome.armed_timeout:.0f} s "
                        "and was stopped. Look for a loop whose exit condition never becomes true, or a "
                        "__syncthreads() that not every thread of the block reaches.")}, True)
                elif outcome.end == "killed":
                    results[k] = ({"status": Status.ERROR, "message":
                                   "the grader's own work at this step took too long (grader problem)"}, True)
                else:
                    results[k] = ({"status": Status.CRASHED, "message": (
                        f"the grading process died ({signal_name(outcome.exitcode)})"
                        + (f" while running {outcome.armed}" if outcome.armed else "")
                        + ". A fault in the driver from your kernel, or a grader problem.")}, True)
            done = sorted(results)
            if not done:
                break
            last = done[-1]
            data, fatal = results[last]
            status = data.get("status")
            if steps[last] == "load" and status != "ok":
                break
            if status in (Status.TIMED_OUT, Status.ERROR):
                for j in range(last + 1, len(steps)):
                    results[j] = ({"status": Status.NOT_RUN, "message": f"an earlier step {status}"}, False)
                break
            nxt = next((j for j in range(start, len(steps)) if j not in results), None)
            if nxt is None:
                break
            start = nxt
    finally:
        printf = read_tail(log_path)
    return results, outcome, printf
