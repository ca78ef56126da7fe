"""Chapter 07 helpers: the stages (the notebook's cells) compile everywhere they should, the graded ones stay out
of the chapter, the tile model and the sweep explain themselves on a CPU, and on a GPU every stage and
reference is right."""
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
LESSON_CELLS = ("gemm_naive", "gemm_coalesced", "gemm_reg1d", "gemm_reg2d", "gemm_wmma")


@pytest.fixture(scope="module")
def ch07():
    import_course()
    from course.lessons import ch07
    return ch07


def cell(name):
    """The chapter's %%cuda cell that defines ``name``."""
    return import_course().lesson_cell(STEM, name)


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
    builds = [(cell(n).source, ARCHS, ()) for n in LESSON_CELLS if n != "gemm_wmma"]
    builds += [(cell("gemm_wmma").source, ("sm_80", "sm_90"), (f"-DSTAGES={s}",)) for s in (1, 2, 4)]
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
        cell("gemm_wmma").compile_for_arch("sm_75")


def test_regtile_reference_fits_the_plan():
    """Does sgemm_regtile on sm_90 stay at <= 128 registers (two blocks of 256 per SM) and under 48 KiB of
    static shared memory?"""
    course = import_course()
    res = course.compile_for_arch((SOLUTIONS / "sgemm_regtile.cu").read_text(), "sm_90").resources["sgemm_regtile"]
    assert res.registers <= 128 and res.static_smem <= 48 * 1024


# --- CPU: the notebooks -----------------------------------------------------------------------

def test_every_stage_is_a_notebook_cell_or_a_solution(ch07):
    """Does every ungraded stage name a %%cuda cell that defines its kernel (the WMMA one marked --requires
    sm_80, its -DSTAGES left to the stages), every graded one a solution file, and does the module keep no
    kernel source of its own?"""
    cells = [c.rstrip("\n") for c in cuda_cells(STEM)]
    for st in ch07.STAGES:
        if st.cell is None:
            assert st.key in ("tiled", "vector") and (SOLUTIONS / f"{st.kernel}.cu").is_file(), st.key
            continue
        c = cell(st.cell)
        assert st.kernel in c.kernels and c.source.rstrip("\n") in cells and st.source() == c.source, st.key
    wmma = cell("gemm_wmma")
    assert wmma.requires == "sm_80" and not any("STAGES" in o for o in wmma.options)
    assert "__global__" not in (REPO / "course" / "lessons" / "ch07.py").read_text()


def test_chapter_does_not_show_the_graded_kernels(ch07):
    """Does the chapter describe stages 3 and 6 without defining sgemm_tiled or sgemm_regtile anywhere?"""
    nb = read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    for name in ("sgemm_tiled", "sgemm_regtile"):
        assert f"void {name}" not in text and f"{name}(" not in text, name
    shown = "\n".join(cell(n).source for n in LESSON_CELLS)
    for path in sorted(SOLUTIONS.glob("*.cu")):   # nor any line of their solution regions the lesson kernels lack
        region = path.read_text().split("BEGIN SOLUTION")[1].split("END SOLUTION")[0]
        lines = [ln.strip() for ln in region.splitlines() if len(ln.strip()) > 30 and ln.strip() not in shown]
        assert lines and not [ln for ln in lines if ln in text], path.name


