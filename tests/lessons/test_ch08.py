"""Chapter 08 helpers: kernels compile, the helpers run the notebook's cells, fragment layouts and swizzles are
right, and the ablation is one comparison whose rows keep their recorded names."""
from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest

from repo_helpers import REPO, cuda_cells, import_course, read_json_notebook

ARCHS = ("sm_75", "sm_80", "sm_90")
STEM = "08_tensor_cores"
SOLUTIONS = REPO / "solutions" / STEM

# A correct GEMM with mma_gemm's signature and launch contract that never touches a tensor core: one
# FP32 FMA per term, one thread per output of a 16 x 16 tile. Graded as mma_gemm it must get nothing.
CUDA_CORE_SRC = r'''
// LAUNCH = {"bm": 16, "bn": 16, "threads": 256}
extern "C" __global__ void mma_gemm(const unsigned short* A, const unsigned short* B, float* C, int M, int N, int K)
{
    const int tiles_n = (N + 15) / 16;
    const int row = (blockIdx.x / tiles_n) * 16 + threadIdx.x / 16;
    const int col = (blockIdx.x % tiles_n) * 16 + threadIdx.x % 16;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k)
        acc = fmaf(__uint_as_float((unsigned)A[(size_t)row * K + k] << 16),
                   __uint_as_float((unsigned)B[(size_t)k * N + col] << 16), acc);
    C[(size_t)row * N + col] = acc;
}
'''


def _ablation() -> list:
    """ch08.ABLATION for parametrizing (empty while course/ does not exist)."""
    if not (REPO / "course").is_dir():
        return []
    from course.lessons.ch08 import ABLATION as variants
    return variants


ABLATION = _ablation()


@pytest.fixture(scope="module")
def ch08():
    import_course()
    from course.lessons import ch08
    return ch08


def cell(name):
    """The chapter's %%cuda cell that defines ``name``."""
    return import_course().lesson_cell(STEM, name)


def reference():
    """solutions/08_tensor_cores/mma_gemm.cu (part of this repository)."""
    return import_course().solution_source(STEM, "mma_gemm")


def spec_module():
    spec = importlib.util.spec_from_file_location("spec08", REPO / "autograder" / "specs" / f"{STEM}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sass_or_skip(prog) -> str:
    try:
        return prog.sass()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"no SASS disassembler here: {exc}")


def no_local(prog, where):
    for name, res in prog.resources.items():
        assert res.local_bytes == 0 and res.spill_stores == 0, (where, name, res)


# --- compiling -----------------------------------------------------------------------------------

def test_lesson_kernels_compile_without_spills(ch08):
    """Do the probe and the first GEMM build for sm_75..sm_90 (FP16 fallback on sm_75), and the peak from sm_80?"""
    course = import_course()
    for name in ("mma_probe", "mma_simple"):
        for arch in ARCHS:
            no_local(cell(name).compile_for_arch(arch), (name, arch))
    for arch in ("sm_80", "sm_90"):
        no_local(cell("mma_peak").compile_for_arch(arch), ("mma_peak", arch))
    with pytest.raises(course.CompileError):            # BF16 MMA: the cell says --requires sm_80
        cell("mma_peak").compile_for_arch("sm_75")


def test_solutions_compile_without_spills():
    """Do both graded references build for sm_80 and sm_90 with no local memory, and declare sm_80?"""
    course = import_course()
    for path in sorted(SOLUTIONS.glob("*.cu")):
        text = path.read_text()
        assert text.split("\n", 1)[0] == "// requires: sm_80", path.name
        for arch in ("sm_80", "sm_90"):
            no_local(course.compile_for_arch(text, arch), (path.name, arch))


