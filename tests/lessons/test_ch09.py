"""Chapter 09 helpers: kernels compile everywhere, cells match the module, references agree with NumPy."""
from __future__ import annotations

import json

import numpy as np
import pytest

from repo_helpers import REPO, cuda_cells, import_course

ARCHS = ("sm_75", "sm_80", "sm_90")
STEM = "09_convolution"
SOLUTIONS = REPO / "solutions" / STEM


@pytest.fixture(scope="module")
def ch09():
    import_course()
    from course.lessons import ch09
    return ch09


def test_lesson_and_solution_kernels_compile_without_spills(ch09):
    """Do the lesson kernels and both references compile for sm_75..sm_90 with no local memory?"""
    course = import_course()
    srcs = [ch09.NAIVE_SRC, ch09.CONST_SRC, ch09.REG_SRC, ch09.SLOW_BLOCKED_SRC] + [p.read_text() for p in sorted(SOLUTIONS.glob("*.cu"))]
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


def test_lesson_cells_are_the_module_sources(ch09):
    """Are the kernels the helpers run the same text as the notebook's %%cuda cells?"""
    cells = [c.rstrip("\n") for c in cuda_cells(STEM)]
    for src in (ch09.NAIVE_SRC, ch09.CONST_SRC, ch09.REG_SRC):
        assert src.rstrip("\n") in cells


def test_counts(ch09):
    """Is the work 2 F G FLOPs and the intensity about G / 4 FLOP per byte?"""
    assert ch09.flops(1 << 23, 512) == 2 * (1 << 23) * 512
    assert ch09.min_bytes(10, 3) == 4 * (12 + 3 + 10)
    assert 120 < ch09.intensity() < 130


@pytest.mark.parametrize("n,g", [(1, 1), (37, 5), (1009, 512), (300_007, 64)])
def test_correlate64_is_numpy(ch09, n, g):
    """Does the float64 reference equal np.correlate 'valid' (and np.convolve with the taps reversed)?"""
    rng = np.random.default_rng(n)
    x, w = rng.uniform(-1, 1, n + g - 1), rng.uniform(-1, 1, g)
    want = np.correlate(x, w, "valid")
    assert np.allclose(ch09.correlate64(x, w, n), want, rtol=1e-12, atol=1e-10)
    assert np.allclose(np.convolve(x, w[::-1], "valid"), want, rtol=1e-12, atol=1e-10)


def test_correlate64_fft_path(ch09):
    """Does the FFT branch (taken for n g > 2e7) agree with the direct sum?"""
    rng = np.random.default_rng(5)
    n, g = 60_001, 512
    x, w = rng.uniform(-1, 1, n + g - 1), rng.uniform(-1, 1, g)
    assert n * g > 20_000_000
    assert np.abs(ch09.correlate64(x, w, n) - np.correlate(x, w, "valid")).max() < 1e-9


@pytest.mark.parametrize("n", [1, 7, 2047, 2049, 5003])
def test_blocked_indexing_emulated(ch09, n):
    """Does a NumPy replay of conv_blocked's padded window and sliding registers give the correlation?"""
    rng = np.random.default_rng(n)
    x = rng.uniform(-1, 1, n + 511).astype(np.float32)
    w = rng.uniform(-1, 1, 512).astype(np.float32)
    want = ch09.correlate64(x, w, n)
    got = ch09.emulate_blocked(x, w, n)
    assert np.all(np.isfinite(got))
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()


def test_padded_window_reads_are_conflict_free():
    """Do 8 consecutive threads' float4 reads (one phase of LDS.128) hit 8 distinct 16-byte bank groups?"""
    r, seg = 16, 20                       # conv_blocked's R and padded segment length
    for start in range(0, 64):
        for m in range(0, r, 4):
            groups = {((t + start) * seg + m) // 4 % 8 for t in range(8)}
            assert len(groups) == 8


def test_spec_reference_is_the_lesson_reference(ch09):
    """Does the grader's NumPy reference equal the lesson's?"""
    import importlib.util
    spec = importlib.util.spec_from_file_location("spec09", REPO / "autograder" / "specs" / f"{STEM}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rng = np.random.default_rng(1)
    x, w = rng.uniform(-1, 1, 1000 + 6).astype(np.float32), rng.uniform(-1, 1, 7).astype(np.float32)
    assert np.allclose(mod.correlate64(x, w, 1000), ch09.correlate64(x, w, 1000))


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
    import_course()
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


def test_slow_kernel_is_an_exercise_cell(ch09):
    """Is the exercise notebook's slow starting kernel the module's SLOW_BLOCKED_SRC?"""
    nb = json.loads((REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb").read_text())
    srcs = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert "%%cuda --name conv_blocked_slow\n" + ch09.SLOW_BLOCKED_SRC in srcs


# --- GPU ---------------------------------------------------------------------------------------

ODD = ((1, 1), (1009, 7), (2049, 512), (100_003, 512))


@pytest.mark.gpu
def test_lesson_variants_correct_at_odd_sizes(ch09):
    """Is every lesson variant right at sizes that leave partial blocks (one thread: small n only)?"""
    lesson = ch09.Lesson()
    for n, g in ODD:
        x, w, y = ch09.make_inputs(n, g, seed=n)
        want = ch09.correlate64(x.get(), w.get(), n)
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
    blocked = course.compile((SOLUTIONS / "conv_blocked.cu").read_text()).kernel("conv_blocked")
    const = course.compile((SOLUTIONS / "conv_const.cu").read_text()).kernel("conv_const")
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
    want = ch09.correlate64(x.get(), w.get(), 10_007)
    for name, fn in ch09.cupy_convolve(x, w, 10_007).items():
        got = fn().get()
        assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max(), name


@pytest.mark.gpu
def test_slow_kernel_gets_correctness_points_only(ch09):
    """Graded as conv_blocked, does one output per loop trip pass every size and miss the speed points?"""
    import_course()
    from autograder import get_exercise
    from autograder.runner import grade_source
    ex = get_exercise(STEM, "conv_blocked")
    report = grade_source(STEM, "conv_blocked", ch09.SLOW_BLOCKED_SRC.replace("conv_blocked_slow", "conv_blocked"))
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