def test_exercise_shows_stage_5_as_a_comparison_kernel(ch07):
    """Is the exercise's non-graded comparison cell the chapter's stage 5 cell, graded under sgemm_regtile's name?"""
    nb = read_json_notebook(REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb")
    srcs = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert "%%cuda --name gemm_reg2d\n" + cell("gemm_reg2d").source in srcs
    assert any('.replace("gemm_reg2d", "sgemm_regtile")' in s and "source=" in s for s in srcs)
    shown = next(c for c in nb["cells"] if "".join(c["source"]).startswith("%%cuda --name gemm_reg2d"))
    assert "nbgrader" not in shown["metadata"] and not shown["metadata"].get("tags")


# --- CPU: the model ---------------------------------------------------------------------------

def test_stage_table_is_consistent(ch07):
    """Are stage numbers, keys and row names unique, every shipped source defining its kernel, every launch
    covering C?"""
    stages = ch07.STAGES
    assert len({s.number for s in stages}) == len(stages) == len({s.key for s in stages}) == len({s.name for s in stages})
    assert [s.precision for s in stages] == ["fp32"] * 7 + ["bf16"] * 3
    for st in stages:
        text = st.source()
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
            elif st.key == "warptile":   # two buffers of A^T (BK x (BM + 4)) and B (BK x BN), the cell's defaults
                from course.lessons import ch07_warptile as wt
                assert smem == wt.smem_bytes(wt.cell_config())
            else:
                assert smem == 0


def test_stage_intensity(ch07):
    """Is the tile intensity 2 BM BN / ((BM + BN) s) FLOP/B, and 0.25 for the stages without a tile?"""
    c = importlib.import_module("course.lessons.ch07_warptile").cell_config()   # stage 6b: the cell's defaults
    want = {"naive": 0.25, "coalesced": 0.25, "tiled": 8.0, "reg1d": 16.0, "reg2d": 32.0, "vector": 32.0,
            "warptile": 2 * c.BM * c.BN / ((c.BM + c.BN) * 4), "wmma": 64.0, "wmma_db": 64.0, "wmma_ms": 64.0}
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
    """Do the sweep's shapes that tile_config rejects for the loader fail gemm_reg2d's static_assert, and corner
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
            cell("gemm_reg2d").compile_for_arch("sm_90", options=opts(d))
    threads = lambda d: (d["BM"] // d["TM"]) * (d["BN"] // d["TN"])  # noqa: E731
    corners = [min(valid, key=threads), max(valid, key=threads), dict(BM=128, BN=128, BK=8, TM=8, TN=8)]
    for d in corners:
        assert cell("gemm_reg2d").compile_for_arch("sm_90", options=opts(d)).cubin, d


# --- CPU: recordings, sweep and table ---------------------------------------------------------

def _fake_comparison(ch07, keys=("naive", "coalesced", "tiled", "reg2d", "vector", "wmma_ms")):
    """What compare_stages returns (the two cuBLAS anchors, then the stages), with made-up numbers."""
    from course.variants import Comparison
    rows = Comparison()
    rows.unit = "TFLOP/s"
    base = {"fp32": ("cuBLAS SGEMM 4096^3 (FP32, TF32 off)", 50.0), "bf16": ("cuBLAS BF16 4096^3", 700.0)}
    common = {"about": "", "ms": 1.0, "spread": 0.01, "unit": "TFLOP/s", "result": None}
    for name, rate in base.values():
        rows.append(dict(common, name=name, rate=rate, anchor=None, of_anchor=None, is_anchor=True))
    for i, st in enumerate(s for s in ch07.STAGES if s.key in keys):
        anchor, rate = base[st.precision]
        rows.append(dict(common, name=st.name, rate=rate * (i + 1) / 10, anchor=anchor, of_anchor=(i + 1) / 10,
                         is_anchor=False))
    return rows


def test_benchmark_rows_round_trip_through_a_recording(ch07, tmp_path, monkeypatch, capsys):
    """Does the benchmark module import without CUDA and turn the comparison into rows with the recorded names,
    anchors and target, and are they read back (table, bars, roofline) as the staged table?"""
    from benchmarks._suite import Context
    mod = importlib.import_module(f"benchmarks.rows.{STEM}")
    fake = _fake_comparison(ch07)
    stages = [f for f in fake if not f["is_anchor"]]
    monkeypatch.setattr(ch07, "compare_stages", lambda **kw: fake)
    rows = [r.to_dict() for r in mod.rows(Context(type("C", (), {"copy_gbps": 3000.0})(), STEM))]
    assert [r["name"] for r in rows] == [f["name"] for f in stages]
    assert rows[0]["name"] == "stage 1: naive: one output per thread, x down a column"     # as recorded until now
    assert {r["anchor"] for r in rows} == {"cuBLAS SGEMM 4096^3 (FP32, TF32 off), same run", "cuBLAS BF16 4096^3, same run"}
    assert [r["ratio"] for r in rows] == pytest.approx([f["of_anchor"] for f in stages])
    assert [r["target"] for r in rows] == [0.70 if r["name"].startswith("stage 6:") else None for r in rows]
    (tmp_path / "test-gpu.json").write_text(json.dumps({"device": {"name": "Test GPU"}, "rows": rows}))
    _no_gpu_and_results_in(monkeypatch, tmp_path)
    got = ch07.recorded_stages()
    out = capsys.readouterr().out
    assert "Test GPU" in out and "stage 8b" in out
    assert [(r["name"], r["rate"], r["of_anchor"]) for r in got] == \
        [(f["name"], f["rate"], pytest.approx(f["of_anchor"])) for f in stages]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    assert len(got.plot().patches) == len(got)
    want = [ch07.stage_intensity(st) for st in ch07.STAGES if st.name in {f["name"] for f in stages}]
    assert [p[1] for p in ch07.roofline_points(got)] == [p[1] for p in ch07.roofline_points(fake)] == want
    plt.close("all")


def test_stage_rows_keep_their_recorded_names(ch07):
    """Are the stages' row names (what compare_stages shows and the benchmark suite records) those recorded so far?"""
    rec = [r["name"] for r in import_course().results.recorded_rows(STEM)[0]]
    if not rec:
        pytest.skip("no recording of chapter 07 in benchmarks/results")
    assert rec == [st.name for st in ch07.STAGES]


def test_stages_left_out_say_why(ch07, tmp_path, monkeypatch, capsys):
    """Without solutions/ (a student's copy) or sm_80, are the graded and the BF16 stages left out of the
    comparison with a sentence each, the graded ones with the recorded numbers where there are some?"""
    course = import_course()
    rec = [{"chapter": STEM, "name": next(s.name for s in ch07.STAGES if s.key == "tiled"), "value": 9.0,
            "unit": "TFLOP/s", "ratio": 0.17}]
    (tmp_path / "test-gpu.json").write_text(json.dumps({"device": {"name": "Test GPU"}, "rows": rec}))
    _no_gpu_and_results_in(monkeypatch, tmp_path)
    monkeypatch.setattr(course, "solution_source", lambda chapter, name: None)
    assert ch07.stage_variants(keys=["tiled", "vector", "wmma", "wmma_ms"]) == ([], [])
    out = capsys.readouterr().out
    assert "stage 3: shared-memory tiles 32 x 32: left out, the graded exercise sgemm_tiled" in out
    assert "9.0 TFLOP/s, 0.17x cuBLAS" in out and "sgemm_regtile" in out
    assert out.count("need sm_80 or newer") == 2


def test_recorded_stages_without_recording(ch07, tmp_path, monkeypatch, capsys):
    """With no GPU and nothing recorded, does the table say how to record it instead of failing?"""
    _no_gpu_and_results_in(monkeypatch, tmp_path)
    assert ch07.recorded_stages() == []
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
        assert st.cell is None and st.kernel == ex.kernel == name
        assert ex.source_file == f"{name}.cu" and (SOLUTIONS / ex.source_file).exists()
        for sizes in ({"m": 1, "n": 1, "k": 1}, {"m": 1000, "n": 1037, "k": 1009}, {"m": 4096, "n": 4096, "k": 4096}):
            grid, block, smem = ex.launch(sizes, dict(ex.launch_defaults))
            want = st.launch(sizes["m"], sizes["n"], sizes["k"])
            assert (tuple(grid), block, smem) == (tuple(want[0]), want[1], want[2]), (name, sizes)
    # stage 5 runs in sgemm_regtile's default geometry, so the exercise can grade it (and the test below does)
    reg2d = cell("gemm_reg2d").source.replace("gemm_reg2d", "sgemm_regtile")
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
                             cell("gemm_coalesced").source.replace("gemm_coalesced", "sgemm_tiled")) == ""


