"""A stand-in for autograder.harness inside grading children, for CPU tests of the parent.

Behaviour is chosen by a comment in the kernel source, e.g. ``// FAKE: hang@2 die@1 slow``:
  compile-error, hang@I (arms 0.5 s then sleeps), die@I (SIGKILL), fatal@I (crash result, child exits),
  fail@I, raise@I (grader bug), huge@I (a 3 MB message), print (printf-like output), slow, impossible,
  wrongtimed, nogpu, oldgpu.
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
    def __init__(self, ex, source, launch_cfg, seed, device, arm):
        self.ex, self.source, self.cfg, self.seed, self.arm = ex, source, launch_cfg, seed, arm
        self.flags = _flags(source)


def probe():
    # the source is not known yet at probe time; tests put GPU flags in the environment instead
    mode = os.environ.get("FAKE_GPU", "h100")
    if mode == "none":
        return False, "This needs an NVIDIA GPU, and none is usable here: fake machine without a GPU."
    cc = [7, 5] if mode == "t4" else [9, 0]
    return True, {"name": "Fake GPU", "cc": cc, "arch": f"sm_{cc[0]}{cc[1]}", "l2_bytes": 1 << 20, "sm_count": 1}


def limit_printf():
    pass


def compile_step(ctx):
    if "compile-error" in ctx.flags:
        return {"status": "compile error", "message": "kernel.cu(3): error: expected a ';'"}
    ctx.compiled = True
    return {"status": "ok", "log": "", "notes": []}


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
    if f"fatal@{index}" in f:
        return {"sizes": sizes, "status": "crashed", "message": "crashed: an illegal memory access", "fatal": True}
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
