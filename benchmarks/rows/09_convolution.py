"""Chapter 09 rows: the register-blocked convolution against cuBLAS SGEMM and against one output per thread.

F = 2^23 outputs, G = 512 taps, 2 F G FLOPs per call. cuBLAS SGEMM's TFLOP/s (measured in this run's
ceilings) is the practical FP32 FMA ceiling. Every kernel is checked against a float64 reference (a sample
of outputs at F, every output at odd sizes) before anything is timed. CuPy's correlate is reported in
"equivalent" TFLOP/s (2 F G over its time), whatever algorithm it picks. The lesson's kernels are the
notebook's %%cuda cells (course.lesson_cell), the graded references solutions/09_convolution/*.cu.

Section 9's exercise, damped_waves: the exercise notebook's accurate starter (expf, cosf, IEEE division) against
the graded reference (__expf, __fdividef, __cosf after a hand reduction) at the grader's speed size, in G terms/s
(32 terms an element), both checked first against the spec's float64 reference within its tolerance.
"""
from __future__ import annotations

from pathlib import Path

STEM = "09_convolution"
F = 1 << 23
G = 512
ODD = (1, 1009, 2047, 100_003)
REPO = Path(__file__).resolve().parents[2]
EXERCISE = REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb"
WAVES_TERMS = 32
WAVES_CHECK = (1, 1009, 100_003)


