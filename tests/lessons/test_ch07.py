"""Chapter 07 helpers: the stages compile everywhere they should, the notebook shows the module's kernels,
the tile model and the sweep explain themselves on a CPU, and on a GPU every stage and reference is right."""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import itertools
import json

import numpy as np
import pytest

from repo_helpers import REPO, cuda_cells, import_course, read_json_notebook

ARCHS = ("sm_75", "sm_80", "sm_90")
STEM = "07_staged_gemm"
SOLUTIONS = REPO / "solutions" / STEM
LESSON_SRCS = ("NAIVE_SRC", "COALESCED_SRC", "REG1D_SRC", "REG2D_SRC", "WMMA_SRC")


@pytest.fixture(scope="module")
def ch07():
    import_course()
    from course.lessons import ch07
    return ch07


def _spec_module():
    spec = importlib.util.spec_from_file_location("spec07", REPO / "autograder" / "specs" / f"{STEM}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _no_gpu_and_results_in(monkeypatch, tmp_path):
    """This process sees no GPU, and benchmarks/results is tmp_path (recordings written by the test)."""
    monkeypatch.setattr("course._env._probe", lambda: (None, "no driver (test)"))
    monkeypatch.setattr("course._ceilings.results_dir", lambda: tmp_path)


# --- CPU: compiling ---------------------------------------------------------------------------

def test_lesson_and_solution_kernels_compile_without_spills(ch07):
    """Do the lesson kernels (WMMA from sm_80, at 1, 2 and 4 stages) and both references compile with no
    local memory?"""
    course = import_course()
    builds = [(getattr(ch07, n), ARCHS, ()) for n in LESSON_SRCS if n != "WMMA_SRC"]
    builds += [(ch07.WMMA_SRC, ("sm_80", "sm_90"), (f"-DSTAGES={s}",)) for s in (1, 2, 4)]
    builds += [(p.read_text(), ARCHS, ()) for p in sorted(SOLUTIONS.glob("*.cu"))]
    for src, archs, options in builds:
        for arch in archs:
            prog = course.compile_for_arch(src, arch, options=options)
            assert prog.cubin
            for name, res in prog.resources.items():
                assert res.local_bytes == 0 and res.spill_stores == 0, (name, arch, options, res)


def test_wmma_needs_sm80(ch07):
    """Does the WMMA kernel refuse sm_75 (BF16 MMA and cp.async), which is why its cell says --requires sm_80?"""
    course = import_course()
    with pytest.raises(course.CompileError):
        course.compile_for_arch(ch07.WMMA_SRC, "sm_75")


def test_regtile_reference_fits_the_plan():
    """Does sgemm_regtile on sm_90 stay at <= 128 registers (two blocks of 256 per SM) and under 48 KiB of
    static shared memory?"""
    course = import_course()
    res = course.compile_for_arch((SOLUTIONS / "sgemm_regtile.cu").read_text(), "sm_90").resources["sgemm_regtile"]
    assert res.registers <= 128 and res.static_smem <= 48 * 1024


# --- CPU: the notebooks -----------------------------------------------------------------------

def test_lesson_cells_are_the_module_sources(ch07):
    """Is every kernel the helpers run the text of a %%cuda cell, the WMMA one marked --requires sm_80?"""
    cells = [c.rstrip("\n") for c in cuda_cells(STEM)]
    for name in LESSON_SRCS:
        assert getattr(ch07, name).rstrip("\n") in cells, f"no %%cuda cell equal to ch07.{name}"
    nb = read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")
    srcs = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert "%%cuda --requires sm_80\n" + ch07.WMMA_SRC in srcs


def test_chapter_does_not_show_the_graded_kernels(ch07):
    """Does the chapter describe stages 3 and 6 without defining sgemm_tiled or sgemm_regtile anywhere?"""
    nb = read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    for name in ("sgemm_tiled", "sgemm_regtile"):
        assert f"void {name}" not in text and f"{name}(" not in text, name
    shown = "\n".join(getattr(ch07, n) for n in LESSON_SRCS)
    for path in sorted(SOLUTIONS.glob("*.cu")):   # nor any line of their solution regions the lesson kernels lack
        region = path.read_text().split("BEGIN SOLUTION")[1].split("END SOLUTION")[0]
        lines = [ln.strip() for ln in region.splitlines() if len(ln.strip()) > 30 and ln.strip() not in shown]
        assert lines and not [ln for ln in lines if ln in text], path.name


def test_exercise_shows_stage_5_as_a_comparison_kernel(ch07):
    """Is the exercise's non-graded comparison cell the chapter's REG2D_SRC, graded under sgemm_regtile's name?"""
    nb = read_json_notebook(REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb")
    srcs = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert "%%cuda --name gemm_reg2d\n" + ch07.REG2D_SRC in srcs
    assert any('.replace("gemm_reg2d", "sgemm_regtile")' in s and "source=" in s for s in srcs)
    cell = next(c for c in nb["cells"] if "".join(c["source"]).startswith("%%cuda --name gemm_reg2d"))
    assert "nbgrader" not in cell["metadata"] and not cell["metadata"].get("tags")


# --- CPU: the model ---------------------------------------------------------------------------

def test_stage_table_is_consistent(ch07):
    """Are stage numbers and keys unique, every shipped source defining its kernel, every launch covering C?"""
    stages = ch07.STAGES
    assert len({s.number for s in stages}) == len(stages) == len({s.key for s in stages})
    assert [s.precision for s in stages] == ["fp32"] * 6 + ["bf16"] * 3
    for st in stages:
        text = st.text()
        assert text is not None, f"{st.key}: solutions/{STEM} is part of this repository"
        assert f"{st.kernel}(" in text
        for m, n, k in ((1, 1, 1), (1000, 1037, 1009), (4096, 4096, 4096)):
            grid, block, smem = st.launch(m, n, k)
            bx, by = (block + (1,))[:2] if isinstance(block, tuple) else (block, 1)
            if st.key == "naive":       # x down the rows of C
                assert grid[0] * bx >= m and grid[1] * by >= n
            elif st.key in ("coalesced", "tiled"):
                assert grid[0] * bx >= n and grid[1] * by >= m
            else:                       # one block per BM x BN tile
                bm, bn = st.block_tile
                assert grid == (-(-n // bn), -(-m // bm)) and block == st.block
            if st.kernel == "gemm_wmma":
                stages_ = int(st.options[0].split("=")[1])
                assert smem == max(stages_ * (128 * 40 + 32 * 136) * 2, 8 * 1024)
            else:
                assert smem == 0


def test_stage_intensity(ch07):
    """Is the tile intensity 2 BM BN / ((BM + BN) s) FLOP/B, and 0.25 for the stages without a tile?"""
    want = {"naive": 0.25, "coalesced": 0.25, "tiled": 8.0, "reg1d": 16.0, "reg2d": 32.0, "vector": 32.0,
            "wmma": 64.0, "wmma_db": 64.0, "wmma_ms": 64.0}
    for st in ch07.STAGES:
        assert ch07.stage_intensity(st) == pytest.approx(want[st.key]), st.key
    reg2d = next(s for s in ch07.STAGES if s.key == "reg2d")
    wide = dataclasses.replace(reg2d, block_tile=(128, 64))
    assert ch07.stage_intensity(wide) == pytest.approx(2 * 128 * 64 / (192 * 4))
    assert import_course().gemm.gemm_flops(4096, 4096, 4096) == 2 * 4096 ** 3


@pytest.mark.parametrize("shape,threads,words", [
    ((128, 128, 8, 8, 8), 256, None),
    ((256, 256, 8, 4, 4), 4096, "1024"),
    ((32, 256, 8, 4, 4), 512, "split evenly"),
    ((16, 16, 8, 4, 4), 16, "less than one warp"),
    ((100, 128, 8, 8, 8), 0, "does not split into"),
    ((256, 256, 32, 16, 16), 256, "48 KiB"),
])
def test_tile_config_explains_invalid_shapes(ch07, shape, threads, words):
    """Does tile_config give threads and shared bytes, and say in words what is wrong with an invalid shape?"""
    cfg = ch07.tile_config(*shape)
    assert cfg["threads"] == threads and cfg["smem"] == (shape[0] + shape[1]) * shape[2] * 4
    if words is None:
        assert cfg["problem"] is None
    else:
        assert words in cfg["problem"]


def test_tile_config_agrees_with_the_kernel(ch07):
    """Do the sweep's shapes that tile_config rejects for the loader fail REG2D_SRC's static_assert, and corner
    shapes it accepts compile?"""
    course = import_course()
    grid = [dict(zip(ch07.SWEEP_PARAMS, v)) for v in itertools.product(*ch07.SWEEP_PARAMS.values())]
    problems = {tuple(d.values()): ch07.tile_config(**d)["problem"] for d in grid}
    valid = [d for d in grid if problems[tuple(d.values())] is None]
    split = [d for d in grid if "split evenly" in (problems[tuple(d.values())] or "")]
    assert len(valid) > len(grid) // 2 and split
    opts = lambda d: [f"-D{k}={v}" for k, v in d.items()]  # noqa: E731
    for d in split:
        with pytest.raises(course.CompileError, match="split evenly"):
            course.compile_for_arch(ch07.REG2D_SRC, "sm_90", options=opts(d))
    threads = lambda d: (d["BM"] // d["TM"]) * (d["BN"] // d["TN"])  # noqa: E731
    corners = [min(valid, key=threads), max(valid, key=threads), dict(BM=128, BN=128, BK=8, TM=8, TN=8)]
    for d in corners:
        assert course.compile_for_arch(ch07.REG2D_SRC, "sm_90", options=opts(d)).cubin, d


# --- CPU: recordings, sweep and table ---------------------------------------------------------

def _fake_rows(ch07, keys=("naive", "coalesced", "tiled", "reg2d", "vector", "wmma_ms")):
    """Stage rows as the benchmark module writes them (its own code path), with made-up numbers."""
    from benchmarks._suite import Context
    mod = importlib.import_module(f"benchmarks.rows.{STEM}")
    fake = []
    for i, st in enumerate(s for s in ch07.STAGES if s.key in keys):
        base = 50.0 if st.precision == "fp32" else 700.0
        fake.append({"stage": st.number, "key": st.key, "title": st.title, "precision": st.precision,
                     "tflops": base * (i + 1) / 10, "cublas_tflops": base, "fraction": (i + 1) / 10,
                     "ms": 1.0, "intensity": ch07.stage_intensity(st)})
    ctx = Context(type("C", (), {"copy_gbps": 3000.0})(), STEM)
    return mod, fake, ctx


def test_benchmark_rows_round_trip_through_a_recording(ch07, tmp_path, monkeypatch, capsys):
    """Does the benchmark module import without CUDA, and are its rows read back as the staged table?"""
    mod, fake, ctx = _fake_rows(ch07)
    monkeypatch.setattr(ch07, "measure_stages", lambda **kw: fake)
    rows = [r.to_dict() for r in mod.rows(ctx)]
    assert [r["name"].split(":")[0] for r in rows] == [f"stage {f['stage']}" for f in fake]
    (tmp_path / "test-gpu.json").write_text(json.dumps({"device": {"name": "Test GPU"}, "rows": rows}))
    _no_gpu_and_results_in(monkeypatch, tmp_path)
    got = ch07.show_stages()
    out = capsys.readouterr().out
    assert "recorded on Test GPU" in out
    assert [(r["key"], r["tflops"], r["fraction"]) for r in got] == \
        [(f["key"], f["tflops"], pytest.approx(f["fraction"])) for f in fake]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ax = ch07.plot_stages(got)
    assert len(ax.patches) == len(got)
    assert [p[1] for p in ch07.roofline_points(got)] == [f["intensity"] for f in fake]
    plt.close("all")
    # measured rows without the graded stages: the table names them, with the recording's numbers
    ch07.show_stages([f for f in fake if f["key"] not in ("tiled", "vector")])
    out = capsys.readouterr().out
    assert "measured on this GPU" in out
    assert "stage 3 (tiled) is a graded exercise" in out and "recorded on Test GPU" in out


def test_show_stages_without_recording(ch07, tmp_path, monkeypatch, capsys):
    """With no GPU and nothing recorded, does the table say how to record it instead of failing?"""
    _no_gpu_and_results_in(monkeypatch, tmp_path)
    assert ch07.show_stages() == []
    assert "No recorded staged table yet" in capsys.readouterr().out


def test_tile_sweep_builds_without_gpu_and_replays(ch07, tmp_path, monkeypatch, capsys):
    """Without a GPU, does the tile sweep build (saying there is nothing to replay), then replay a recording
    with its notes and the reasons for invalid shapes?"""
    _no_gpu_and_results_in(monkeypatch, tmp_path)
    sw = ch07.tile_sweep(record=False)
    assert not sw.live and sw.params == ch07.SWEEP_PARAMS and sw.x == "BM"
    sw._ipython_display_()
    assert "[no GPU]" in capsys.readouterr().out
    good = dict(BM=128, BN=128, BK=8, TM=8, TN=8)
    bad = dict(BM=256, BN=256, BK=8, TM=4, TN=4)
    points = [{"values": good, "value": 25.0, "note": "128 regs/thread, 8192 B shared, 2 block(s) = 16 warps per SM"},
              {"values": bad, "value": None, "note": "ValueError: " + ch07.tile_config(**bad)["problem"]}]
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "07_staged_gemm_tiles.json").write_text(json.dumps(
        {"name": "07_staged_gemm_tiles", "gpu": "Test GPU", "metric": "TFLOP/s", "params": ch07.SWEEP_PARAMS,
         "points": points}))
    sw = ch07.tile_sweep(record=False)
    assert sw.recorded_on == "Test GPU"
    assert sw.measure(**good) == 25.0 and "regs/thread" in sw.note(**good)
    assert sw.measure(**bad) is None and "1024" in sw.note(**bad)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ax, notes = sw.plot(BN=128, BK=8, TM=8, TN=8)
    assert "recorded on Test GPU" in ax.get_title()
    plt.close("all")


# --- CPU: the grader's spec -------------------------------------------------------------------

def test_spec_references_agree(ch07):
    """Do the spec's exercises, solution files, launches and reference match the lesson's stages 3 and 6?"""
    import_course()
    from autograder import get_exercise
    from course._signature import parse_kernels
    mod = _spec_module()
    rng = np.random.default_rng(0)
    v = {"a": rng.uniform(-1, 1, (33, 17)).astype(np.float32), "b": rng.uniform(-1, 1, (17, 65)).astype(np.float32)}
    assert np.allclose(mod.gemm_reference(v)["c"], v["a"].astype(np.float64) @ v["b"], rtol=1e-6, atol=1e-6)
    by_key = {s.key: s for s in ch07.STAGES}
    for key, name in (("tiled", "sgemm_tiled"), ("vector", "sgemm_regtile")):
        ex = get_exercise(STEM, name)
        st = by_key[key]
        assert st.source == f"solution:{name}" and st.kernel == ex.kernel == name
        assert ex.source_file == f"{name}.cu" and (SOLUTIONS / ex.source_file).exists()
        for sizes in ({"m": 1, "n": 1, "k": 1}, {"m": 1000, "n": 1037, "k": 1009}, {"m": 4096, "n": 4096, "k": 4096}):
            grid, block, smem = ex.launch(sizes, dict(ex.launch_defaults))
            want = st.launch(sizes["m"], sizes["n"], sizes["k"])
            assert (tuple(grid), block, smem) == (tuple(want[0]), want[1], want[2]), (name, sizes)
    # stage 5 runs in sgemm_regtile's default geometry, so the exercise can grade it (and the test below does)
    reg2d = ch07.REG2D_SRC.replace("gemm_reg2d", "sgemm_regtile")
    ref = (SOLUTIONS / "sgemm_regtile.cu").read_text()
    sig = lambda src: [(p.dtype, p.pointer) for p in parse_kernels(src)["sgemm_regtile"]]  # noqa: E731
    assert sig(reg2d) == sig(ref)
    ex = get_exercise(STEM, "sgemm_regtile")
    assert ex.launch_defaults == {"bm": 128, "bn": 128, "threads": 256}
    assert ch07.tile_config(128, 128, 8, 8, 8)["threads"] == 256
    # the grader's signature check accepts both lesson kernels the GPU tests grade under the exercises' names
    from autograder.signature import compare_signature
    assert compare_signature(ex, reg2d) == ""
    assert compare_signature(get_exercise(STEM, "sgemm_tiled"),
                             ch07.COALESCED_SRC.replace("gemm_coalesced", "sgemm_tiled")) == ""


# --- GPU --------------------------------------------------------------------------------------

FP32_SIZES = ((1, 1, 1), (33, 65, 17), (257, 130, 1031), (1000, 1032, 520))
BF16_SIZES = ((1, 8, 8), (33, 72, 40), (257, 136, 1032), (1000, 1032, 520))   # N and K multiples of 8


@pytest.mark.gpu
def test_stages_correct_at_odd_sizes(ch07):
    """Is every stage that runs here right at sizes that leave partial tiles, C poisoned with NaN first?"""
    course = import_course()
    lesson = ch07.Lesson()
    want = {s.key for s in ch07.STAGES if s.precision == "fp32" or course.supports("bf16_mma")}
    assert set(lesson.kernels) == want, lesson.skipped
    for key, (st, _k) in lesson.kernels.items():
        for m, n, k in (FP32_SIZES if st.precision == "fp32" else BF16_SIZES):
            a, b, c = course.gemm.make_inputs(m, n, k, st.precision, seed=m + n + k)
            lesson.run(key, a, b, c)
            res = course.gemm.check_gemm(c, a, b, st.precision, name=f"{key} {m}x{n}x{k}")
            assert res, res.message


@pytest.mark.gpu
def test_solutions_correct_at_odd_sizes(ch07):
    """Are both references right at odd and aligned sizes in the grader's launch geometry?"""
    course = import_course()
    from autograder import get_exercise
    for name in ("sgemm_tiled", "sgemm_regtile"):
        ex = get_exercise(STEM, name)
        kern = course.compile((SOLUTIONS / ex.source_file).read_text()).kernel(name)
        # (130, 260, 36) and (256, 128, 64): K and N multiples of 4, so sgemm_regtile takes its float4 paths
        for m, n, k in ((1, 1, 1), (33, 65, 17), (1, 1000, 300), (1000, 1037, 1009), (257, 130, 4099),
                        (130, 260, 36), (256, 128, 64)):
            a, b, c = course.gemm.make_inputs(m, n, k, seed=m * n + k)
            grid, block, smem = ex.launch({"m": m, "n": n, "k": k}, dict(ex.launch_defaults))
            kern(grid, block, a, b, c, m, n, k, shared_mem=smem)
            res = course.gemm.check_gemm(c, a, b, name=f"{name} {m}x{n}x{k}")
            assert res, res.message


@pytest.mark.gpu
def test_check_gemm_catches_a_wrong_result(ch07):
    """Does check_gemm pass a right product and fail one wrong output, in FP32 and in BF16?"""
    course = import_course()
    lesson = ch07.Lesson(keys=["coalesced", "wmma_db"])
    a, b, c = course.gemm.make_inputs(300, 200, 100, seed=5)
    lesson.run("coalesced", a, b, c)
    assert course.gemm.check_gemm(c, a, b)
    c[17, 42] += 1.0          # max |C| is about 40 here: the tolerance is ~4e-3
    assert not course.gemm.check_gemm(c, a, b)
    if course.supports("bf16_mma"):
        a, b, c = course.gemm.make_inputs(300, 200, 104, "bf16", seed=6)
        lesson.run("wmma_db", a, b, c)
        assert course.gemm.check_gemm(c, a, b, "bf16")
        i = int(abs(c.view(np.int16) & 0x7FFF).argmax())   # the largest |C|: flip its sign
        c.ravel()[i] ^= 0x8000
        assert not course.gemm.check_gemm(c, a, b, "bf16")
        # float C from bf16 inputs (what the chapter 08 kernels write): the FP32 tolerance applies
        c32 = (course.gemm.values64(a, "bf16") @ course.gemm.values64(b, "bf16")).astype(np.float32)
        assert course.gemm.check_gemm(c32, a, b, "bf16")
        c32[3, 5] += 0.05 * float(abs(c32).max())
        assert not course.gemm.check_gemm(c32, a, b, "bf16")


def test_make_inputs_refuses_an_unknown_precision(ch07):
    with pytest.raises(ValueError, match="precision"):
        import_course().gemm.make_inputs(2, 2, 2, "tf32")


@pytest.mark.gpu
def test_stage_5_graded_as_regtile_earns_correctness_and_speed(ch07):
    """Graded as sgemm_regtile in its default launch, does stage 5 pass every size and earn at least half the
    speed points (it measured 0.64 of the reference on an H100; full points need 0.6, half 0.35)?"""
    import_course()
    from autograder import get_exercise
    from autograder.report import Status
    from autograder.runner import grade_source
    ex = get_exercise(STEM, "sgemm_regtile")
    report = grade_source(STEM, "sgemm_regtile", ch07.REG2D_SRC.replace("gemm_reg2d", "sgemm_regtile"))
    print(report.feedback())
    assert report.status in Status.CORRECT and report.speed is not None, report.feedback()
    assert report.points >= ex.points.correctness + ex.points.speed / 2, report.feedback()


@pytest.mark.gpu
def test_stage_2_graded_as_tiled_misses_the_speed_points(ch07):
    """Graded as sgemm_tiled (it runs in the same 32 x 32 geometry), is the coalesced stage correct but too slow
    (0.67 of the reference on an H100, 0.8 needed)?"""
    import_course()
    from autograder import get_exercise
    from autograder.runner import grade_source
    ex = get_exercise(STEM, "sgemm_tiled")
    report = grade_source(STEM, "sgemm_tiled", ch07.COALESCED_SRC.replace("gemm_coalesced", "sgemm_tiled"))
    print(report.feedback())
    assert report.points == ex.points.correctness, report.feedback()


@pytest.mark.gpu
def test_measure_stages_small(ch07):
    """Does measure_stages check and time a few stages with cuBLAS in the same run? (How fast each stage is
    belongs to the benchmark suite's rows, not to a test.)"""
    course = import_course()
    keys = ["coalesced", "reg2d"] + (["wmma_ms"] if course.supports("bf16_mma") else [])
    rows = ch07.measure_stages(size=2048, keys=keys, budget_s=0.3, progress=False)
    by = {r["key"]: r for r in rows}
    assert set(by) == set(keys)
    for r in rows:
        assert r["tflops"] > 0 and r["fraction"] == pytest.approx(r["tflops"] / r["cublas_tflops"])


@pytest.mark.gpu
def test_tile_sweep_measures_and_explains(ch07):
    """Does the tile sweep measure the default shape with its resources, and explain an impossible one?

    Under tools/gpu_tier.sh (COURSE_RECORD_SWEEPS=1) building the sweep also measures every point and
    saves benchmarks/results/sweeps/07_staged_gemm_tiles.json for CPU-only replay.
    """
    sw = ch07.tile_sweep()
    good = dict(BM=128, BN=128, BK=8, TM=8, TN=8)
    assert (sw.measure(**good) or 0) > 0, sw.note(**good)
    assert "regs/thread" in sw.note(**good) and "warps per SM" in sw.note(**good)
    bad = dict(BM=256, BN=256, BK=8, TM=4, TN=4)
    assert sw.measure(**bad) is None and "1024" in sw.note(**bad)
