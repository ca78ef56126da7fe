"""Counter checks: the student's kernel profiled once under Nsight Compute, in a process of the grader's own.

A technique such as ``no_bank_conflicts`` is decided by hardware counters, which only ncu reads, and ncu must
start the process it profiles. So, after every size case has passed, the parent (which never initializes
CUDA) starts ``ncu ... python -m autograder.counters TASK`` in the grading's private folder. That child is
grader code: it loads the cubin the compile child made, draws fresh inputs from the grading's seed at one
size case, launches the student's kernel once, and checks the output against the reference on the host (a
kernel must compute the same whether or not it is profiled). No student Python runs anywhere here.

What the student's kernel cannot reach: ncu writes its CSV to a file in the private folder (``--log-file``),
and the child sends its own stdout and stderr (where a kernel's ``printf`` lands) to another file before
CUDA starts, so no printed line can pose as a metric row; the child writes its verdict to a third file,
which no kernel has a pointer to. The profile holds the GPU alone (the session's GPU lock,
exclusive) and leaves the clocks as they are (``--clock-control none``), so it disturbs no one's timing.

Where ncu is missing or may not read the counters (ERR_NVGPUCTRPERM, the default for non-administrators on
many machines), the check is not made and the report says why; it is never held against the student.
"""
from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

from .techniques import CHECKS, Verdict, counter_verdict

__all__ = ["COUNTER_TIMEOUT_S", "COUNTER_MAX_BYTES", "counter_checks", "pick_case", "ncu_command", "measure",
           "main"]

COUNTER_TIMEOUT_S = 180.0      # ncu's start, its replay passes and the child's checks, at a small size
COUNTER_MAX_BYTES = 64 << 20   # the largest size case profiled: counts per instruction do not need more
_TAIL = 600                    # characters of ncu's own words kept in a message


def counter_checks(ex) -> list:
    """The names among ``ex.techniques`` that are decided by counters."""
    return [n for n in ex.techniques if CHECKS[n].where == "counters"]


def _case_bytes(ex, sizes: dict) -> int:
    from .spec import shape_of
    total = 0
    for p in ex.arrays:
        n = 1
        for d in shape_of(p.shape, sizes):
            n *= int(d)
        total += n * p.np_dtype.itemsize
    return total


def pick_case(ex, l2_bytes: int):
    """The size case to profile: the spec's ``speed_size`` if it fits in COUNTER_MAX_BYTES, else the public
    case that moves the most bytes within it (None when none fits)."""
    speed = getattr(ex, "speed_size", None)
    if speed:
        sizes = ex.resolve_sizes(speed, l2_bytes)
        if _case_bytes(ex, sizes) <= COUNTER_MAX_BYTES:
            return sizes
    fitting = [(_case_bytes(ex, s), i, s) for i, s in enumerate(ex.resolve_sizes(c, l2_bytes) for c in ex.sizes)]
    fitting = [f for f in fitting if f[0] <= COUNTER_MAX_BYTES]
    return max(fitting)[2] if fitting else None


def ncu_command(ncu: str, metrics, kernel: str, log_file: str, task_file: str) -> list:
    """ncu's command line: the one kernel, one launch, clocks untouched, CSV into ``log_file``."""
    return [ncu, "--csv", "--log-file", log_file, "--print-units", "base", "--clock-control", "none",
            "--kernel-name-base", "mangled", "--metrics", ",".join(metrics), "--kernel-name", kernel, "--launch-count", "1",
            sys.executable, "-m", "autograder.counters", task_file]


def _not_checked(names, why: str) -> list:
    return [Verdict(n, None, f"{n} was not checked: {why}") for n in names]


def _hold(lock_dir):
    from .gpulock import GpuLock
    return GpuLock(lock_dir).exclusive()


