"""Chapter 01: the notebook's launch arithmetic, index maps, the wave sweep's replay, FMA expectations, PTX
counting, the lesson's kernel cells, the sticky child."""
from __future__ import annotations

import contextlib
import io
import json
import re

import numpy as np
import pytest

from repo_helpers import REPO, chapter_markdown, check_quotes, fail_on, import_course, read_json_notebook, recorded_rows

STEM = "01_first_kernel"


@pytest.fixture(scope="module")
def ch01():
    import_course()
    from course.lessons import ch01
    return ch01


def test_launch_arithmetic_cell_matches_its_prose():
    """Does the notebook's launch-arithmetic cell print what the text after it says (3,907 blocks, 189 idle
    threads, 67 threads in the last block, 3 lanes in its last warp)?"""
    course = import_course()
    cells = ["".join(c["source"]) for c in read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")["cells"]]
    (cell,) = [c for c in cells if "last_warp = " in c]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(cell, {"course": course})
    text = out.getvalue()
    assert "grid = 3,907 blocks, 1,000,192 threads, 189 idle" in text, text
    assert "last block: 67 working threads" in text and "3 of 32 lanes active" in text, text
    assert any("189" in c and "67 threads work" in c and "3 active lanes" in c for c in cells)


def test_thread_map_grid_stride(ch01):
    """With fewer threads than items, does item i go to thread i mod (grid*block), on pass i // (grid*block)?"""
    m = ch01.thread_map_1d(100, 8, grid=3)
    assert m["iteration"].max() == 4
    i = 57
    assert m["block"][i] == (i % 24) // 8 and m["thread"][i] == i % 8 and m["iteration"][i] == 2
    full = ch01.thread_map_1d(100, 32)
    assert full["iteration"].max() == 0 and full["block"].max() == 3


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
    """Do the notebook's cells that the helpers and the benchmark run (vec_add, wave_add, and write_far with
    fill for the sticky error) compile for sm_75..sm_90?"""
    course = import_course()
    for name in ("vec_add", "wave_add", "write_far"):
        cell = course.lesson_cell(STEM, name)
        for arch in ("sm_75", "sm_80", "sm_90"):
            assert cell.compile_for_arch(arch).cubin
    assert course.lesson_cell(STEM, "write_far").kernels == ("write_far", "fill")


def test_plots_draw_without_gpu(ch01):
    """Do the index-map and ramp-up plots draw on a CPU-only machine?"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ax = ch01.plot_index_map_2d(40, 20, (16, 16))
    assert "736 of 1536 threads fall outside" in ax.get_title()
    ch01.plot_thread_map_1d(70, 16, grid=2)
    ch01.plot_ramp_up({"ms": [1.0, 0.5], "mhz": [None, 1980], "max_mhz": 1980})
    plt.close("all")


def test_wave_sweep_replays_a_recording(ch01, tmp_path, monkeypatch):
    """Without a GPU, does the wave plot draw a recorded sweep (the runner built on the notebook's cell,
    compiling nothing), and say so in its title?"""
    course = import_course()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import course.widgets
    monkeypatch.setattr("course._env.gpu_available", lambda: False)
    params = {"waves": [0.5, 1.0, 1.5], "block": [256, 1024], "rounds": [0, 512]}
    points = [{"values": {"waves": w, "block": b, "rounds": r}, "value": 10.0 * (1 + int(w > 1)), "note": ""}
              for w in params["waves"] for b in params["block"] for r in params["rounds"]]
    rec = tmp_path / "waves.json"
    rec.write_text(json.dumps({"name": "w", "gpu": "Test GPU", "metric": "us", "params": params,
                               "points": points}))
    s = course.widgets.sweep(ch01.wave_runner(course.lesson_cell(STEM, "wave_add")), params, metric="us",
                             recorded=rec)
    ax = ch01.plot_wave_sweep(s, block=1024)
    assert ax is not None and "Test GPU" in ax.get_title()
    assert [len(line.get_xdata()) for line in ax.get_lines() if line.get_label().startswith(("memory", "512"))] \
        == [3, 3]
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
    course = import_course()
    m = course.lesson_cell(STEM, "write_far").compile()
    steps = ch01.sticky_error_demo(m.kernel("write_far"), m.kernel("fill"))
    by = {s["step"]: s for s in steps}
    assert by["a correct kernel, then synchronize"]["ok"], steps
    assert by["launch a kernel that writes 4 TiB past its array"]["ok"]
    assert not by["synchronize"]["ok"] and "llegal" in by["synchronize"]["detail"]
    assert not by["allocate a new array and run a correct kernel"]["ok"]
    assert not by["synchronize again"]["ok"]
    import cupy
    assert float(cupy.arange(4).sum()) == 6.0


@pytest.mark.gpu
def test_vec_add_cell_and_the_ramp_up_plot(ch01):
    """Does the notebook's vec_add, compiled from its cell, add 2^24 + 1 floats exactly, and does the ramp-up
    plot draw event timings of it?"""
    import cupy
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    course = import_course()
    k = course.lesson_cell(STEM, "vec_add").kernel()
    n = (1 << 24) + 1
    rng = cupy.random.default_rng(5)
    x, y = rng.standard_normal(n, dtype=cupy.float32), rng.standard_normal(n, dtype=cupy.float32)
    z = cupy.full(n, cupy.nan, dtype=cupy.float32)
    ms = []
    for _ in range(3):
        start = cupy.cuda.get_current_stream().record()
        k(course.grid_for(n, 256), 256, x, y, z, n)
        stop = cupy.cuda.get_current_stream().record()
        stop.synchronize()
        ms.append(cupy.cuda.get_elapsed_time(start, stop))
    assert bool((z == x + y).all()) and all(m > 0 for m in ms)
    clock = course.sm_clock_mhz()
    ch01.plot_ramp_up({"ms": ms, "mhz": [clock[0] if clock else None] * 3, "max_mhz": clock[1] if clock else None})
    plt.close("all")


def test_quoted_figures_match_the_recordings():
    """Issue #22: does the timing section quote the recorded launch call (chapter 01 row) and the raw CuPy and
    graph launches (chapter 03 row) as benchmarks/results holds them?"""
    rows, _ = recorded_rows("01_first_kernel")
    ch03, _ = recorded_rows("03_streams")
    tiny = ch03["2000 tiny kernels: per-kernel time, stream launches"]
    check_quotes("01_first_kernel", [
        ("host clock around this course's launch call at 12.56 us", [rows["launch call, host clock, no sync"]["value"]]),
        ("launches 2,000 tiny kernels", [2000]),
        ("records 4.35 us per kernel", [tiny["value"]]),
        ("1.15 us replayed from a CUDA graph", [tiny["anchor_value"]]),
    ])


def test_sass_named_in_the_text_is_what_the_chapter_prints():
    """Is every SASS mnemonic with modifiers that the chapter's text names (`LDG.E.CONSTANT`, `IMAD.WIDE`)
    spelled as the disassembly of its SAXPY cell prints it, where it can be checked without a GPU?"""
    course = import_course()
    sass = course.lesson_cell(STEM, "saxpy").compile_for_arch("sm_90").sass()
    printed = set(course.sass_opcodes(sass, modifiers=True)["saxpy"])
    named = set(re.findall(r"`(?:@!?P\d )?([A-Z][A-Z0-9]+(?:\.[A-Z0-9]+)+)`", " ".join(chapter_markdown(STEM))))
    assert named, "the chapter names no SASS mnemonic with modifiers: update this test"
    # a name may stop short of the printed modifiers (`ISETP.GE` for ISETP.GE.AND), not differ from them
    wrong = {n for n in named if not any(p == n or p.startswith(n + ".") for p in printed)}
    assert not wrong, f"named in chapter 01's text but not printed by its SASS cell: {sorted(wrong)}; printed: {sorted(printed)}"


def _recorded_waves() -> dict:
    """(block, rounds) -> {waves: (median us, samples)} from the committed H100 recording."""
    rec = json.loads((REPO / "benchmarks" / "results" / "sweeps" / f"{STEM}_waves.json").read_text())
    rows = {}
    for p in rec["points"]:
        v = p["values"]
        rows.setdefault((v["block"], v["rounds"]), {})[v["waves"]] = (p["value"], p.get("samples", [p["value"]]))
    return rows


def test_wave_recording_is_medians_without_outliers():
    """Issue #16: is every recorded point the median of at least three runs, and does no point stand above both
    of its neighbours by more than a third (a disturbed measurement, not a wave step, which stays up)?"""
    problems = []
    for key, row in sorted(_recorded_waves().items()):
        xs = sorted(row)
        for i, x in enumerate(xs):
            value, samples = row[x]
            if len(samples) < 3 or value != sorted(samples)[len(samples) // 2]:
                problems.append(f"{key} x={x}: {value} is not the median of three or more runs {samples}")
            if 0 < i < len(xs) - 1 and value > 1.33 * max(row[xs[i - 1]][0], row[xs[i + 1]][0]):
                problems.append(f"{key} x={x}: {value:.1f} us above both neighbours")
    fail_on(problems, "benchmarks/results/sweeps/01_first_kernel_waves.json:")


def test_wave_text_quotes_the_recording():
    """Issue #16: do the plateaus the text names (rounds=512, 1,024-thread blocks) equal the recorded points
    midway along each wave, and the residency step (rounds=0) the points either side of x = 2?"""
    rows = _recorded_waves()
    heavy, light = rows[(1024, 512)], rows[(1024, 0)]
    check_quotes(STEM, [
        ("about 49, 92, 134 and 176 us", [heavy[x][0] for x in (0.5, 1.5, 2.5, 3.5)]),
        ("from about 26 to 33 us", [light[2.0][0], light[2.125][0]]),
    ])