# --- GPU --------------------------------------------------------------------------------------

FP32_SIZES = ((1, 1, 1), (33, 65, 17), (257, 130, 1031), (1000, 1032, 520))
BF16_SIZES = ((1, 8, 8), (33, 72, 40), (257, 136, 1032), (1000, 1032, 520))   # N and K multiples of 8


@pytest.mark.gpu
def test_stages_correct_at_odd_sizes(ch07):
    """Is every stage that runs here right at sizes that leave partial tiles, C poisoned with NaN first?"""
    course = import_course()
    stages = [s for s in ch07.STAGES if s.precision == "fp32" or course.supports("bf16_mma")]
    for st in stages:
        run = st.launcher()
        for m, n, k in (FP32_SIZES if st.precision == "fp32" else BF16_SIZES):
            a, b, c = course.gemm.make_inputs(m, n, k, st.precision, seed=m + n + k)
            run(a, b, c)
            res = course.gemm.check_gemm(c, a, b, st.precision, name=f"{st.key} {m}x{n}x{k}")
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
    run = {s.key: s.launcher for s in ch07.STAGES}
    a, b, c = course.gemm.make_inputs(300, 200, 100, seed=5)
    run["coalesced"]()(a, b, c)
    assert course.gemm.check_gemm(c, a, b)
    c[17, 42] += 1.0          # max |C| is about 40 here: the tolerance is ~4e-3
    assert not course.gemm.check_gemm(c, a, b)
    if course.supports("bf16_mma"):
        a, b, c = course.gemm.make_inputs(300, 200, 104, "bf16", seed=6)
        run["wmma_db"]()(a, b, c)
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
    report = grade_source(STEM, "sgemm_regtile", cell("gemm_reg2d").source.replace("gemm_reg2d", "sgemm_regtile"))
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
    report = grade_source(STEM, "sgemm_tiled", cell("gemm_coalesced").source.replace("gemm_coalesced", "sgemm_tiled"))
    print(report.feedback())
    assert report.points == ex.points.correctness, report.feedback()


