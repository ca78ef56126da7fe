"""Counter checks: the student's kernel profiled once under Nsight Compute, in a process of the grader's own.

A technique such as ``no_bank_conflicts`` is decided by hardware counters, which only ncu reads, and ncu must
start the process it profiles. So, after every size case has passed, the parent (which never initializes
CUDA) starts ``ncu ... python -m autograder.counters TASK`` in the grading's private folder. That child is
grader code: it loads the cubin the compile child made, draws fresh inputs from the grading's seed at one
size case, launches the student's kernel once, and checks the output against the reference on the host (a
kernel must compute the same whether or not it is profiled). No student Python runs anywhere here.

What the student's kernel cannot reach or predict: ncu writes its CSV to a file of a fresh folder
(``--log-file``), and the child sends its own stdout and stderr (where a kernel's ``printf`` lands) to another
file before CUDA starts, so no printed line can pose as a metric row; the child writes its verdict to a third
file, which no kernel has a pointer to. Unlike the other grading children, this one is not confined with
Landlock: ncu's measurement library, which runs inside the profiled process, fails to start under it
("Failed to initialize the profiler: LibraryNotLoaded", tried on an H200 with /dev/shm and /tmp writable,
and without Landlock's scoping of signals and abstract sockets).
What runs there is the grader's Python and the student's kernel, which can make no system call.

The size profiled is one of the grading's hidden cases where one fits (drawn from a seed the student never
sees), and the profiled launch comes after 0 to 3 unprofiled ones (``--launch-skip``, from the same seed), so
a kernel cannot tell the profiled launch from the others. The child marks the moment it launches: a child that launched and then gave no verdict (it crashed, or had not
finished in time) fails the check, while a failure before that (ncu's start, its lock) is the grader's, a
note. The child holds the GPU alone (the session's GPU lock, exclusive) only around its launches, and the
clocks stay as they are (``--clock-control none``), so it disturbs no one's timing.

Where ncu is missing or may not read the counters (ERR_NVGPUCTRPERM, the default for non-administrators on
many machines), the check is not made and the report says why; it is never held against the student.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

from .source_check import scrub_log
from .techniques import CHECKS, Verdict, counter_verdict

__all__ = ["COUNTER_TIMEOUT_S", "COUNTER_MAX_BYTES", "counter_checks", "pending", "pick_case", "ncu_command",
           "measure", "main"]

COUNTER_TIMEOUT_S = 180.0      # ncu's start, its replay passes and the child's checks, at a small size
COUNTER_MAX_BYTES = 64 << 20   # the largest size case profiled: counts per instruction do not need more
_TAIL = 600                    # characters of ncu's own words kept in a message


def counter_checks(ex) -> list:
    """The names among ``ex.techniques`` that are decided by counters."""
    return [n for n in ex.techniques if CHECKS[n].where == "counters"]


def pending(ex) -> list:
    """Notes for a grading without a GPU: which counter checks a GPU would decide, and how."""
    return [f"{n}: it is measured on a GPU, after the correctness tests, by profiling your kernel once with "
            "Nsight Compute (where the grading machine has ncu and lets it read the counters)"
            for n in counter_checks(ex)]


def pick_case(ex, l2_bytes: int, hidden=()):
    """The size case to profile: the largest of the grading's ``hidden`` cases whose arrays fit in
    COUNTER_MAX_BYTES, else the spec's ``speed_size`` if it fits, else the public case that moves the most bytes
    within the cap (None when none fits)."""
    def largest(cases):
        fitting = [(ex.array_bytes(s), i, s) for i, s in enumerate(ex.resolve_sizes(c, l2_bytes) for c in cases)]
        fitting = [f for f in fitting if f[0] <= COUNTER_MAX_BYTES]
        return max(fitting)[2] if fitting else None
    speed = getattr(ex, "speed_size", None)
    return largest(hidden) or (largest([speed]) if speed else None) or largest(ex.sizes)


def ncu_command(ncu: str, metrics, kernel: str, log_file: str, task_file: str, skip: int = 0) -> list:
    """ncu's command line: one launch of the kernel after ``skip`` others, clocks untouched, CSV into
    ``log_file``."""
    return [ncu, "--csv", "--log-file", log_file, "--print-units", "base", "--clock-control", "none",
            "--kernel-name-base", "mangled", "--metrics", ",".join(metrics), "--kernel-name", kernel,
            "--launch-skip", str(skip), "--launch-count", "1", sys.executable, "-m", "autograder.counters", task_file]


def _not_checked(names, why: str) -> list:
    return [Verdict(n, None, f"{n} was not checked: {why}") for n in names]


@contextlib.contextmanager
def _one_profile_at_a_time():
    """Gradings on one host profile one after another: ncu takes a machine-wide lock of its own, and a wait
    for it inside the timeout could be taken for a kernel that hangs."""
    fd = os.open(os.path.join(tempfile.gettempdir(), "autograder-ncu.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)   # closing releases the lock


def measure(ex, program: dict, cfg: dict, seed: int, private: str, l2_bytes: int, lock_dir=None,
            ncu: str | None = None, hidden=()) -> list:
    """The `Verdict` of each counter check of ``ex`` for the student's ``program`` (compile-child data),
    profiled at one of the grading's ``hidden`` size cases where one fits."""
    names = counter_checks(ex)
    if not names:
        return []
    from course.ncu import PERMISSION_HELP, denied, ncu_path, parse_ncu_csv, run_profiled
    ncu = ncu or ncu_path()
    if ncu is None:
        return _not_checked(names, "Nsight Compute (ncu) is not installed on the grading machine. Measure it "
                                   "yourself with course.profile where ncu runs (chapter 11 shows how).")
    sizes = pick_case(ex, l2_bytes, hidden)
    if sizes is None:
        return _not_checked(names, f"no size case of {ex.name} is small enough to profile (a grader problem).")
    metrics = sorted({m for n in names for m in CHECKS[n].metrics})
    folder = Path(tempfile.mkdtemp(prefix="counters-", dir=private))   # 0700, made now: nothing stale in it
    task_file, log_file, verdict_file, child_out, marker = (str(folder / f) for f in (
        "task.pkl", "ncu.csv", "verdict.json", "child.out", "launching"))
    skip = int(seed) % 4
    with open(task_file, "wb") as fh:
        pickle.dump({"chapter": ex.chapter, "exercise": ex.name, "program": program, "launch": dict(cfg),
                     "seed": int(seed), "sizes": sizes, "launches": skip + 1, "lock_dir": lock_dir,
                     "verdict_file": verdict_file, "child_out": child_out, "marker": marker}, fh)
    symbol = program.get("lowered_names", {}).get(ex.kernel, ex.kernel)
    with _one_profile_at_a_time():
        t0 = time.monotonic()
        code, out = run_profiled(ncu_command(ncu, metrics, symbol, log_file, task_file, skip),
                                 timeout=COUNTER_TIMEOUT_S, cwd=str(folder))
    log = Path(log_file).read_text(errors="replace") if Path(log_file).exists() else ""
    words, label, launched = log + "\n" + out, ex.size_label(sizes), Path(marker).exists()
    if denied(words):
        return _not_checked(names, f"on the grading machine, {PERMISSION_HELP}.")
    try:
        child = json.loads(Path(verdict_file).read_text())
    except (OSError, ValueError):
        child = None
    if child is None and launched:
        how = (f"it had not finished after {COUNTER_TIMEOUT_S:.0f} s" if code is None
               else f"its process ended without finishing (exit {code})")
        return [Verdict(n, False, f"Expected: {ex.kernel} runs under the profiler at {label} as it ran in the "
                                  f"correctness tests. Found: {how} under Nsight Compute. A kernel must behave "
                                  "the same whether or not it is profiled.") for n in names]
    if child is None:
        why = f"did not start within {COUNTER_TIMEOUT_S:.0f} s" if code is None else f"ended with exit {code}"
        return _not_checked(names, f"the profiler {why} before your kernel ran (a grader problem): "
                                   f"{scrub_log(words)[-_TAIL:]}")
    if child.get("status") == "grader":
        return _not_checked(names, f"{child.get('message', '')} (a grader problem)")
    if child.get("status") != "ok":
        return [Verdict(n, False, f"Expected: the same output under the profiler as in the correctness tests. "
                                  f"Found: at {label}, {child.get('message', '')}") for n in names]
    got = {r["metric"]: r["value"] for r in parse_ncu_csv(log) if r["metric"] in metrics and r["value"] is not None}
    if not got:
        return _not_checked(names, f"ncu counted nothing for {symbol} ({time.monotonic() - t0:.0f} s): "
                                   f"{scrub_log(words)[-_TAIL:]}")
    return [counter_verdict(n, got) for n in names]


