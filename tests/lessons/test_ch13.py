"""Chapter 13 helpers and kernels: every ladder step compiles for sm_90a to what its text says (HGMMA, TMA
loads, setmaxnreg, TMA stores; no spills, no wgmma serialization), the launches fit the GPU's limits, the
`--include` prelude is compiled ahead of each step, section 4's CuTe kernel (where CuTe's headers are installed)
compiles to step 3's instructions, and (GPU, sm_90) every step and the CuTe kernel are exact enough at shapes no
tile divides, the TMA copy lands where the swizzle model says."""
from __future__ import annotations

import time

import numpy as np
import pytest

from repo_helpers import fail_on, import_course, nvrtc_or_skip

STEM = "13_hopper_gemm"
H100_SMEM_OPTIN = 232_448      # bytes of shared memory one block may use on sm_90


@pytest.fixture(scope="module")
def ch13():
    import_course()
    from course.lessons import ch13
    return ch13


def test_every_step_is_a_cell_that_includes_the_parts(ch13):
    """Is each ladder step a `%%cuda` cell for sm_90a that includes hopper_parts, in the ladder's order?"""
    cells = import_course().lesson_cells(STEM)
    order = [cells[s].index for s in ch13.LADDER]
    assert order == sorted(order), "the ladder's steps should appear in the notebook in order"
    for step in ch13.LADDER:
        cell = cells[step]
        assert cell.kernels == (step,) and cell.includes == ("hopper_parts",) and cell.requires == "sm_90a", step
    assert "desc_sw128" in cells["hopper_parts"].source and not cells["hopper_parts"].kernels


def test_launches_fit_hopper(ch13):
    """Does every step's dynamic shared memory (plus its barriers) fit one block of an sm_90 SM?"""
    for step, (threads, smem, a_rows, b_rows, kind, c_map, about) in ch13.LADDER.items():
        assert smem + 256 <= H100_SMEM_OPTIN, step
        assert threads in (128, 256, 384) and a_rows <= 256 and b_rows <= 256 and about


@pytest.fixture(scope="module")
def programs(ch13):
    course = nvrtc_or_skip()
    cells = course.lesson_cells(STEM)
    return {s: cells[s].compile_for_arch("sm_90a") for s in ch13.LADDER}


def test_steps_compile_to_the_instructions_the_text_names(ch13, programs):
    """HGMMA and TMA loads in every step; setmaxnreg from step 4 (warp specialization); TMA stores in step 7
    only; no spills, no local memory, and no wgmma serialization warning in ptxas's log."""
    course = import_course()
    problems = []
    for step, prog in programs.items():
        res = prog.resources[step]
        if res.spill_stores or res.spill_loads or res.local_bytes:
            problems.append(f"{step}: spills or local memory ({res})")
        if "serializ" in prog.log:
            problems.append(f"{step}: ptxas serialized its wgmma: {prog.log}")
        try:
            ops = course.sass_opcodes(prog.sass())[step]
        except (FileNotFoundError, RuntimeError):
            continue            # no disassembler here: the resource checks above still ran
        specialized = ch13.LADDER[step][0] == 384
        want = {"HGMMA": True, "UTMALDG": True, "USETMAXREG": specialized, "UTMASTG": step == "hg7_tma_store"}
        for op, present in want.items():
            if (op in ops) != present:
                problems.append(f"{step}: {op} {'missing' if present else 'unexpected'}")
    fail_on(problems, "ladder kernels:")


def test_the_prelude_keeps_the_cells_line_numbers():
    """Does an error in a step's own code name the step's line, with the parts compiled ahead of it?"""
    course = nvrtc_or_skip()
    parts = course.lesson_cell(STEM, "hopper_parts").source
    with pytest.raises(course.CompileError) as err:
        course.compile_for_arch("int x = 1;\nint y = undefined_name;\n", "sm_90a", name="step.cu", first_line=2,
                                prelude=parts, prelude_name="hopper_parts")
    assert "step.cu(3)" in err.value.log and ">   3 | int y = undefined_name;" in str(err.value)


def _cute_or_skip(course):
    ok, why = course.cute.available()
    if not ok:
        pytest.skip(f"CuTe's headers are not installed (the optional `cute` extra): {why}")