@pytest.mark.gpu
def test_compare_stages_small(ch07):
    """Does compare_stages check and time a few stages with the cuBLAS of their precision in the same run? (How
    fast each stage is belongs to the benchmark suite's rows, not to a test.)"""
    course = import_course()
    keys = ["coalesced", "reg2d"] + (["wmma_ms"] if course.supports("bf16_mma") else [])
    rows = ch07.compare_stages(size=2048, keys=keys, budget_s=0.3, progress=False, verbose=False)
    by_key = {s.key: s for s in ch07.STAGES}
    anchors = {r["name"]: r for r in rows if r["is_anchor"]}
    stages = [r for r in rows if not r["is_anchor"]]
    assert [r["name"] for r in stages] == [by_key[k].name for k in keys]
    assert len(anchors) == (2 if "wmma_ms" in keys else 1)
    for r in rows:
        assert r["rate"] > 0
    for r in stages:
        assert ("BF16" in r["anchor"]) == ("WMMA" in r["name"])
        assert r["of_anchor"] == pytest.approx(r["rate"] / anchors[r["anchor"]]["rate"])
    assert [p[1] for p in ch07.roofline_points(rows)] == [ch07.stage_intensity(by_key[k]) for k in keys]


@pytest.mark.gpu
def test_compare_stages_stops_on_a_wrong_stage(ch07, monkeypatch):
    """Does a stage that skips part of C (the cell's kernel launched on too small a grid) stop the comparison
    before anything is timed?"""
    course = import_course()
    st = next(s for s in ch07.STAGES if s.key == "coalesced")
    short = dataclasses.replace(st, block_tile=(16, 32))      # blocks of 8 rows, 16 apart: half of C is never written
    monkeypatch.setattr(ch07, "STAGES", [short])
    with pytest.raises(course.CheckError, match="nothing was timed"):
        ch07.compare_stages(size=256, progress=False, verbose=False)


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


# --- issue #22: the text against the recordings, the tiling pictures, waves and the memory levels ---