@pytest.mark.parametrize("label,cfg", ABLATION, ids=[label for label, _ in ABLATION])
def test_ablation_variants_compile_without_spills(ch08, label, cfg):
    """Does every ablation variant of mma_gemm.cu (bf16 out) build for sm_80 and sm_90 without spills?"""
    course = import_course()
    opts = [f"-D{k}={v}" for k, v in dict(ch08._DEFAULTS, **cfg).items()]
    for arch in ("sm_80", "sm_90"):
        prog = course.compile_for_arch(reference(), arch, options=opts)
        no_local(prog, (label, arch))
        assert prog.resources["mma_gemm"].registers <= 255
    assert ch08.mma_gemm_smem(**cfg) <= 227 * 1024


def test_tensor_core_instructions_in_sass(ch08):
    """Is there HMMA (and LDSM) in the lesson kernels and the reference, LDGSTS (cp.async) in the reference,
    and no HMMA in a CUDA-core kernel (what the grader's required_sass check rejects)?"""
    course = import_course()
    sass75 = sass_or_skip(cell("mma_simple").compile_for_arch("sm_75"))
    assert "HMMA.1688" in sass75 and "LDSM" in sass75 and "HMMA.16816" not in sass75
    sass80 = sass_or_skip(cell("mma_simple").compile_for_arch("sm_80"))
    assert "HMMA.16816.F32.BF16" in sass80 and "LDSM" in sass80
    ref = sass_or_skip(course.compile_for_arch(reference(), "sm_90"))
    assert "HMMA.16816.F32.BF16" in ref and "LDSM.16.MT88.4" in ref and "LDGSTS" in ref
    wmma = sass_or_skip(course.compile_for_arch((SOLUTIONS / "wmma_gemm.cu").read_text(), "sm_80"))
    assert "HMMA" in wmma
    plain = sass_or_skip(course.compile_for_arch(CUDA_CORE_SRC, "sm_80"))
    assert not re.search(r"\bHMMA\b", plain) and "FFMA" in plain


def test_cuda_core_kernel_passes_the_checks_before_the_gpu():
    """Does the CUDA-core kernel of the GPU test match mma_gemm's signature and LAUNCH keys, so that only
    the missing HMMA can cost it its points there?"""
    import_course()
    from autograder import get_exercise
    from autograder.launchcfg import launch_from_source, merge_launch
    from autograder.signature import compare_signature
    ex = get_exercise(STEM, "mma_gemm")
    assert not compare_signature(ex, CUDA_CORE_SRC)
    cfg = merge_launch(ex, launch_from_source(CUDA_CORE_SRC))
    assert ex.launch({"m": 129, "n": 136, "k": 40}, cfg)[:2] == (9 * 9, 256)


# --- the notebooks -------------------------------------------------------------------------------

def chapter_cells() -> list:
    nb = read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")
    return [("".join(c["source"]) if isinstance(c["source"], list) else c["source"], c["cell_type"])
            for c in nb["cells"]]


def test_the_helpers_run_the_notebook_cells(ch08):
    """Are the kernels the helpers run %%cuda cells of the notebook (the peak marked sm_80, the probe and the
    first GEMM for every GPU), with no kernel source kept in the lesson module?"""
    cells = [c.rstrip("\n") for c in cuda_cells(STEM)]
    lines = {src.split("\n", 1)[1].rstrip("\n"): src.split("\n", 1)[0]
             for src, kind in chapter_cells() if kind == "code" and src.startswith("%%cuda")}
    for name, magic in (("mma_probe", "%%cuda"), ("mma_simple", "%%cuda"), ("mma_peak", "%%cuda --requires sm_80")):
        src = cell(name).source.rstrip("\n")
        assert src in cells and lines[src] == magic, name      # the probe and mma_simple run on sm_75 (FP16)
    assert "__global__" not in (REPO / "course" / "lessons" / "ch08.py").read_text()


def test_gpu_work_in_the_chapter_is_guarded():
    """Does every chapter cell that launches work sit behind %%gpu or course.gpu_available()?"""
    gpu_calls = ("probe_layouts(", "simple_gemm(", "compare_ablation(", "mma_peak(", "course.benchmark(")
    for src, kind in chapter_cells():
        if kind == "code" and not src.startswith("%%cuda") and any(c in src for c in gpu_calls):
            assert src.startswith("%%gpu") or "course.gpu_available()" in src, src[:200]


