"""Chapter 01 helpers: launch arithmetic, index maps, FMA expectations, PTX counting, the sticky child."""
from __future__ import annotations

import numpy as np
import pytest

from repo_helpers import import_course


@pytest.fixture(scope="module")
def ch01():
    import_course()
    from course.lessons import ch01
    return ch01


def test_launch_summary_prime(ch01):
    """Does n = 1,000,003 with 256 threads give 3907 blocks, 189 idle threads and 3 lanes in the last warp?"""
    s = ch01.launch_summary(1_000_003, 256)
    assert (s["grid"], s["idle"], s["last_block_active"], s["last_warp_active"]) == (3907, 189, 67, 3)
    assert s["warps"] == 3907 * 8 and s["partial_warps_per_block"] == 0


def test_launch_summary_edges(ch01):
    """Is n = 1 one block with one active lane, and a 100-thread block flagged as having a partial warp?"""
    s = ch01.launch_summary(1, 256)
    assert (s["grid"], s["idle"], s["last_warp_active"]) == (1, 255, 1)
    assert ch01.launch_summary(1000, 100)["partial_warps_per_block"] == 1
    assert ch01.launch_summary(64, 32)["last_warp_active"] == 32
    with pytest.raises(ValueError, match="`block`"):
        ch01.launch_summary(10, 0)


def test_thread_map_grid_stride(ch01):
    """With fewer threads than items, does item i go to thread i mod (grid*block), on pass i // (grid*block)?"""
    m = ch01.thread_map_1d(100, 8, grid=3)
    assert m["iteration"].max() == 4
    i = 57
    assert m["block"][i] == (i % 24) // 8 and m["thread"][i] == i % 8 and m["iteration"][i] == 2
    full = ch01.thread_map_1d(100, 32)
    assert full["iteration"].max() == 0 and full["block"].max() == 3


def test_wave_boundaries(ch01):
    """Are new waves marked at multiples of SMs x blocks per SM?"""
    assert ch01.wave_boundaries(132, 2, 800) == [264, 528, 792]
    assert ch01.wave_boundaries(4, 0, 9) == [4, 8]


def test_fma_expected_differs_from_separate(ch01):
    """Is the separate multiply-add exactly 0 and the fused one the (nonzero) rounding error of a*b?"""
    a, b, c = ch01.fma_inputs(1000, seed=1)
    e = ch01.fma_expected(a, b, c)
    assert np.all(e["separate"] == 0)
    exact = a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)
    assert np.array_equal(e["fused"].astype(np.float64), exact), "the fused result should be exact here"
    assert np.count_nonzero(e["fused"]) > 900


def test_ptx_float_ops_counts(ch01):
    """Are fma.rn.f32, mul.rn.f32, add.f32 and sub.ftz.f32 each counted, and f64 ignored?"""
    ptx = "\tfma.rn.f32 %f1, %f2, %f3, %f4;\n\tmul.rn.f32 %f5, %f1, %f2;\n\tadd.f32 %f6, %f5, %f1;\n" \
          "\tsub.ftz.f32 %f7, %f6, %f1;\n\tfma.rn.f64 %fd1, %fd2, %fd3, %fd4;\n"
    assert ch01.ptx_float_ops(ptx) == {"fma": 1, "mul": 1, "add": 1, "sub": 1}


def test_fmad_false_splits_fma_in_ptx(ch01):
    """Does NVRTC contract a*b+c into fma by default, and emit mul + add with -fmad=false (no GPU needed)?"""
    course = import_course()
    src = 'extern "C" __global__ void k(const float* a, const float* b, const float* c, float* d)\n' \
          '{ int i = threadIdx.x; d[i] = a[i] * b[i] + c[i]; }\n'
    fused = ch01.ptx_float_ops(course.compile_for_arch(src, "sm_80").ptx)
    split = ch01.ptx_float_ops(course.compile_for_arch(src, "sm_80", options=("-fmad=false",)).ptx)
    assert fused["fma"] == 1 and fused["mul"] == 0
    assert split["fma"] == 0 and split["mul"] == 1 and split["add"] == 1


def test_lesson_kernels_compile(ch01):
    """Do the vector-add and wave kernels the lesson and the benchmark share compile for sm_75..sm_90?"""
    course = import_course()
    for src in (ch01.VEC_ADD_SRC, ch01.WAVE_ADD_SRC, ch01._OOB_SRC):
        for arch in ("sm_75", "sm_80", "sm_90"):
            assert course.compile_for_arch(src, arch).cubin


def test_plots_draw_without_gpu(ch01):
    """Do the index-map and staircase plots draw on a CPU-only machine?"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ax = ch01.plot_index_map_2d(40, 20, (16, 16))
    assert "736 of 1536 threads fall outside" in ax.get_title()
    ch01.plot_thread_map_1d(70, 16, grid=2)
    ch01.plot_staircase([1, 2, 3], [5.0, 5.0, 10.0], sm_count=2)
    ch01.plot_ramp_up({"ms": [1.0, 0.5], "mhz": [None, 1980], "max_mhz": 1980})
    plt.close("all")


def test_print_steps_format(ch01, capsys):
    """Does each step print as one line starting with ok or FAIL?"""
    ch01.print_steps([{"step": "launch", "ok": True, "detail": "returned"},
                      {"step": "sync", "ok": False, "detail": "cudaErrorIllegalAddress"}])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ok") and lines[1].startswith("FAIL")


@pytest.mark.gpu
def test_sticky_error_child_reports_each_stage(ch01):
    """Does the child see a clean launch, the fault at synchronize, and the same fault on every later call,
    while this process's context still works?"""
    steps = ch01.sticky_error_demo()
    by = {s["step"]: s for s in steps}
    assert by["launch a kernel that writes 4 TiB past its array"]["ok"]
    assert not by["synchronize"]["ok"] and "llegal" in by["synchronize"]["detail"]
    assert not by["allocate a new array and run a correct kernel"]["ok"]
    assert not by["synchronize again"]["ok"]
    import cupy
    assert float(cupy.arange(4).sum()) == 6.0


@pytest.mark.gpu
def test_timing_helpers_measure(ch01):
    """Do the event and host-clock timings of a 1 GiB-ish vector add come out positive and ordered?"""
    import cupy
    course = import_course()
    k = course.compile(ch01.VEC_ADD_SRC).kernel("vec_add")
    n = (1 << 24) + 1
    x = cupy.ones(n, dtype=cupy.float32)
    z = cupy.empty_like(x)
    t = ch01.host_vs_events(lambda: k(course.grid_for(n, 256), 256, x, x, z, n), repeats=5)
    assert 0 < t["host_no_sync"] < t["host_sync"]
    assert t["events"] > 0
    r = ch01.ramp_up(lambda: k(course.grid_for(n, 256), 256, x, x, z, n), idle_s=0.1, launches=5)
    assert len(r["ms"]) == 5 and all(m > 0 for m in r["ms"])