def test_chapter_07_quotes_match_the_recordings(ch07):
    """Does every figure chapter 07's text quotes from a recording (stages, cuBLAS, chapter 08's tile, the
    memory levels, waves and split-K) match benchmarks/results?"""
    from repo_helpers import check_quotes, recorded_rows
    rows, ceil = recorded_rows(STEM)
    r08, _ = recorded_rows("08_tensor_cores")
    st = {s.key: rows[s.name] for s in ch07.STAGES}
    v = {k: r["value"] for k, r in st.items()}
    pct = {k: 100 * r["ratio"] for k, r in st.items()}
    ref08, peak08 = r08["mma_gemm: reference (everything on)"]["value"], r08[
        "mma.sync peak: m16n8k16 with no memory traffic (ceiling of any mma.sync kernel)"]["value"]
    ai08 = 2 * 256 * 128 / ((256 + 128) * 2)
    levels = {r["kernel"]: r for r in ch07.memory_levels(ch07.recorded_stages())}
    w = ch07.waves(4096, 4096, 128, 128, 132, 2)
    flops = 2 * 512 * 512 * 65536
    check_quotes(STEM, [
        ("we measured 0.5 TFLOP/s for stage 1 and 5.9 for stage 2", [v["naive"], 1, v["coalesced"], 2]),
        ("we measured 8.9 TFLOP/s, only 1.5 times stage 2", [v["tiled"], v["tiled"] / v["coalesced"], 2]),
        ("we measured 15.9 TFLOP/s, 1.8 times stage 3", [v["reg1d"], v["reg1d"] / v["tiled"], 3]),
        ("26.5 TFLOP/s, 51% of cuBLAS SGEMM", [v["reg2d"], pct["reg2d"]]),
        ("we measured 40.1 TFLOP/s, 78% of cuBLAS SGEMM", [v["vector"], pct["vector"]]),
        ("double buffering (stage 6) removed the remaining overheads: 78% of cuBLAS SGEMM", [6, pct["vector"]]),
        ("at 786 TFLOP/s on an", [st["wmma"]["anchor_value"]]),
        ("we measured 170 TFLOP/s with one stage, 156 with two and 188 with four: 22%, 20% and 24%",
         [v["wmma"], v["wmma_db"], v["wmma_ms"], pct["wmma"], pct["wmma_db"], pct["wmma_ms"]]),
        ("recorded 351 TFLOP/s with fragments", [r08["mma_gemm: fragments not double-buffered"]["value"]]),
        ("and 491 with the next step's fragments", [ref08]),
        ("chapter 08 recorded 260 TFLOP/s with two stages and 491 with four",
         [8, r08["mma_gemm: 2 stages instead of 4"]["value"], ref08]),
        ("which recorded 643 TFLOP/s on an", [peak08]),
        ("cuBLAS's 786 comes from", [st["wmma"]["anchor_value"]]),
        ("Chapter 08's tile (256 x 128, 85.3 FLOP/B) ran at 491 TFLOP/s; from DRAM alone that would take 5.75 TB/s",
         [8, 256, 128, ai08, ref08, ref08 / ai08]),
        ("almost twice the 3,000 GB/s copy", [ceil["copy_gbps"]]),
        ("The four-stage WMMA kernel at 64 FLOP/B and 188 TFLOP/s", [ch07.stage_intensity(ch07.STAGES[-1]), v["wmma_ms"]]),
        ("2.94 TB/s, about half of that", [levels[ch07.STAGES[-1].name]["L2 -> SMs TB/s"]]),
        ("has 264 slots, so the run takes 3.88 waves, rounded up to 4; the fourth is "
         "88% full and 97% of the slots", [w["slots"], w["waves"], w["rounds"], 100 * (w["waves"] - 3), 100 * w["slots used"]]),
        ("makes 16 tiles of 128 x 128: 16 of 132 SMs busy, 12% of the GPU",
         [ch07.waves(512, 512, 128, 128, 132, 1)["tiles"], 128, 128, 16, 132, 100 * 16 / 132]),
        ("16.8 MB, under 6 µs at the 3,003 GB/s of a copy, against the 1.30 ms that the product's 34.4 GFLOP take "
         "at stage 5's recorded 26.5 TFLOP/s",
         [2 * 8 * 512 ** 2 * 4 / 1e6, 6, ceil["copy_gbps"], 1e3 * flops / (v["reg2d"] * 1e12), flops / 1e9, 5,
          v["reg2d"]]),
    ])
    assert 2 * 8 * 512 ** 2 * 4 / ceil["copy_gbps"] / 1e3 < 6          # "under 6 µs"


