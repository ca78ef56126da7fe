"""Chapter 09 helpers: the notebook's kernels compile everywhere and agree with the module's constants,
the grader's float64 reference agrees with NumPy and with the lesson's sampled check."""
from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

from repo_helpers import REPO, chapter_markdown, import_course, recorded_rows

ARCHS = ("sm_75", "sm_80", "sm_90")
STEM = "09_convolution"
SOLUTIONS = REPO / "solutions" / STEM
EXERCISE_NB = REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb"
LESSON_KERNELS = ("conv_naive", "conv_cmem", "conv_reg")


@pytest.fixture(scope="module")
def ch09():
    import_course()
    from course.lessons import ch09
    return ch09


@functools.lru_cache(maxsize=None)
def _spec():
    spec = importlib.util.spec_from_file_location("spec09", REPO / "autograder" / "specs" / f"{STEM}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def correlate64(x, w, n):
    """The grader's float64 reference (autograder/specs/09_convolution.py): the one the tests trust."""
    return _spec().correlate64(x, w, n)


def slow_blocked_source() -> str:
    """The exercise notebook's slow starting kernel for conv_blocked (its home), renamed to be graded as it."""
    course = import_course()
    return course.notebook_cells(EXERCISE_NB)["conv_blocked_slow"].source.replace("conv_blocked_slow", "conv_blocked")


def test_lesson_and_solution_kernels_compile_without_spills(ch09):
    """Do the lesson cells, the exercise's slow kernel and both references compile for sm_75..sm_90 with no
    local memory?"""
    course = import_course()
    srcs = ([course.lesson_cell(STEM, k).source for k in LESSON_KERNELS] + [slow_blocked_source()]
            + [p.read_text() for p in sorted(SOLUTIONS.glob("*.cu"))])
    for src in srcs:
        for arch in ARCHS:
            prog = course.compile_for_arch(src, arch)
            assert prog.cubin
            for name, res in prog.resources.items():
                assert res.local_bytes == 0 and res.spill_stores == 0, (name, arch, res)


def test_blocked_reference_fits_the_plan(ch09):
    """Does conv_blocked on sm_90 stay at <= 128 registers and under 48 KiB of static shared memory?"""
    course = import_course()
    res = course.compile_for_arch((SOLUTIONS / "conv_blocked.cu").read_text(), "sm_90").resources["conv_blocked"]
    assert res.registers <= 128 and res.static_smem <= 48 * 1024


def test_module_constants_are_the_cells(ch09):
    """Do the module's launch constants (R, BLOCK, MAX_TAPS, TAPS) say what the notebook's cells define?"""
    course = import_course()
    reg = course.lesson_cell(STEM, "conv_reg").source
    assert f"#define R {ch09.REG_OUTPUTS}\n" in reg and f"#define BLOCK {ch09.REG_BLOCK}\n" in reg
    assert f"#define TAPS {ch09.TAPS} " in reg
    assert f"#define MAX_TAPS {ch09.MAX_TAPS}\n" in course.lesson_cell(STEM, "conv_cmem").source
    assert course.lesson_cell(STEM, "conv_naive").kernels == ("conv_naive",)


def test_counts(ch09):
    """Is the work 2 F G FLOPs and the intensity about G / 4 FLOP per byte?"""
    assert ch09.flops(1 << 23, 512) == 2 * (1 << 23) * 512
    assert ch09.min_bytes(10, 3) == 4 * (12 + 3 + 10)
    assert 120 < ch09.intensity() < 130


@pytest.mark.parametrize("n,g", [(1, 1), (37, 5), (1009, 512), (300_007, 64)])
def test_correlate64_is_numpy(n, g):
    """Does the grader's float64 reference equal np.correlate 'valid' (and np.convolve with the taps reversed)?"""
    rng = np.random.default_rng(n)
    x, w = rng.uniform(-1, 1, n + g - 1), rng.uniform(-1, 1, g)
    want = np.correlate(x, w, "valid")
    assert np.allclose(correlate64(x, w, n), want, rtol=1e-12, atol=1e-10)
    assert np.allclose(np.convolve(x, w[::-1], "valid"), want, rtol=1e-12, atol=1e-10)


def test_correlate64_fft_path():
    """Does the FFT branch (taken for n g > 2e7) agree with the direct sum?"""
    rng = np.random.default_rng(5)
    n, g = 60_001, 512
    x, w = rng.uniform(-1, 1, n + g - 1), rng.uniform(-1, 1, g)
    assert n * g > 20_000_000
    assert np.abs(correlate64(x, w, n) - np.correlate(x, w, "valid")).max() < 1e-9


def emulate_blocked(x, w, n: int, *, block: int = 128, r: int = 16, pad: int = 4) -> np.ndarray:
    """NumPy replay of solutions/09_convolution/conv_blocked.cu's indexing, block by block.

    Stages each block's window in the padded segment layout (segments of ``r`` floats, ``pad`` floats
    apart), then has every thread slide its ``2 r`` register window exactly as the kernel does. It is
    for checking the index arithmetic on a CPU, not for speed.
    """
    x = np.asarray(x, np.float32)
    w = np.asarray(w, np.float32)
    taps = w.size
    assert taps % r == 0
    seg_len, nseg = r + pad, block + taps // r
    y = np.full(n, np.nan, np.float32)
    t = np.arange(block)
    for b in range(-(-n // (block * r))):
        out0 = b * block * r
        win = np.zeros(nseg * r, np.float32)
        avail = x[out0:out0 + nseg * r]
        win[:avail.size] = avail                                  # past the end of x: zeros
        xs = np.zeros(nseg * seg_len, np.float32)
        for s in range(nseg):
            xs[s * seg_len:s * seg_len + r] = win[s * r:(s + 1) * r]
        acc = np.zeros((block, r), np.float32)
        a = np.stack([xs[t * seg_len + m] for m in range(r)], axis=1)
        for j0 in range(0, taps, r):
            nxt = np.stack([xs[(t + j0 // r + 1) * seg_len + m] for m in range(r)], axis=1)
            a2 = np.concatenate([a, nxt], axis=1)
            for k in range(r):
                acc = (acc + a2[:, k:k + r] * w[j0 + k]).astype(np.float32)
            a = nxt
        o = (out0 + t[:, None] * r + np.arange(r)[None, :]).ravel()
        keep = o < n
        y[o[keep]] = acc.ravel()[keep]
    return y


@pytest.mark.parametrize("n", [1, 7, 2047, 2049, 5003])
def test_blocked_indexing_emulated(n):
    """Does a NumPy replay of conv_blocked's padded window and sliding registers give the correlation?"""
    rng = np.random.default_rng(n)
    x = rng.uniform(-1, 1, n + 511).astype(np.float32)
    w = rng.uniform(-1, 1, 512).astype(np.float32)
    want = correlate64(x, w, n)
    got = emulate_blocked(x, w, n)
    assert np.all(np.isfinite(got))
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_padded_window_reads_are_conflict_free():
    """Do 8 consecutive threads' float4 reads (one phase of LDS.128) hit 8 distinct 16-byte bank groups?"""
    r, seg = 16, 20                       # conv_blocked's R and padded segment length
    for start in range(0, 64):
        for m in range(0, r, 4):
            groups = {((t + start) * seg + m) // 4 % 8 for t in range(8)}
            assert len(groups) == 8


@pytest.mark.parametrize("n,g", [(1000, 7), (5003, 512)])
def test_sample_check_agrees_with_the_spec_reference(ch09, n, g):
    """Does the lesson's sampled check pass the grader's reference (rounded to float32) and fail it with one
    sampled output off?"""
    import_course()
    rng = np.random.default_rng(n)
    x, w = rng.uniform(-1, 1, n + g - 1).astype(np.float32), rng.uniform(-1, 1, g).astype(np.float32)
    y = correlate64(x, w, n).astype(np.float32)
    assert ch09.sample_check(y, x, w, samples=64)
    y[n - 1] += 0.1 * float(np.abs(y).max())       # the last output is always sampled
    assert not ch09.sample_check(y, x, w, samples=64)


def test_sweep_builds_without_gpu(ch09):
    """Does the block-count sweep build on a CPU, with steps around multiples of an SM count?"""
    course = import_course()
    sw = ch09.blocks_sweep(record=False)
    blocks = sw.params["blocks"]
    assert blocks == sorted(blocks) and len(blocks) > 10
    if not course.gpu_available():
        assert 132 in blocks and 133 in blocks


def test_benchmark_rows_import_and_match_the_spec():
    """Does benchmarks/rows/09_convolution.py import without CUDA and launch like the grader?"""
    import importlib
    course = import_course()
    from autograder import get_exercise
    mod = importlib.import_module("benchmarks.rows.09_convolution")
    assert callable(mod.rows)
    ex = get_exercise(STEM, "conv_blocked")
    for n in (1, 2047, 2049, 1 << 23):
        grid, block, smem = ex.launch({"n": n}, dict(ex.launch_defaults))
        assert (grid, block) == mod._blocked_launch(n) and smem == 0
    ex = get_exercise(STEM, "conv_const")
    for n in (1, 1009, 1 << 23):
        grid, block, _ = ex.launch({"n": n, "g": 7}, dict(ex.launch_defaults))
        assert (grid, block) == mod._const_launch(n)
    ex = get_exercise(STEM, "damped_waves")        # section 9's exercise: the rows launch through the spec itself
    assert {p.name: p.shape for p in ex.params if p.name in ("d", "w", "c")} == dict.fromkeys("dwc", str(mod.WAVES_TERMS))
    assert course.notebook_cells(EXERCISE_NB)["damped_waves_starter"].kernels == ("damped_waves_starter",)


def test_slow_kernel_is_an_exercise_cell():
    """Does the exercise notebook hold the slow starting kernel (the GPU test grades it as conv_blocked)?"""
    course = import_course()
    assert course.notebook_cells(EXERCISE_NB)["conv_blocked_slow"].kernels == ("conv_blocked_slow",)
    assert "void conv_blocked(" in slow_blocked_source()


# --- GPU ---------------------------------------------------------------------------------------

ODD = ((1, 1), (1009, 7), (2049, 512), (100_003, 512))


@pytest.mark.gpu
def test_lesson_variants_correct_at_odd_sizes(ch09):
    """Is every lesson variant right at sizes that leave partial blocks (one thread: small n only)?"""
    lesson = ch09.Lesson()
    for n, g in ODD:
        x, w, y = ch09.make_inputs(n, g, seed=n)
        want = correlate64(x.get(), w.get(), n)
        runs = {"one_block": lesson.one_block, "whole_gpu": lesson.whole_gpu, "constant": lesson.constant}
        if n <= 2049:
            runs["one_thread"] = lesson.one_thread
        if g == ch09.TAPS:
            runs["registers"] = lesson.registers
        for name, run in runs.items():
            y.fill(np.nan)
            run(x, w, y)
            got = y.get()
            assert np.all(np.isfinite(got)), (name, n, g)
            assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max() + 1e-6, (name, n, g)


@pytest.mark.gpu
def test_solutions_correct_at_odd_sizes(ch09):
    """Are both graded references right at odd sizes with the grader's launch geometry?"""
    course = import_course()
    blocked = course.compile(course.solution_source(STEM, "conv_blocked")).kernel("conv_blocked")
    const = course.compile(course.solution_source(STEM, "conv_const")).kernel("conv_const")
    taps = const.module.get_global("w")   # the graded conv_const reads its taps from __constant__ float w[1024]
    for n in (1, 1009, 2047, 2048, 100_003):
        for g, k in ((512, blocked), (7, const), (1024, const)):
            x, w, y = ch09.make_inputs(n, g, seed=n + g)
            if k is blocked:
                k(course.grid_for(n, 2048), 128, x, w, y, n)
            else:
                taps.copy_from_device(w.data, w.nbytes)
                k(course.grid_for(n, 256), 256, x, y, n, g)
            assert ch09.sample_check(y, x, w, samples=20_000), (k.name, n, g)


@pytest.mark.gpu
def test_sample_check_catches_an_error(ch09):
    """Does the sampled check fail when one sampled output is off?"""
    x, w, y = ch09.make_inputs(5000, 64, seed=3)
    Lesson = ch09.Lesson()
    Lesson.whole_gpu(x, w, y)
    assert ch09.sample_check(y, x, w)
    y[0] += 1.0
    assert not ch09.sample_check(y, x, w)


@pytest.mark.gpu
def test_cupy_convolve_agrees(ch09):
    """Do CuPy's correlate functions give the lesson's answer?"""
    x, w, _ = ch09.make_inputs(10_007, 512, seed=4)
    want = correlate64(x.get(), w.get(), 10_007)
    for name, fn in ch09.cupy_convolve(x, w, 10_007).items():
        got = fn().get()
        assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max(), name


@pytest.mark.gpu
def test_slow_kernel_gets_correctness_points_only():
    """Graded as conv_blocked, does the exercise's slow kernel pass every size and miss the speed points?"""
    import_course()
    from autograder import get_exercise, grade_source
    ex = get_exercise(STEM, "conv_blocked")
    report = grade_source(STEM, "conv_blocked", slow_blocked_source())
    print(report.feedback())
    assert report.points == ex.points.correctness, report.feedback()


@pytest.mark.gpu
def test_blocks_sweep_shows_the_tail(ch09):
    """With one block per SM, does one block past the SM count cost a second wave (>= 1.5x the time)?

    Under tools/gpu_tier.sh (COURSE_RECORD_SWEEPS=1) building the sweep also measures every point and
    saves benchmarks/results/sweeps/09_convolution_blocks.json for CPU-only replay.
    """
    course = import_course()
    sms = course.device_info().sm_count
    sw = ch09.blocks_sweep()
    one, past, two = sw.measure(blocks=sms), sw.measure(blocks=sms + 1), sw.measure(blocks=2 * sms)
    assert None not in (one, past, two), sw.note(blocks=sms)
    assert past >= 1.5 * one, (one, past)
    assert two <= 1.2 * past, (past, two)


# --- the text against the recording (issue 22, item 5) ---------------------------------------------

def test_constant_memory_figures_are_the_recorded_ones():
    """Do the text's constant-vs-global figures (section 5 and the summary) match the H100 recording, and
    does the advice follow them (no blanket 'same-address reads belong in constant memory')?"""
    row = next(r for name, r in recorded_rows(STEM)[0].items() if "variant 4" in name)
    const, glob = f"{row['value']:.4g}", f"{row['anchor_value']:.4g}"
    assert row["value"] < row["anchor_value"], "the recording no longer shows global beating constant: rewrite"
    cells = chapter_markdown(STEM)
    measured = next(c for c in cells if "What the measurement says" in c)
    summary = next(c for c in cells if "## Summary" in c)
    for text in (measured, summary):
        assert f"{const} TFLOP/s" in text and glob in text, (const, glob, text[:300])
    joined = "\n".join(cells)
    assert "Same-address reads by a warp belong in constant memory" not in joined
    assert "in `__constant__` memory and fill it from Python" not in joined


def test_text_says_where_each_variant_keeps_its_taps():
    """Variant 5 (conv_reg) reads __constant__ taps with a run-time index; only conv_blocked stages them in
    shared memory: do the kernels do that, and does section 5's text say so?"""
    reg = import_course().lesson_cell(STEM, "conv_reg").source
    assert "__constant__ float c_taps" in reg and "c_taps[j0 + k]" in reg and "__shared__" not in reg
    assert "__shared__ __align__(16) float ws[TAPS]" in (SOLUTIONS / "conv_blocked.cu").read_text()
    measured = next(c for c in chapter_markdown(STEM) if "What the measurement says" in c)
    assert "it stages the taps in shared memory" not in measured
    assert "run-time" in measured and "c_taps[j0 + k]" in measured
    assert "Only the graded `conv_blocked` stages the taps" in measured


def test_launch_bounds_text_describes_the_register_cap():
    """Does section 6 say __launch_bounds__ caps registers per thread (255 without it), not that the compiler
    otherwise assumes 1,024 threads?"""
    text = next(c for c in chapter_markdown(STEM) if "__launch_bounds__(BLOCK)" in c)
    assert "worst case of 1,024" not in text
    for phrase in ("caps the registers per thread", "up to 255 registers per thread", "fails"):
        assert phrase in text, phrase


def test_flags_text_matches_the_recorded_run():
    """Does section 9's reading of the flags hold in the recorded run: --fmad=false slower and no more accurate,
    --ftz=true unchanged, --prec-div=false faster, --use_fast_math the fastest and the least accurate, and the
    same maximum for every IEEE build (the conditioning near x = pi)?"""
    from course.profile import load_recording
    rec = load_recording("09-fp-flags")
    if rec is None:
        pytest.skip("no recording of section 9 yet")
    r = {row["flags"]: row for row in rec["rows"]}
    base, fast = r["default (IEEE)"], r["--use_fast_math"]
    assert r["--fmad=false"]["speed-up"] < 1 and r["--fmad=false"]["median error"] >= base["median error"]
    assert abs(r["--ftz=true"]["speed-up"] - 1) < 0.02 and r["--ftz=true"]["median error"] == base["median error"]
    assert r["--prec-div=false"]["speed-up"] > 1.05
    assert fast["speed-up"] == max(x["speed-up"] for x in r.values())
    assert fast["99th pct"] == max(x["99th pct"] for x in r.values()) and fast["max error"] > base["max error"]
    ieee = [x["max error"] for f, x in r.items() if f != "--use_fast_math"]
    assert max(ieee) == pytest.approx(min(ieee), rel=1e-6)