def test_exercise_stub_keeps_the_helpers_and_has_no_mma():
    """Does the released mma_gemm stub keep the given helpers, compile, and contain no HMMA?"""
    course = import_course()
    nb = json.loads((REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb").read_text())
    cells = {t.split(":", 1)[1]: "".join(c["source"]) for c in nb["cells"]
             for t in c.get("metadata", {}).get("tags", []) if t.startswith("kernel:")}
    body = cells["mma_gemm"].partition("\n")[2]
    stub = re.sub(r"\n[ \t]*// ### BEGIN SOLUTION.*?// ### END SOLUTION", "\n    // YOUR CODE HERE", body, flags=re.S)
    for helper in ("cp_async_16", "ldmatrix_x4(", "ldmatrix_x4_trans(", "mma_bf16(", "a_off(", "b_off("):
        assert helper in stub, helper
    prog = course.compile_for_arch(stub, "sm_80")
    assert "mma_gemm" in prog.resources
    assert "HMMA" not in sass_or_skip(prog)


# --- fragment layouts ------------------------------------------------------------------------------

SLOTS = {"A": 8, "B": 4, "C": 4}
SHAPES = {"A": (16, 16), "B": (16, 8), "C": (16, 8)}


@pytest.mark.parametrize("operand", "ABC")
def test_fragment_map_is_a_bijection(ch08, operand):
    """Does every element have exactly one (lane, slot), and every lane its 8 (A) or 4 (B, C) slots?"""
    m = ch08.fragment_map(operand)
    assert m.shape == SHAPES[operand]
    want = sorted(lane * 8 + s for lane in range(32) for s in range(SLOTS[operand]))
    assert sorted(m.ravel().tolist()) == want


@pytest.mark.parametrize("lane", range(32))
def test_fragment_map_is_the_ptx_layout(ch08, lane):
    """Is lane 4g + t's share what the PTX ISA documents for m16n8k16 (A row, B col, C/D)?"""
    g, t = divmod(lane, 4)
    a, b, c = (ch08.fragment_map(x) for x in "ABC")
    for h in range(2):
        assert a[g, 2 * t + h] == lane * 8 + h               # a0, a1: row g
        assert a[g + 8, 2 * t + h] == lane * 8 + 2 + h       # a2, a3: row g + 8
        assert a[g, 2 * t + 8 + h] == lane * 8 + 4 + h       # a4, a5: columns + 8
        assert a[g + 8, 2 * t + 8 + h] == lane * 8 + 6 + h   # a6, a7
        assert b[2 * t + h, g] == lane * 8 + h               # b0, b1: k = 2t, 2t + 1 of column g
        assert b[2 * t + 8 + h, g] == lane * 8 + 2 + h       # b2, b3: k + 8
        assert c[g, 2 * t + h] == lane * 8 + h               # c0, c1: row g
        assert c[g + 8, 2 * t + h] == lane * 8 + 2 + h       # c2, c3: row g + 8
    assert ch08.fragment_map("A")[9, 13] == 6 * 8 + 7       # the chapter's micro-exercise 8.1


def test_fragment_map_rejects_other_operands(ch08):
    with pytest.raises(ValueError):
        ch08.fragment_map("D")


def ldmatrix(smem, addr, num, trans=False):
    """NumPy model of ldmatrix.x{num}: lanes 8j..8j+7 name the rows of matrix j (element offsets of 8
    consecutive 16-bit elements); lane 4g + t receives row g, elements 2t and 2t + 1 of each matrix
    (.trans: of its transpose). Returns regs[lane, j, half]."""
    regs = np.zeros((32, num, 2), dtype=smem.dtype)
    for j in range(num):
        mat = np.stack([smem[addr[8 * j + r]: addr[8 * j + r] + 8] for r in range(8)])
        if trans:
            mat = mat.T
        for lane in range(32):
            g, t = divmod(lane, 4)
            regs[lane, j] = mat[g, 2 * t], mat[g, 2 * t + 1]
    return regs


def layout_of(regs, to_local):
    """lane * 8 + slot for each operand element, from registers that hold element indices."""
    out = {}
    for lane in range(32):
        for j in range(regs.shape[1]):
            for h in range(2):
                out[to_local(int(regs[lane, j, h]))] = lane * 8 + 2 * j + h
    return out


def assert_layout(found: dict, want: np.ndarray):
    assert len(found) == want.size
    for (r, c), v in found.items():
        assert want[r, c] == v, ((r, c), v, want[r, c])


def test_probe_addresses_give_the_documented_fragments(ch08):
    """Do the probe's ldmatrix.x4 (A) and .x2.trans (B) addresses, through the ldmatrix model, give fragment_map?"""
    regs = ldmatrix(np.arange(256), [(lane & 15) * 16 + (lane >> 4) * 8 for lane in range(32)], 4)
    assert_layout(layout_of(regs, lambda v: divmod(v, 16)), ch08.fragment_map("A"))
    regs = ldmatrix(np.arange(128), [(lane & 15) * 8 for lane in range(32)], 2, trans=True)
    assert_layout(layout_of(regs, lambda v: divmod(v, 8)), ch08.fragment_map("B"))


@pytest.mark.parametrize("kk", [0, 16])
def test_simple_gemm_addresses_give_the_documented_fragments(ch08, kk):
    """Do mma_simple's padded-row addresses (As[64][40], Bs[32][72]) give the right fragments?"""
    a_ld, b_ld = 40, 72
    a_smem = np.full(64 * a_ld, -1)
    b_smem = np.full(32 * b_ld, -1)
    for r in range(64):
        a_smem[r * a_ld: r * a_ld + 32] = r * 32 + np.arange(32)            # logical A index r * BK + c
    for k in range(32):
        b_smem[k * b_ld: k * b_ld + 64] = k * 64 + np.arange(64)            # logical B index k * BN + n
    for i, wm in ((0, 0), (1, 32)):
        row0 = wm + i * 16
        regs = ldmatrix(a_smem, [(row0 + (lane & 15)) * a_ld + kk + (lane >> 4) * 8 for lane in range(32)], 4)
        assert_layout(layout_of(regs, lambda v: (v // 32 - row0, v % 32 - kk)), ch08.fragment_map("A"))
    for j in range(4):
        col0 = 32 + j * 8
        regs = ldmatrix(b_smem, [(kk + (lane & 15)) * b_ld + col0 for lane in range(32)], 2, trans=True)
        assert_layout(layout_of(regs, lambda v: (v // 64 - kk, v % 64 - col0)), ch08.fragment_map("B"))


def a_off(r, c, bk, swizzle=True):      # solutions/08_tensor_cores/mma_gemm.cu
    return r * bk + ((c ^ (((r >> 1) & 3) if bk == 32 else (r & 7)) if swizzle else c) << 3)


def b_off(k, j, bn, swizzle=True):
    return k * bn + ((j ^ (k & 7) if swizzle else j) << 3)


@pytest.mark.parametrize("bk", [32, 64])
@pytest.mark.parametrize("swizzle", [True, False])
def test_reference_swizzled_tiles_give_the_documented_fragments(ch08, bk, swizzle):
    """Stored chunk by chunk at a_off / b_off and read back by ldmatrix at the same offsets, are the
    reference's fragments the logical tile's (A: .x4 per m16 tile; B: one .x4.trans per two n8 tiles)?"""
    bm, bn = 32, 64
    a_smem = np.full(bm * bk, -1)
    for r in range(bm):
        for c in range(bk // 8):
            a_smem[a_off(r, c, bk, swizzle) + np.arange(8)] = r * bk + 8 * c + np.arange(8)
    assert sorted(a_smem.tolist()) == list(range(bm * bk))                   # a permutation: no collisions
    for mi in range(bm // 16):
        for kk in range(bk // 16):
            regs = ldmatrix(a_smem, [a_off(mi * 16 + (lane & 15), 2 * kk + (lane >> 4), bk, swizzle)
                                     for lane in range(32)], 4)
            assert_layout(layout_of(regs, lambda v: (v // bk - 16 * mi, v % bk - 16 * kk)), ch08.fragment_map("A"))
    b_smem = np.full(bk * bn, -1)
    for k in range(bk):
        for j in range(bn // 8):
            b_smem[b_off(k, j, bn, swizzle) + np.arange(8)] = k * bn + 8 * j + np.arange(8)
    assert sorted(b_smem.tolist()) == list(range(bk * bn))
    for kk in range(bk // 16):
        for nj in range(bn // 16):
            regs = ldmatrix(b_smem, [b_off(16 * kk + (lane & 15), 2 * nj + (lane >> 4), bn, swizzle)
                                     for lane in range(32)], 4, trans=True)
            for half in range(2):           # registers 0-1: n8 tile 2 nj, registers 2-3: tile 2 nj + 1
                col0 = 16 * nj + 8 * half
                assert_layout(layout_of(regs[:, 2 * half: 2 * half + 2], lambda v: (v // bn - 16 * kk, v % bn - col0)),
                              ch08.fragment_map("B"))


# --- the swizzle and the bank model -------------------------------------------------------------

def test_swizzle_table(ch08):
    """Without the XOR swizzle: A (64-byte rows) 4-way, B (512-byte rows) 8-way; with it: conflict-free."""
    got = {(r["tile"].split(",")[0], r["swizzle"]): (r["degree"], r["wavefronts"]) for r in ch08.swizzle_table()}
    assert got == {("A tile", "none"): (4, 16), ("A tile", "XOR"): (1, 4),
                   ("B tile", "none"): (8, 32), ("B tile", "XOR"): (1, 4)}


@pytest.mark.parametrize("row_bytes,plain", [(64, 4), (128, 8), (512, 8)])
def test_ldmatrix_access_every_kstep(ch08, row_bytes, plain):
    """At every k16 step of a slice, is the swizzled ldmatrix conflict-free and the plain one `plain`-way?"""
    for kstep in range(row_bytes // 32 if row_bytes <= 128 else 1):
        assert ch08.ldmatrix_access(row_bytes, False, kstep=kstep).degree == plain
        assert ch08.ldmatrix_access(row_bytes, True, kstep=kstep).degree == 1
    assert ch08.ldmatrix_access(row_bytes, True, operand="B").degree == 1


def test_padded_rows_of_the_first_gemm_are_conflict_free():
    """Are mma_simple's 80-byte A rows and 144-byte B rows conflict-free for its ldmatrix loads?"""
    import_course()
    from course.access import bank_access
    for kk in (0, 2):       # 16-byte chunks: k = 0 and k = 16
        assert bank_access(lambda lane: (lane & 15) * 5 + kk + (lane >> 4), elem_bytes=16).degree == 1
    for j in range(4):      # .x2.trans uses lanes 0-15: rows k, one 16-byte chunk of n each
        assert bank_access(lambda lane: (lane & 15) * 9 + 4 + j if lane < 16 else None, elem_bytes=16).degree == 1


@pytest.mark.parametrize("row_bytes", [64, 128, 256, 512])
def test_swizzle_is_a_permutation_of_each_row(row_bytes):
    """Does the XOR keep every chunk in its row, one chunk per slot?"""
    chunks = row_bytes // 16
    for r in range(32):
        f = ((r >> 1) & 3) if row_bytes == 64 else (r & 7)
        assert sorted(c ^ f for c in range(chunks)) == list(range(chunks))


def test_plots_build_without_gpu(ch08):
    """Do the fragment and swizzle pictures draw on a CPU?"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for operand in "ABC":
        assert ch08.plot_fragment(operand) is not None
    assert ch08.plot_swizzle(64) is not None and ch08.plot_swizzle(512, rows=8) is not None
    plt.close("all")


# --- BF16 accuracy and the grader's reference ----------------------------------------------------

def test_round_bf16(ch08):
    """Is round_bf16 nearest-even to 8 significant bits, and idempotent?"""
    x = np.array([1 / 3, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -2.5, 0.0, 3e38], dtype=np.float32)
    got = ch08.round_bf16(x)
    assert got[0] == np.float32(0.333984375)
    assert got[1] == 1.0 and got[2] == 1 + 2 ** -6          # ties go to the even neighbour
    assert got[3] == -2.5 and got[4] == 0.0
    assert np.array_equal(ch08.round_bf16(got), got)


def test_bf16_error_table(ch08):
    """Is the error against FP32 inputs about 2.5e-3 (< 2^-8) at every K, and against the rounded ones far smaller?"""
    rows = ch08.bf16_error_table()
    assert [r["K"] for r in rows] == [64, 256, 1024, 4096]
    for r in rows:
        assert 1e-3 < r["vs FP32 inputs"] < 6e-3, r
        assert r["vs rounded inputs"] < 1e-5, r
        assert r["vs FP32 inputs"] > 100 * r["vs rounded inputs"], r


def test_spec_reference_agrees_with_the_course(ch08):
    """Does the grader round and convert BF16 like the course, and is its reference the float64 product?"""
    import_course()
    from course.cublas import from_bf16, to_bf16
    spec = spec_module()
    rng = np.random.default_rng(3)
    x = rng.standard_normal(10_000).astype(np.float32)
    x[:4] = [1 + 2 ** -8, 1 + 3 * 2 ** -8, -(1 + 2 ** -8), 0.0]
    bits = to_bf16(x)
    assert np.array_equal(spec.bf16_uniform(np.random.default_rng(1), (50, 40), np.uint16),
                          to_bf16(np.random.default_rng(1).uniform(-1, 1, (50, 40)).astype(np.float32)))
    assert np.array_equal(from_bf16(bits), ch08.round_bf16(x))
    a = to_bf16(rng.uniform(-1, 1, (17, 24)).astype(np.float32))
    b = to_bf16(rng.uniform(-1, 1, (24, 8)).astype(np.float32))
    want = from_bf16(a).astype(np.float64) @ from_bf16(b).astype(np.float64)
    assert np.allclose(spec.reference({"a": a, "b": b})["c"], want, rtol=1e-7, atol=0)
    from course.cublas import bf16_product64   # the same product for chapter 13 (b stored n x k) and 15
    assert np.array_equal(bf16_product64(a, to_bf16(from_bf16(b).T.copy()), trans_b=True), spec.reference({"a": a, "b": b})["c"])


def test_spec_launch_matches_the_references(ch08):
    """Do the spec's launches agree with the headers of the two references and with ch08's defaults?"""
    import_course()
    from autograder import get_exercise
    ex = get_exercise(STEM, "wmma_gemm")
    assert ex.launch({"m": 48, "n": 80, "k": 32}, dict(ex.launch_defaults)) == ((2, 3), 128, 0)
    ex = get_exercise(STEM, "mma_gemm")
    d = ch08._DEFAULTS
    cfg = dict(ex.launch_defaults)
    assert (cfg["bm"], cfg["bn"], cfg["threads"]) == (d["BM"], d["BN"], 32 * d["WARPS_M"] * d["WARPS_N"])
    assert cfg["smem"] == ch08.mma_gemm_smem(OUT_BF16=0) == 98304
    assert ex.launch({"m": 4096, "n": 4096, "k": 4096}, cfg) == (512, 256, 98304)
    assert ex.launch({"m": 777, "n": 264, "k": 520}, cfg) == (4 * 3, 256, 98304)
    assert ex.required_techniques == ("tensor_cores",)
    assert "98304 with the" in reference()


def test_smem_of_each_variant(ch08):
    """Is the dynamic shared memory the pipeline's, or the epilogue's staging tile where that is larger?"""
    assert ch08.mma_gemm_smem() == 4 * (256 + 128) * 32 * 2
    assert ch08.mma_gemm_smem(STAGES=2) == 256 * (128 + 8) * 2        # the staging tile is larger
    assert ch08.mma_gemm_smem(STAGES=2, SMEM_EPILOGUE=0) == 2 * (128 + 256) * 32 * 2


def test_benchmark_rows_import():
    """Does benchmarks/rows/08_tensor_cores.py import without CUDA, with the solutions it times here?"""
    import importlib
    course = import_course()
    mod = importlib.import_module("benchmarks.rows.08_tensor_cores")
    assert callable(mod.rows)
    assert course.solution_source(STEM, "mma_gemm.cu") and course.solution_source(STEM, "wmma_gemm.cu")


def test_ablation_rows_keep_their_recorded_names(ch08):
    """Are the ablation's row names (what the benchmark suite records) the ones recorded so far, the reference
    first, and every variant a different set of macros?"""
    course = import_course()
    names = [f"mma_gemm: {label}" for label, _cfg in ch08.ABLATION]
    assert names[0] == "mma_gemm: reference (everything on)" and ch08.ABLATION[0][1] == {}
    assert len({tuple(sorted(cfg.items())) for _l, cfg in ch08.ABLATION}) == len(ch08.ABLATION)
    rec = [r["name"] for r in course.results.recorded_rows(STEM)[0] if r["name"].startswith("mma_gemm: ")]
    if not rec:
        pytest.skip("no recording of chapter 08 in benchmarks/results")
    assert rec == names


def test_compare_ablation_without_gpu_says_so(ch08, capsys):
    """Without a GPU, does the ablation print a sentence naming what it needs and where the recording is, and
    never raise?"""
    course = import_course()
    if course.gpu_available():
        pytest.skip("a GPU is present: the GPU tier measures the ablation")
    assert ch08.compare_ablation() == []
    out = capsys.readouterr().out
    assert "sm_80" in out and "show_recorded" in out and "Traceback" not in out


# --- GPU -------------------------------------------------------------------------------------------

def _inputs16(m, n, k, kind, seed):
    """16-bit A and B of this GPU's kind and a float32 C full of NaN (the kernels here write float)."""
    from course.gemm import make_inputs
    return make_inputs(m, n, k, kind, seed=seed, out="float32")


def _float_check(c, a, b, kind):
    from course.gemm import check_gemm
    return check_gemm(c, a, b, kind)


def _need_sm80():
    if not import_course().supports("bf16_mma"):
        pytest.skip("needs sm_80 or newer (BF16 mma.sync, cp.async)")


@pytest.mark.gpu
def test_probe_matches_fragment_map(ch08):
    """Does the hardware put every element of A, B and C where fragment_map (the PTX ISA) says?"""
    found = ch08.probe_layouts()
    for operand in "ABC":
        assert np.array_equal(found[operand], ch08.fragment_map(operand)), (operand, found[operand])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(512, 640, 256), (64, 64, 32), (128, 64, 1024)])
def test_simple_gemm_correct(ch08, shape):
    """Is the chapter's first mma.sync GEMM right against float64 (bf16 from sm_80, fp16 on sm_75)?"""
    m, n, k = shape
    kind = ch08.input_dtype()
    a, b, c = _inputs16(m, n, k, kind, seed=m + n)
    ch08.simple_gemm()(a, b, c)
    ok = _float_check(c, a, b, kind)
    assert ok, ok.message


@pytest.mark.gpu
def test_simple_gemm_refuses_other_shapes(ch08):
    with pytest.raises(ValueError):
        ch08.simple_gemm()(*_inputs16(65, 64, 32, ch08.input_dtype(), seed=0))


ODD = ((777, 264, 520), (1, 8, 8), (129, 136, 40), (1009, 1032, 1000))


@pytest.mark.gpu
@pytest.mark.parametrize("label,cfg", ABLATION, ids=[label for label, _ in ABLATION])
def test_ablation_variants_correct_at_odd_shapes(ch08, label, cfg):
    """Is every ablation variant (bf16 out) right at shapes with partial tiles in m, n and k?"""
    _need_sm80()
    from course.gemm import check_gemm, make_inputs
    launch = ch08.mma_gemm_launcher(cfg)
    for m, n, k in ODD:
        a, b, c = make_inputs(m, n, k, "bf16", seed=m + k)
        launch(a, b, c)
        ok = check_gemm(c, a, b, "bf16", name=f"{label} {m}x{n}x{k}")
        assert ok, ok.message


@pytest.mark.gpu
def test_compare_ablation_small(ch08):
    """Does compare_ablation check every variant, then time all of them with cuBLAS BF16 in one table? (How fast
    each is belongs to the benchmark suite's rows, not to a test.)"""
    _need_sm80()
    rows = ch08.compare_ablation(size=1024, budget_s=0.2, progress=False, verbose=False)
    anchors = [r for r in rows if r["is_anchor"]]
    variants = [r for r in rows if not r["is_anchor"]]
    assert [r["name"] for r in anchors] == ["cuBLAS BF16 1024^3 (bf16 out)"]
    assert [r["name"] for r in variants] == [f"mma_gemm: {label}" for label, _cfg in ch08.ABLATION]
    for r in variants:
        assert r["rate"] > 0 and r["of_anchor"] == pytest.approx(r["rate"] / anchors[0]["rate"])


@pytest.mark.gpu
def test_helpers_take_the_notebooks_kernels(ch08):
    """Do probe_layouts and simple_gemm run a kernel compiled from the notebook's cell, as the notebook passes it?"""
    probe = cell("mma_probe").kernel()
    found = ch08.probe_layouts(probe)
    assert all(np.array_equal(found[op], ch08.fragment_map(op)) for op in "ABC")
    kind = ch08.input_dtype()
    a, b, c = _inputs16(128, 192, 64, kind, seed=4)
    ch08.simple_gemm(cell("mma_simple").kernel())(a, b, c)
    ok = _float_check(c, a, b, kind)
    assert ok, ok.message


@pytest.mark.gpu
def test_graded_reference_float_out_at_odd_shapes(ch08):
    """Is the graded form (float C) right with the spec's launch at odd shapes, within 1e-4 of the largest output?"""
    _need_sm80()
    course = import_course()
    from autograder import get_exercise
    ex = get_exercise(STEM, "mma_gemm")
    k_ref = course.compile(reference()).kernel("mma_gemm")
    for m, n, k in ODD:
        a, b, c = _inputs16(m, n, k, "bf16", seed=m)
        grid, block, smem = ex.launch({"m": m, "n": n, "k": k}, dict(ex.launch_defaults))
        k_ref(grid, block, a, b, c, m, n, k, shared_mem=smem)
        ok = _float_check(c, a, b, "bf16")
        assert ok, (m, n, k, ok.message)


@pytest.mark.gpu
def test_cuda_core_kernel_gets_no_points(ch08):
    """A correct GEMM on the CUDA cores, graded as mma_gemm: no HMMA in its SASS, so no points at all?"""
    _need_sm80()
    course = import_course()
    sass_or_skip(course.compile_for_arch(CUDA_CORE_SRC, "sm_80"))
    from autograder.runner import grade_source
    k = course.compile(CUDA_CORE_SRC).kernel("mma_gemm")
    for m, n, k_ in ((129, 136, 40), (1, 8, 8)):           # it is correct: the HMMA rule alone fails it
        a, b, c = _inputs16(m, n, k_, "bf16", seed=m)
        k(-(-m // 16) * -(-n // 16), 256, a, b, c, m, n, k_)
        assert _float_check(c, a, b, "bf16")
    report = grade_source(STEM, "mma_gemm", CUDA_CORE_SRC)
    print(report.feedback())
    assert report.points == 0, report.feedback()
    assert "HMMA" in report.feedback()