def test_the_cute_cell_is_step_3_written_with_cute(ch13):
    """Is the CuTe kernel a cell of section 4 for sm_90a that asks for CuTe's headers and no other cell, launched
    as the step it mirrors, and built from CuTe's swizzle atom, wgmma atom and TMA copy?"""
    cells = import_course().lesson_cells(STEM)
    cell = cells[ch13.CUTE]
    assert cell.kernels == (ch13.CUTE,) and cell.headers == ("cute",) and cell.includes == ()
    assert cell.requires == "sm_90a" and cell.index > cells["hg7_tma_store"].index
    assert ch13.CUTE not in ch13.LADDER and ch13.CUTE_MIRRORS == "hg3_pipeline"
    for part in ("Layout_K_SW128_Atom", "Swizzle<3, 4, 3>", "SM90_64x256x16_F32BF16BF16_SS", "make_tiled_mma",
                 "SM90_TMA_LOAD_2D::copy", "wait_barrier", "partition_C"):
        assert part in cell.source, part


def test_the_cute_kernel_compiles_to_step_3s_instructions(ch13, programs):
    """Does the CuTe kernel build (NVRTC, sm_90a) to step 3's registers and shared memory, with no spills and no
    wgmma serialization, and to the same number of wgmma, TMA loads and global stores in its SASS?"""
    course = nvrtc_or_skip()
    _cute_or_skip(course)
    start = time.perf_counter()
    prog = course.lesson_cell(STEM, ch13.CUTE).compile_for_arch("sm_90a")
    seconds = time.perf_counter() - start
    assert seconds < 120, f"NVRTC took {seconds:.0f} s on the CuTe cell"
    res, hand = prog.resources[ch13.CUTE], programs[ch13.CUTE_MIRRORS].resources[ch13.CUTE_MIRRORS]
    assert not (res.spill_stores or res.spill_loads or res.local_bytes), res
    assert "serializ" not in prog.log, prog.log
    assert (res.registers, res.static_smem) == (hand.registers, hand.static_smem), (res, hand)
    try:
        sass, ref = prog.sass(), programs[ch13.CUTE_MIRRORS].sass()
    except (FileNotFoundError, RuntimeError):
        pytest.skip("no disassembler here: the resource checks above ran")
    for op in ("HGMMA.64x256x16.F32.BF16 ", "UTMALDG.2D ", "STG.E "):
        assert sass.count(op) and sass.count(op) == ref.count(op), \
            f"{op}: {sass.count(op)} in the CuTe kernel, {ref.count(op)} in step 3"


def test_the_cute_cell_says_what_to_install_without_cute(monkeypatch, capsys):
    """Without CuTe's headers, does the cell print what to install, keep its source and raise nothing; and does a
    CUTLASS_PATH that holds no CuTe say so rather than fall back?"""
    course = import_course()
    from course import _magic
    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    monkeypatch.setattr(course.cute, "_from_wheel", lambda: None)
    cell = course.lesson_cell(STEM, "cute_gemm")
    assert _magic.cuda_cell("--name cute_gemm --arch sm_90a --requires sm_90a --headers cute", cell.source, {}) == {}
    out = capsys.readouterr().out.strip()
    assert out == course.cute.MISSING and "nvidia-cutlass" in out and "CUTLASS_PATH" in out
    assert _magic.cell_sources["cute_gemm"] == cell.source
    with pytest.raises(course.FeatureUnavailable, match="cute"):
        cell.compile_for_arch("sm_90a")
    monkeypatch.setenv("CUTLASS_PATH", "/nonexistent/cutlass")
    ok, why = course.cute.available()
    assert not ok and "/nonexistent/cutlass" in why and "include/cute" in why


def _hopper(course):
    if not course.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    if course.device_info().cc != (9, 0):
        pytest.skip("sm_90a kernels: an H100 or H200")
    pytest.importorskip("cuda.bindings", reason="tensor maps need cuda-python")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(300, 776, 200), (129, 264, 72), (1024, 1536, 2048)])
def test_every_step_multiplies(ch13, shape):
    """Is every step's C within BF16 rounding of the float64 product, at shapes where tiles are partial?"""
    course = import_course()
    _hopper(course)
    problems = []
    for step in ch13.LADDER:
        variants, _ = ch13.ladder_variants(256, steps=[step], check_shape=shape)
        res = variants[0].check()
        if not res:
            problems.append(f"{step}: {res.message[:400]}")
    fail_on(problems, f"ladder at {shape}:")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(300, 776, 200), (129, 264, 72), (1, 258, 8), (1000, 1538, 1096)])