def _run(cmd, cwd: str, timeout: float):
    """(returncode or None on timeout, stdout + stderr); the whole process group is ended on a timeout."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out or ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, out or ""


def measure(ex, program: dict, cfg: dict, seed: int, private: str, l2_bytes: int, lock_dir=None,
            ncu: str | None = None) -> list:
    """The `Verdict` of each counter check of ``ex`` for the student's ``program`` (compile-child data)."""
    names = counter_checks(ex)
    if not names:
        return []
    from course.ncu import ncu_path, parse_ncu_csv
    ncu = ncu or ncu_path()
    if ncu is None:
        return _not_checked(names, "Nsight Compute (ncu) is not installed on the grading machine. Measure it "
                                   "yourself with course.profile where ncu runs (chapter 11 shows how).")
    sizes = pick_case(ex, l2_bytes)
    if sizes is None:
        return _not_checked(names, f"no size case of {ex.name} is small enough to profile (a grader problem).")
    metrics = sorted({m for n in names for m in CHECKS[n].metrics})
    folder = Path(private)
    task_file, log_file, verdict_file, child_out = (str(folder / f) for f in (
        "counters.pkl", "ncu.csv", "counters.json", "counters.out"))
    with open(task_file, "wb") as fh:
        pickle.dump({"chapter": ex.chapter, "exercise": ex.name, "program": program, "launch": dict(cfg),
                     "seed": int(seed), "sizes": sizes, "verdict_file": verdict_file, "child_out": child_out}, fh)
    symbol = program.get("lowered_names", {}).get(ex.kernel, ex.kernel)
    t0 = time.monotonic()
    with _hold(lock_dir):
        code, out = _run(ncu_command(ncu, metrics, symbol, log_file, task_file), private, COUNTER_TIMEOUT_S)
    log = Path(log_file).read_text(errors="replace") if Path(log_file).exists() else ""
    words = (log + "\n" + out)
    label = ex.size_label(sizes)
    if "ERR_NVGPUCTRPERM" in words:
        return _not_checked(names, "the grading machine does not let this user read the GPU's performance "
                                   "counters (ERR_NVGPUCTRPERM); an administrator can allow it.")
    if code is None:
        return [Verdict(n, False, f"Expected: {ex.kernel} runs once under the profiler at {label}, as it ran in the "
                                  f"correctness tests. Found: it had not finished after {COUNTER_TIMEOUT_S:.0f} s "
                                  "under Nsight Compute. A kernel must behave the same whether or not it is "
                                  "profiled.") for n in names]
    try:
        child = json.loads(Path(verdict_file).read_text())
    except (OSError, ValueError):
        child = None
    if child is None:
        return _not_checked(names, f"the profiled run ended without a verdict (exit {code}): "
                                   f"{_scrub(words, private)[-_TAIL:]}")
    if child.get("status") != "ok":
        return [Verdict(n, False, f"Expected: the same output under the profiler as in the correctness tests. "
                                  f"Found: at {label}, {child.get('message', '')}") for n in names]
    got = {r["metric"]: r["value"] for r in parse_ncu_csv(log) if r["metric"] in metrics and r["value"] is not None}
    if not got:
        return _not_checked(names, f"ncu counted nothing for {symbol} ({time.monotonic() - t0:.0f} s): "
                                   f"{_scrub(words, private)[-_TAIL:]}")
    return [counter_verdict(n, got) for n in names]


def _scrub(text: str, private: str) -> str:
    """ncu's words without the grader's folders."""
    return " ".join(text.replace(private, "<private>").split())


# -- the profiled child --------------------------------------------------------------------------

def _child(task: dict) -> dict:
    import numpy as np

    from .buffers import fill_output, make_inputs, numpy_reference, output_problem
    from .compiling import program_from_dict
    from .device import backend, kernel_args, launch, set_constants
    from .loader import get_exercise
    from .spec import In, InOut, Out, shape_of
    import course
    ex = get_exercise(task["chapter"], task["exercise"])
    sizes = task["sizes"]
    kernel = course.Module(program_from_dict(task["program"])).kernel(ex.kernel)
    rng = np.random.default_rng([task["seed"], 1 << 30])   # a stream no size case of the grading draws from
    host, scalars = make_inputs(ex, sizes, rng)
    cp = backend().xp
    arrays = {}
    for p in ex.arrays:
        if isinstance(p, (In, InOut)):
            arrays[p.name] = cp.asarray(host[p.name])
        else:
            arrays[p.name] = cp.empty(shape_of(p.shape, sizes), dtype=p.np_dtype)
            fill_output(arrays[p.name], p, 0)
    if ex.constants:
        set_constants(ex, kernel, {c.name: cp.asarray(host[c.name]) for c in ex.constants})
    geo = ex.launch(dict(sizes), dict(task["launch"]))
    launch(kernel, (geo[0], geo[1], int(geo[2])), kernel_args(ex, arrays, scalars))
    if ex.reference == "kernel":
        return {"status": "ok"}
    want = numpy_reference(ex, sizes, host, scalars)
    for p in ex.arrays:
        if isinstance(p, (Out, InOut)):
            problem = output_problem(ex, p, backend().host(arrays[p.name]), want[p.name], 0)
            if problem:
                return {"status": "wrong", "message": problem}
    return {"status": "ok"}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    with open(argv[0], "rb") as fh:
        task = pickle.load(fh)   # written by `measure` into the grading's private folder (0700)
    out = os.open(task["child_out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)              # a kernel's printf goes here, never next to ncu's rows
    os.dup2(out, 2)
    try:
        verdict = _child(task)
    except Exception as exc:   # a crash under the profiler is reported, not hidden
        verdict = {"status": "wrong", "message": f"the run failed: {type(exc).__name__}: {str(exc)[:400]}"}
    Path(task["verdict_file"]).write_text(json.dumps(verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