def test_wave_rows_take_blocks_per_sm_from_the_sweep(ch07):
    """Do the wave rows use the tile sweep's recorded blocks per SM, and does the arithmetic follow from it?"""
    sw = ch07.tile_sweep(record=False)
    if sw.live:
        pytest.skip("a GPU is present: the sweep measures instead of replaying")
    rows = {(r["size"], r["tile"]): r for r in ch07.wave_rows(sw, 132)}
    assert "2 block(s)" in sw.note(BM=128, BN=128, BK=8, TM=8, TN=8)
    r = rows[("4096^3", "128 x 128")]
    assert (r["blocks/SM"], r["tiles"], r["slots"], r["rounds"]) == (2, 1024, 264, 4)
    assert r["slots used"] == pytest.approx(1024 / 1056)
    assert rows[("2048^3", "128 x 256")]["blocks/SM"] == 1 and rows[("512^3", "128 x 128")]["tiles"] == 16
    assert ch07.waves(1000, 1000, 128, 128, 10, 1) == {"tiles": 64, "slots": 10, "waves": 6.4, "rounds": 7,
                                                       "slots used": pytest.approx(64 / 70)}


def test_memory_levels_from_the_recordings(ch07):
    """Are the memory levels each BF16 row's rate over its tile intensity (L2) and over the compulsory 4096 / 3
    FLOP/B (DRAM), with chapter 08's recorded tile read from its note?"""
    levels = ch07.memory_levels(ch07.recorded_stages())
    assert [r["kernel"] for r in levels][:3] == [s.name for s in ch07.STAGES if s.precision == "bf16"]
    ch08 = levels[-1]
    assert ch08["kernel"].startswith("chapter 08") and ch08["tile"] == "256 x 128"
    assert ch08["tile FLOP/B"] == pytest.approx(256 / 3)
    for r in levels:
        assert r["L2 -> SMs TB/s"] == pytest.approx(r["TFLOP/s"] / r["tile FLOP/B"])
        assert r["DRAM TB/s (compulsory)"] == pytest.approx(r["TFLOP/s"] * 3 / 4096)
    assert max(r["L2 -> SMs TB/s"] for r in levels) == ch08["L2 -> SMs TB/s"]


def test_tiling_figures_use_the_kernels_constants(ch07, monkeypatch):
    """Are the tiling pictures drawn from the cells' own #defines and index formulas (and do they follow an
    edit), with the sizes the stages launch?"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    d = ch07.kernel_defines("gemm_reg2d")
    by_key = {s.key: s for s in ch07.STAGES}
    assert (d["BM"], d["BN"]) == by_key["reg2d"].block_tile
    assert ch07.tile_config(d["BM"], d["BN"], d["BK"], d["TM"], d["TN"])["threads"] == by_key["reg2d"].block
    fig = ch07.tiling_figure("gemm_reg2d")
    titles = [ax.get_title() for ax in fig.axes]
    assert "warp 1: 16 x 128 outputs = 32 threads of 8 x 8" in titles[1] and "K advances 8" in titles[0]
    w = ch07.kernel_defines("gemm_wmma")
    assert (w["BM"], w["BN"]) == by_key["wmma"].block_tile and w["THREADS"] == 256
    fig = ch07.tiling_figure("gemm_wmma")
    assert "warp 1: 64 x 32 outputs = 8 fragments of 16 x 16" in fig.axes[1].get_title()
    assert "K advances 32" in fig.axes[0].get_title()
    real = ch07.course.lesson_cell

    class Edited:
        source = real(STEM, "gemm_reg2d").source.replace("#define TN 8", "#define TN 4")
    monkeypatch.setattr(ch07.course, "lesson_cell", lambda chapter, name: Edited)
    assert "32 threads of 8 x 4" in ch07.tiling_figure("gemm_reg2d").axes[1].get_title()
    plt.close("all")


def test_wait_group_scope_is_explained():
    """Does chapter 07 say that cp.async.wait_group is per thread and that the barrier after it publishes the
    slice to the block, before the roofline discussion?"""
    from repo_helpers import chapter_markdown
    text = " ".join(chapter_markdown(STEM))
    assert "That wait is **per thread**" in text and "The `__syncthreads()` right after the wait" in text
    assert "190 TFLOP/s" not in text.replace("near 190 TFLOP/s", "").replace("64 FLOP/B and 190 TFLOP/s", "")