# -- the profiled child --------------------------------------------------------------------------

def _child(task: dict, ex, lock) -> dict:
    import numpy as np

    from .buffers import fill_output, make_inputs, numpy_reference, output_problem
    from .compiling import program_from_dict
    from .device import backend, kernel_args, launch, set_constants
    from .spec import In, InOut, Out, shape_of
    import course
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
    args = kernel_args(ex, arrays, scalars, dict(task["launch"]))   # the same buffers on every launch
    with lock.exclusive():   # ncu replays the profiled launch inside the call: the GPU is ours meanwhile
        Path(task["marker"]).touch()
        for _ in range(int(task.get("launches", 1))):   # the profiled one is the last (ncu --launch-skip)
            for p in ex.arrays:   # every launch on the same fresh inputs and poisoned outputs
                if isinstance(p, InOut):
                    arrays[p.name][...] = cp.asarray(host[p.name])
                elif isinstance(p, Out):
                    fill_output(arrays[p.name], p, 0)
            launch(kernel, (geo[0], geo[1], int(geo[2])), args)
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
    from .gpulock import GpuLock
    lock = GpuLock(task.get("lock_dir"))
    try:
        from .loader import get_exercise
        ex = get_exercise(task["chapter"], task["exercise"])
    except Exception as exc:
        ex, failed = None, f"{type(exc).__name__}: {str(exc)[:400]}"
    try:
        verdict = ({"status": "grader", "message": f"the grader could not load the exercise: {failed}"}
                   if ex is None else _child(task, ex, lock))
    except Exception as exc:   # a crash under the profiler is reported, not hidden
        verdict = {"status": "wrong", "message": f"the run failed: {type(exc).__name__}: {str(exc)[:400]}"}
    Path(task["verdict_file"]).write_text(json.dumps(verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