def test_the_cute_kernel_multiplies(ch13, shape):
    """Is the CuTe kernel's C within BF16 rounding of the float64 product on fresh random inputs, at sizes the
    kernel takes (any M, even N, K a multiple of 8) where no tile divides, into NaN-poisoned C; and is a second
    run bit for bit the same (no race), with A and B unchanged?"""
    course = import_course()
    _hopper(course)
    _cute_or_skip(course)
    import cupy
    seed = int(np.random.default_rng().integers(1 << 31))
    a, b, c, b_kn = ch13.inputs(*shape, seed=seed)
    a0, b0 = a.copy(), b.copy()
    run = ch13.launcher(ch13.CUTE)(a, b, c)
    run()
    res = course.gemm.check_gemm(c, a, b_kn, "bf16", name=f"cute_gemm at {shape}, seed {seed}")
    assert res, res.message
    first = c.copy()
    c.fill(0xFFFF)                               # poisoned again: a second run must write every element
    run()
    assert cupy.array_equal(c, first), f"a second run differs (seed {seed})"
    assert cupy.array_equal(a, a0) and cupy.array_equal(b, b0), "the inputs changed"


@pytest.mark.gpu
def test_the_tma_copy_lands_where_the_swizzle_model_says():
    """Does a 128B-swizzled TMA copy of an 8 x 64 BF16 box put every element where course.tma.swizzled says?"""
    course = import_course()
    _hopper(course)
    import cupy
    k = course.lesson_cell(STEM, "tma_box").kernel("tma_box")
    src = cupy.arange(64 * 64, dtype=cupy.uint16).reshape(64, 64)
    out = cupy.zeros(8 * 64, dtype=cupy.uint16)
    k(1, 128, course.tma.tensor_map(src, (8, 64), swizzle="128B"), 0, 16, out)
    r, c = np.divmod(out.get().astype(np.int64) - 16 * 64, 64)
    assert (course.tma.swizzled(r * 128 + 2 * c, "128B") // 2 == np.arange(8 * 64)).all()


def test_ladder_quotes_match_the_h200_recordings():
    """Section 3's figures against the benchmark rows the H200 recorded (ratios to cuBLAS in the same run)."""
    from repo_helpers import check_quotes, recorded_rows
    rows, _ceil = recorded_rows(STEM, gpu="nvidia-h200")
    r4 = {s: rows[f"{s} 4096^3"]["ratio"] for s in ("hg1_tma_wgmma", "hg2_big_tile", "hg3_pipeline",
                                                     "hg4_specialized", "hg5_persistent", "hg6_cluster",
                                                     "hg7_tma_store")}
    r8 = [rows[f"{s} 8192^3"]["ratio"] for s in ("hg3_pipeline", "hg4_specialized", "hg5_persistent",
                                                  "hg6_cluster", "hg7_tma_store")]
    graded = [rows[f"graded hopper_gemm reference (FP32 out) {n}^3"]["ratio"] for n in (4096, 8192)]
    release = rows["hg6_cluster with .release.cluster remote arrivals 4096^3"]["ratio"]
    assert r4["hg2_big_tile"] < r4["hg1_tma_wgmma"] < r4["hg3_pipeline"] < r4["hg4_specialized"]   # "slower, not faster"
    check_quotes(STEM, [
        ("cuBLAS ran at\n790 TFLOP/s".replace("\n", " "), [rows["hg1_tma_wgmma 4096^3"]["anchor_value"]]),
        ("reached 0.52 of it", [r4["hg1_tma_wgmma"]]),
        ("slower, not faster: 0.42", [r4["hg2_big_tile"]]),
        ("turned the same tile into 0.79, warp specialization into 0.89", [r4["hg3_pipeline"], r4["hg4_specialized"]]),
        ("persistent grid into 0.92", [r4["hg5_persistent"]]),
        ("clusters held that (0.91", [r4["hg6_cluster"]]),
        ("to 1.00 of cuBLAS", [r4["hg7_tma_store"]]),
        ("recorded 0.83, 0.92, 0.88, 0.88 and 0.93", r8),
        ("`-DCLUSTER_RELEASE`: 0.58 of", [release]),
        ("recorded 0.98 at", [graded[0]]),
        ("and 1.01 at", [graded[1]]),
        ("it recorded 0.79 of cuBLAS and 0.99 of step 3", [rows["cute_gemm (CuTe) 4096^3"]["ratio"],
                                                            rows["cute_gemm (CuTe) against hg3_pipeline 4096^3"]["ratio"], 3]),
    ], source="benchmarks/results/nvidia-h200.json")