def _blocked_launch(n):
    """The grader's geometry for conv_blocked (autograder/specs/09_convolution.py): 128 x 16 outputs per block."""
    return -(-n // (128 * 16)), 128


def _const_launch(n):
    return -(-n // 256), 256


def _waves_inputs(ex, n, seed):
    """x, d, w, c as the grader draws them (autograder.sample_inputs), in signature order; and all of it."""
    from autograder import sample_inputs
    v = sample_inputs(ex, {"n": n}, seed)
    return [v[k] for k in ("x", "d", "w", "c")], v


def _waves_rows(ctx) -> list:
    """damped_waves: the notebook's accurate starter against the graded reference (target: under the grader's
    0.8 with 5% to spare)."""
    import cupy
    import numpy as np
    import course
    from autograder import get_exercise
    ex = get_exercise(STEM, "damped_waves")
    kernels = {"reference": course.compile(course.solution_source(STEM, "damped_waves")).kernel("damped_waves"),
               "starter": course.notebook_cells(EXERCISE)["damped_waves_starter"].kernel()}
    for n in WAVES_CHECK:
        ins, v = _waves_inputs(ex, n, seed=n)
        args = [cupy.asarray(a) for a in ins]
        want = ex.reference(v)["y"].astype(np.float32)
        for name, k in kernels.items():
            y = cupy.full(n, np.nan, dtype=cupy.float32)
            k(*ex.launch({"n": n}, ex.launch_defaults)[:2], *args, y, n)
            ok = course.check(y.get(), want, rtol=ex.tolerance.rtol, atol=ex.tolerance.atol)
            assert ok, f"damped_waves {name} wrong at n={n}: {ok.message}"
    n = ex.speed_size["n"]                    # the grader's launch at its speed size
    grid, block = ex.launch({"n": n}, ex.launch_defaults)[:2]
    args = [cupy.asarray(a) for a in _waves_inputs(ex, n, seed=13)[0]]
    y = cupy.empty(n, dtype=cupy.float32)
    t = ctx.interleaved({name: (lambda k=k: k(grid, block, *args, y, n)) for name, k in kernels.items()})
    rate = {name: n * WAVES_TERMS / r.median_ms / 1e6 for name, r in t.items()}     # G terms/s
    return [ctx.row("damped_waves: accurate starter (expf, cosf, IEEE division) vs graded reference, n=2^24",
                    rate["starter"], "Gterm/s", anchor="graded damped_waves reference (intrinsics where safe)",
                    anchor_value=rate["reference"], target=round(0.95 * ex.speed_threshold, 3),
                    higher_is_better=False,
                    note=f"reference median {t['reference'].median_ms:.3f} ms; the grader's threshold is "
                         f"{ex.speed_threshold:g}")]


def _set_taps(kernel, w):
    """Fill the graded conv_const's `__constant__ float w[1024]` (the grader does this before every run)."""
    kernel.module.get_global("w").copy_from_device(w.data, w.nbytes)


def rows(ctx) -> list:
    import cupy
    import course
    from course.lessons import ch09
    blocked = course.compile(course.solution_source(STEM, "conv_blocked")).kernel("conv_blocked")
    const = course.compile(course.solution_source(STEM, "conv_const")).kernel("conv_const")
    lesson = ch09.Lesson(G)        # the notebook's conv_naive, conv_cmem and conv_reg cells, compiled

    # correctness first, at sizes with partial blocks, every output checked
    for n in ODD:
        x, w, y = ch09.make_inputs(n, G, seed=n)
        launches = {
            "conv_blocked": lambda: blocked(_blocked_launch(n)[0], 128, x, w, y, n),
            "conv_const": lambda: (_set_taps(const, w), const(_const_launch(n)[0], 256, x, y, n, G)),
            "one output per thread": lambda: lesson.whole_gpu(x, w, y),
            "__constant__ taps": lambda: lesson.constant(x, w, y),
            "conv_reg": lambda: lesson.registers(x, w, y),
        }
        for name, launch in launches.items():
            y.fill(cupy.nan)
            launch()
            ok = ch09.sample_check(y, x, w, samples=n)
            assert ok, f"{name} wrong at n={n}: {ok.message}"

    x, w, y = ch09.make_inputs(F, G, seed=11)
    flops = ch09.flops(F, G)
    lesson.constant(x, w, y)                      # fills c_w once; the timed calls skip the copy
    lesson.registers(x, w, y)
    _set_taps(const, w)                           # the same taps for every timed call
    cupy.cuda.runtime.deviceSynchronize()
    timed = {
        "blocked": lambda: blocked(_blocked_launch(F)[0], 128, x, w, y, F),
        "naive": lambda: lesson.whole_gpu(x, w, y),
        "cmem": lambda: lesson.constant(x, w, y, set_taps=False),
        "const_graded": lambda: const(_const_launch(F)[0], 256, x, y, F, G),
        "reg": lambda: lesson.registers(x, w, y, set_taps=False),
    }
    for name, launch in timed.items():           # and at F, on a sample, with the timed inputs
        y.fill(cupy.nan)
        if name == "cmem":
            lesson.constant(x, w, y)
        elif name == "reg":
            lesson.registers(x, w, y)
        else:
            launch()
        ok = ch09.sample_check(y, x, w, samples=20_000)
        assert ok, f"{name} wrong at F: {ok.message}"
    t = ctx.interleaved(timed)
    tf = {k: v.tflops(flops) for k, v in t.items()}

    lib = {}
    for label, fn in ch09.cupy_convolve(x, w, F).items():
        out = fn()
        if ch09.sample_check(out, x, w, rtol=1e-3, samples=20_000):
            lib[label] = ctx.benchmark(fn, name=label).tflops(flops)
    cupy.get_default_memory_pool().free_all_blocks()

    sgemm = ctx.ceilings.sgemm_tflops
    out = [
        ctx.row("register-blocked convolution (graded conv_blocked reference), F=2^23, G=512", tf["blocked"],
                "TFLOP/s", anchor="cuBLAS SGEMM 4096^3 (FP32), same run", anchor_value=sgemm, target=0.60,
                note=f"median {t['blocked'].median_ms:.3f} ms"),
        ctx.row("register-blocked reference vs one output per thread (ch09 variant 3)", tf["blocked"], "TFLOP/s",
                anchor="one output per thread, global taps", anchor_value=tf["naive"], target=5.0,
                note=f"one output per thread: {tf['naive']:.2f} TFLOP/s"),
        ctx.row("taps in __constant__ memory (ch09 variant 4) vs taps in global memory", tf["cmem"], "TFLOP/s",
                anchor="one output per thread, global taps", anchor_value=tf["naive"],
                note="one output per thread both; only where w lives differs"),
        ctx.row("graded conv_const reference (taps in __constant__ float w[1024])", tf["const_graded"], "TFLOP/s",
                anchor="taps in __constant__ memory", anchor_value=tf["cmem"]),
        ctx.row("16 outputs per thread, sliding register window (ch09 variant 5)", tf["reg"], "TFLOP/s",
                anchor="cuBLAS SGEMM 4096^3 (FP32), same run", anchor_value=sgemm,
                note="x read from global memory, lanes 16 floats apart"),
    ]
    for label, v in lib.items():
        out.append(ctx.row(f"CuPy {label}, equivalent TFLOP/s (2FG / time)", v, "TFLOP/s",
                           anchor="register-blocked reference", anchor_value=tf["blocked"]))
    return out + _waves_rows(ctx)
