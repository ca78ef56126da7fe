"""Supervise grading children: start one, follow its messages, kill it at its deadline, and run a list of
steps in as many fresh children as crashes and hangs make necessary (one lost step per crash).
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import time

from .report import Status
from .worker import MESSAGE_CAP, child_main

__all__ = ["STARTUP_TIMEOUT_S", "KILL_WAIT_S", "PRINTF_TAIL_BYTES", "ChildOutcome", "run_child", "run_steps",
           "read_tail", "signal_name"]

PRINTF_TAIL_BYTES = 4096
STARTUP_TIMEOUT_S = 120.0  # importing CuPy and creating a CUDA context on a cold machine
KILL_WAIT_S = 30.0


@dataclasses.dataclass
class ChildOutcome:
    results: dict = dataclasses.field(default_factory=dict)  # step -> (data, fatal)
    device: dict | None = None
    nogpu: str | None = None
    skipped: str | None = None
    current: int | None = None  # step begun without a result
    armed: str = ""             # what ran when the deadline was set by "arm"
    armed_timeout: float = 0.0
    end: str = "done"           # done | killed | died
    exitcode: int | None = None


def run_child(task: dict) -> ChildOutcome:
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child_main, args=(send, task), daemon=True, name="autograder-child")
    proc.start()
    send.close()
    out = ChildOutcome()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
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
                kind = msg.get("kind")
                if kind == "begin":
                    out.current, out.armed = msg["step"], ""
                    deadline = time.monotonic() + float(msg["timeout"])
                elif kind == "arm":
                    out.armed, out.armed_timeout = msg.get("what", ""), float(msg["timeout"])
                    deadline = time.monotonic() + float(msg["timeout"])
                elif kind == "result":
                    out.results[msg["step"]] = (msg.get("data") or {}, bool(msg.get("fatal")))
                    out.current = None
                elif kind == "device":
                    out.device = msg
                elif kind == "nogpu":
                    out.nogpu = msg.get("reason") or "no usable GPU"
                elif kind == "skipped":
                    out.skipped = msg.get("arch", "?")
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
    if out.end == "done" and out.current is not None:
        out.end = "died"  # said done in the middle of a step: treat as a crash of that step
    return out


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
