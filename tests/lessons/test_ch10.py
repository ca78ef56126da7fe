"""Chapter 10 helpers: column-major storage and the operand swap (CPU), the kernels, and (GPU) cuBLAS/cuBLASLt."""
from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from repo_helpers import REPO, import_course

ARCHS = ("sm_75", "sm_80", "sm_90")
STEM = "10_cublas"


@pytest.fixture(scope="module")
def ch10():
    import_course()
    from course.lessons import ch10
    return ch10


# ---- CPU: column-major storage and the swap ----

@pytest.mark.parametrize("m,n", [(1, 1), (2, 3), (3, 2), (7, 13), (32, 33)])
def test_rowmajor_bytes_read_as_colmajor_are_the_transpose(ch10, m, n):
    """Does reading a row-major M x N buffer as column-major N x M give x.T, without a copy?"""
    x = np.arange(m * n, dtype=np.float32).reshape(m, n)
    v = ch10.rowmajor_bytes_as_colmajor(x)
    assert v.shape == (n, m) and np.array_equal(v, x.T)
    assert np.shares_memory(v, x) or not x.flags.c_contiguous


def test_colmajor_view_leading_dimension(ch10):
    """Is element (r, c) at r + c * ld, and are the padding rows skipped?"""
    y = np.arange(32, dtype=np.float32).reshape(4, 8)
    v = ch10.colmajor_view(y.ravel(), 5, 4, ld=8)
    assert v[2, 3] == y.ravel()[2 + 3 * 8]
    assert np.array_equal(v, y[:, :5].T)


def test_colmajor_view_refuses_bad_arguments(ch10):
    """Are a short buffer, ld < rows and a 2-D buffer refused by name?"""
    with pytest.raises(ValueError, match="ld"):
        ch10.colmajor_view(np.zeros(20), 5, 4, ld=4)
    with pytest.raises(ValueError, match="needs"):
        ch10.colmajor_view(np.zeros(28), 5, 4, ld=8)
    with pytest.raises(ValueError, match="one-dimensional"):
        ch10.colmajor_view(np.zeros((4, 8)), 5, 4, ld=8)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 5, 4), (17, 3, 29), (64, 33, 1)])
def test_swap_gives_the_rowmajor_product(ch10, m, k, n):
    """Does the column-major toy BLAS, called with swapped operands, return the row-major A @ B?"""
    rng = np.random.default_rng(m * 100 + n)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    assert np.allclose(ch10.rowmajor_gemm_by_swap(a, b), a @ b)
    args = ch10.swap_arguments(m, n, k)
    assert (args["m"], args["n"], args["k"], args["first"]) == (n, m, k, "B")
    assert (args["lda"], args["ldb"], args["ldc"]) == (n, k, n)


def test_colmajor_gemm_is_column_major(ch10):
    """Does the toy BLAS read and write column-major (Fortran order), leading dimensions included?"""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    c = ch10.colmajor_gemm(3, 2, 4, a.ravel(order="F"), 3, b.ravel(order="F"), 4, ldc=5)
    got = ch10.colmajor_view(c, 3, 2, 5)
    assert c.size == 10 and np.allclose(got, a @ b)
    with pytest.raises(ValueError, match="inner dimensions"):
        ch10.rowmajor_gemm_by_swap(np.zeros((2, 3)), np.zeros((4, 2)))


def test_rel_error(ch10):
    """Is the relative Frobenius error zero for equal arrays and right for a known perturbation?"""
    ref = np.ones((4, 4))
    assert ch10.rel_error(ref, ref) == 0.0
    assert ch10.rel_error(ref * 1.001, ref) == pytest.approx(1e-3)


def test_print_table_and_comparison_rows(ch10, capsys):
    """Do the recorded rows load from benchmarks/results and print as a table without a GPU?"""
    course = import_course()
    rows = ch10.comparison_rows()
    assert any("SGEMM" in r["row"] for r in rows)
    assert {r["chapter"] for r in rows} <= set(ch10.COMPARED)
    course.print_table(rows, ["gpu", "chapter", "row", "value", "ratio"])
    course.print_table([])
    out = capsys.readouterr().out
    assert "SGEMM" in out and "(no rows)" in out


def test_colmajor_index_reference_matches_the_indexing(ch10):
    """Is the spec's reference the matrix read at r + c * lda (padding left out), as the kernel's comment says?"""
    import_course()
    from autograder import get_exercise
    ex = get_exercise(STEM, "colmajor_index")
    rows, cols, lda = 5, 7, 8
    a = np.random.default_rng(2).random((cols, lda), dtype=np.float32)
    got = ex.reference({"a": a, "rows": rows, "cols": cols, "lda": lda})["out"]
    want = np.array([[a.ravel()[r + c * lda] for c in range(cols)] for r in range(rows)])
    assert np.array_equal(got, want)
    assert np.array_equal(got, ch10.colmajor_view(a.ravel(), rows, cols, lda))


def test_bias_relu_reference(ch10):
    """Is the bias per column and the clamp at zero?"""
    import_course()
    from autograder import get_exercise
    ex = get_exercise(STEM, "bias_relu")
    c = np.array([[1.0, -2.0, 0.5]], dtype=np.float32)
    b = np.array([-2.0, 3.0, 0.0], dtype=np.float32)
    assert np.array_equal(ex.reference({"c": c, "bias": b, "m": 1, "n": 3})["c"], [[0.0, 1.0, 0.5]])


# ---- kernels compile ----

@pytest.mark.parametrize("arch", ARCHS)
def test_kernels_compile(arch):
    """Do the lesson's epilogue kernel (its notebook cell) and both reference kernels compile for sm_75..sm_90?"""
    course = import_course()
    for src in (course.lesson_cell(STEM, "add_bias_relu").source, course.solution_source(STEM, "bias_relu"),
                course.solution_source(STEM, "colmajor_index")):
        assert course.compile_for_arch(src, arch).cubin


def test_epilogue_cell_has_the_signature_the_notebook_launches():
    """Does the add_bias_relu cell take (y, bias, m, n), as the fused-epilogue cell and the suite launch it?"""
    course = import_course()
    src = " ".join(course.lesson_cell(STEM, "add_bias_relu").source.split())
    assert "add_bias_relu(float* __restrict__ y, const float* __restrict__ bias, int m, int n)" in src


def test_gpu_cells_are_marked():
    """Does every code cell that touches cupy, cuBLAS or nvmath start with %%gpu?"""
    nb = json.loads((REPO / "chapters" / f"{STEM}.ipynb").read_text())
    for c in nb["cells"]:
        src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        if c["cell_type"] != "code" or src.startswith(("%%cuda", "# On Colab")):
            continue
        touches = any(w in src for w in ("cupy", "cublas.", "ch10.gemm", "precision_table", "run_round",
                                          "lt_algorithms", "Matmul", "operands("))
        assert not touches or src.startswith("%%gpu "), src[:80]


def test_nvmath_missing_is_one_sentence(ch10, monkeypatch):
    """Without nvmath-python, is the message one sentence and no exception?"""
    import builtins
    real = builtins.__import__

    def fake(name, *a, **kw):
        if name.startswith("nvmath"):
            raise ImportError("no nvmath")
        return real(name, *a, **kw)
    monkeypatch.setattr(builtins, "__import__", fake)
    msg = ch10.nvmath_missing()
    assert msg == ch10.NO_NVMATH and msg.count(". ") == 0 and msg.endswith(".")


def test_sweep_builds_without_gpu(ch10):
    """Does the size sweep build (replaying or saying so) without running anything on a CPU machine?"""
    course = import_course()
    sw = ch10.size_sweep()
    assert sw.name == "10_cublas_sizes" and sw.params["compute"] == list(ch10.COMPUTES)
    if not course.gpu_available():
        assert not sw.live


def test_gemm_refuses_a_bad_compute_or_operand_before_the_gpu(ch10):
    """Are an unknown compute type and, on a handle of one's own, a wrong dtype refused by name?"""
    a = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="compute"):
        ch10.gemm(a, a.T.copy(), compute="bf32", handle=1)
    with pytest.raises(ValueError, match="float32"):
        ch10.gemm(a.astype(np.float64), a.T.copy(), compute="fp32", handle=1)


def test_benchmark_rows_import_and_use_the_grader_geometry():
    """Does benchmarks/rows/10_cublas.py import without CUDA and time bias_relu with the grader's launch?"""
    import_course()
    from autograder import get_exercise
    mod = importlib.import_module("benchmarks.rows.10_cublas")
    assert callable(mod.rows)
    ex = get_exercise(STEM, "bias_relu")
    grid, block, _ = ex.launch({"m": mod.BIAS_M, "n": mod.BIAS_N}, {})
    assert (grid, block) == ((min(-(-mod.BIAS_N // 128), 32), min(-(-mod.BIAS_M // 8), 4096)), (32, 8))


# ---- GPU ----

@pytest.mark.gpu
def test_gemm_matches_cupy_at_awkward_shapes(ch10):
    """Does the operand-swap cuBLAS call give CuPy's product at shapes with every dimension different?"""
    import cupy
    for m, n, k in ((1, 1, 1), (257, 129, 67), (33, 1000, 7)):
        for compute, tol in (("fp32", 1e-5), ("tf32", 5e-3), ("bf16", 2e-2), ("fp16", 5e-3)):
            a, b, a32, b32 = ch10.operands(m, n, k, compute, seed=m)
            c = ch10._as_f32(ch10.gemm(a, b, compute=compute), compute)
            assert ch10.rel_error(c, a32.astype(cupy.float64) @ b32) < tol, (m, n, k, compute)


@pytest.mark.gpu
def test_precision_table_orders_speed_and_error(ch10):
    """Is TF32 faster than FP32 and less accurate, at 2048^3?"""
    t = {r["compute"]: r for r in ch10.precision_table(2048, computes=("fp32", "tf32"))}
    assert t["tf32"]["tflops"] > t["fp32"]["tflops"]
    assert t["fp32"]["rel_error"] < 1e-5 < t["tf32"]["rel_error"] < 1e-2


@pytest.mark.gpu
def test_gemm_on_a_handle_follows_the_current_stream(ch10):
    """Under `with stream:`, does ch10.gemm(handle=h) compute a @ b and leave h bound to that stream (CuPy's
    binding re-binds the handle to the current stream on every call, which section 5 relies on)?"""
    import cupy
    from cupy_backends.cuda.libs import cublas
    s = cupy.cuda.Stream(non_blocking=True)
    h = cublas.create()
    try:
        cublas.setStream(h, 0)
        for compute in ("fp32", "bf16"):
            a, b, a32, b32 = ch10.operands(257, 129, 67, compute, seed=4)
            cupy.cuda.Device().synchronize()
            with s:
                c = ch10.gemm(a, b, compute=compute, handle=h)
            assert cublas.getStream(h) == s.ptr
            s.synchronize()
            ref = a32.astype(cupy.float64) @ b32
            assert ch10.rel_error(ch10._as_f32(c, compute), ref) < (1e-5 if compute == "fp32" else 2e-2), compute
    finally:
        cublas.destroy(h)


@pytest.mark.gpu
def test_two_stream_rows_compute_every_product():
    """Does the suite's two-stream measurement (the notebook's section 5) compute every product right?"""
    import_course()
    r = importlib.import_module("benchmarks.rows.10_cublas")._two_streams(128, count=8, reps=3)
    assert r["max_abs_err"] < 1e-3 and r["serial_ms"] > 0 and r["concurrent_ms"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("rows,cols,lda", [(1, 1, 1), (37, 1009, 40), (1009, 37, 1024), (300, 4099, 300)])
def test_colmajor_index_solution(rows, cols, lda):
    """Is the reference colmajor_index exact on padded column-major matrices?"""
    import cupy
    course = import_course()
    k = course.compile((REPO / "solutions" / STEM / "colmajor_index.cu").read_text()).kernel("colmajor_index")
    a = cupy.random.default_rng(rows).random((cols, lda), dtype=cupy.float32)
    out = cupy.full((rows, cols), cupy.nan, dtype=cupy.float32)
    k((-(-cols // 32), -(-rows // 32)), (32, 8), a, out, rows, cols, lda)
    assert bool((out == a[:, :rows].T).all())


@pytest.mark.gpu
def test_fused_epilogue_when_nvmath(ch10):
    """With nvmath-python, do fused and separate agree with float64, and is the fused one not slower?"""
    if ch10.nvmath_missing():
        pytest.skip(ch10.NO_NVMATH)
    f = importlib.import_module("benchmarks.rows.10_cublas")._fused_epilogue(2048, 2048, 256)
    assert max(f["rel_error"].values()) < 1e-2
    assert f["fused_ms"] < 1.1 * f["separate_ms"]
    algos = ch10.lt_algorithms(1024, 1024, 1024, limit=4)
    assert algos and all(r["median_ms"] > 0 for r in algos)


# ---- GPU: the grader on the references and on calibration kernels (prints the speed ratios; run with -s) ----

BIAS_RELU_SIMPLE = r'''
extern "C" __global__ void bias_relu(float* __restrict__ c, const float* __restrict__ bias, int m, int n)
{
    for (int i = blockIdx.y * blockDim.y + threadIdx.y; i < m; i += gridDim.y * blockDim.y)
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
            long long at = (long long)i * n + j;
            c[at] = fmaxf(c[at] + bias[j], 0.0f);
        }
}
'''
"""Coalesced, one float per thread: should earn full points (the 0.7 threshold leaves room for it)."""

BIAS_RELU_COLUMN_WALK = r'''
extern "C" __global__ void bias_relu(float* __restrict__ c, const float* __restrict__ bias, int m, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += gridDim.x * blockDim.x)
        for (int j = blockIdx.y * blockDim.y + threadIdx.y; j < n; j += gridDim.y * blockDim.y) {
            long long at = (long long)i * n + j;
            c[at] = fmaxf(c[at] + bias[j], 0.0f);
        }
}
'''
"""x on rows: correct, lanes `n` floats apart; must miss the speed points."""

COLMAJOR_DIRECT = r'''
extern "C" __global__ void colmajor_index(const float* __restrict__ a, float* __restrict__ out,
                                          int rows, int cols, int lda)
{
    int c = blockIdx.x * 32 + threadIdx.x;
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
        int r = blockIdx.y * 32 + k;
        if (r < rows && c < cols)
            out[(long long)r * cols + c] = a[r + (long long)c * lda];
    }
}
'''
"""Right indexing, no tile: writes coalesced, reads strided. Full correctness points; speed calibrates."""

COLMAJOR_WRONG_LD = COLMAJOR_DIRECT.replace("a[r + (long long)c * lda]", "a[r + (long long)c * rows]")
"""The classic bug: the leading dimension taken as rows. Must fail (sizes with lda > rows)."""


def _grade(exercise, source):
    from autograder import grade_source
    r = grade_source(STEM, exercise, source)
    ratio = r.speed.ratio if r.speed is not None else None
    print(f"\n{exercise}: {r.status} {r.points}/{r.max_points}, speed ratio {ratio}")
    return r, ratio


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", ["bias_relu", "colmajor_index", "sgemm_bias_relu"])
def test_references_get_full_marks(exercise):
    """Does each reference kernel, graded as a submission, get every point?"""
    import_course()
    from autograder import get_exercise
    ex = get_exercise(STEM, exercise)
    r, _ = _grade(exercise, (REPO / "solutions" / STEM / ex.source_file).read_text())
    assert r.points == r.max_points, r.feedback()


@pytest.mark.gpu
def test_bias_relu_calibration():
    """Does a simple coalesced kernel pass the speed check, and a column walk fail it (both correct)?"""
    import_course()
    simple, ratio_simple = _grade("bias_relu", BIAS_RELU_SIMPLE)
    walk, ratio_walk = _grade("bias_relu", BIAS_RELU_COLUMN_WALK)
    assert simple.points == simple.max_points, simple.feedback()
    assert walk.status == "slow" and walk.points == 4, walk.feedback()


@pytest.mark.gpu
def test_colmajor_calibration():
    """Does the untiled kernel get the correctness points, and the lda bug fail? (prints the untiled ratio)"""
    import_course()
    direct, ratio = _grade("colmajor_index", COLMAJOR_DIRECT)
    wrong, _ = _grade("colmajor_index", COLMAJOR_WRONG_LD)
    assert direct.points >= 7, direct.feedback()
    assert wrong.points == 0 and wrong.status == "failed", wrong.feedback()


def test_calibration_kernels_compile():
    """Do the GPU tier's calibration kernels compile (so a GPU run is not wasted on a typo)?"""
    course = import_course()
    for src in (BIAS_RELU_SIMPLE, BIAS_RELU_COLUMN_WALK, COLMAJOR_DIRECT, COLMAJOR_WRONG_LD):
        assert course.compile_for_arch(src, "sm_80").cubin


@pytest.mark.gpu
@pytest.mark.parametrize("exercise", ["bias_relu", "colmajor_index", "sgemm_bias_relu"])
def test_released_stubs_get_zero(exercise):
    """Does the nbgrader stub (solution region replaced by `// YOUR CODE HERE`) compile and score 0?"""
    import re
    import_course()
    from autograder import get_exercise
    ex = get_exercise(STEM, exercise)
    src = (REPO / "solutions" / STEM / ex.source_file).read_text()
    stub = re.sub(r"//\s*### BEGIN SOLUTION.*?### END SOLUTION", "// YOUR CODE HERE", src, flags=re.S)
    assert "YOUR CODE HERE" in stub and "BEGIN SOLUTION" not in stub
    r, _ = _grade(exercise, stub)
    assert r.points == 0, r.feedback()


FUSED_NAIVE = r"""
extern "C" __global__ void sgemm_bias_relu(const float* a, const float* b, const float* bias, float* c,
                                           int m, int n, int k)
{
    // one output per thread over the spec's 128 x 128 block tiles: correct, and slow
    for (int r = blockIdx.y * 128 + threadIdx.x / 16; r < min(m, blockIdx.y * 128 + 128); r += 16)
        for (int col = blockIdx.x * 128 + threadIdx.x % 16; col < min(n, blockIdx.x * 128 + 128); col += 16) {
            float acc = 0.f;
            for (int i = 0; i < k; ++i) acc += a[(long long)r * k + i] * b[(long long)i * n + col];
            c[(long long)r * n + col] = fmaxf(acc + bias[col], 0.f);
        }
}
"""
"""A correct fused GEMM without shared memory or register tiles: correctness points only."""

FUSED_NO_RELU = FUSED_NAIVE.replace("fmaxf(acc + bias[col], 0.f)", "acc + bias[col]")
"""The epilogue without its ReLU: must fail."""


def test_fused_calibration_kernels_compile():
    course = import_course()
    for src in (FUSED_NAIVE, FUSED_NO_RELU):
        assert course.compile_for_arch(src, "sm_80").cubin


@pytest.mark.gpu
def test_fused_gemm_calibration():
    """Does a naive fused GEMM get correctness points only (slow), and one without ReLU fail?"""
    import_course()
    naive, ratio = _grade("sgemm_bias_relu", FUSED_NAIVE)
    no_relu, _ = _grade("sgemm_bias_relu", FUSED_NO_RELU)
    assert naive.status == "slow" and naive.points == 4, naive.feedback()
    assert no_relu.points == 0 and no_relu.status == "failed", no_relu.feedback()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["sgemm_rowmajor", "linear_rowmajor"])
def test_cublas_calls_on_the_gpu(name):
    """Is the reference call right under real cuBLAS at every case, and does the NumPy model that
    students without a GPU try their call on compute exactly what cuBLAS does, wrong calls included?"""
    import numpy as np
    import_course()
    from autograder import get_exercise, grade_source
    from course import calls
    ex = get_exercise(STEM, name)
    text = (REPO / "solutions" / STEM / ex.solution_file).read_text()
    r = grade_source(STEM, name, text)
    assert r.points == r.max_points, r.feedback()
    call = calls.parse_call_cell(text, name)
    wrong = dict(call, lda=call["ldb"], ldb=call["lda"])       # leading dimensions crossed
    sizes = ex.sizes[-1]
    import cupy
    for c in (call, wrong):
        bufs, _, out_len = calls.make_case(name, sizes, seed=3)
        outs = {}
        for backend, xp in (("numpy", np), ("cupy", cupy)):
            d = {nm: xp.array(b) for nm, b in bufs.items()}
            out = xp.full(out_len, np.nan, dtype=np.float32)
            try:
                calls.sgemm_call(name, c, d, out, sizes)
            except ValueError as exc:
                outs[backend] = str(exc)
                continue
            outs[backend] = out if backend == "numpy" else cupy.asnumpy(out)
        if isinstance(outs["numpy"], str):
            assert outs["numpy"] == outs["cupy"]
        else:
            np.testing.assert_allclose(outs["cupy"], outs["numpy"], rtol=1e-4, atol=1e-3)


# ---- the text against the recordings (issue 22, item 11) ----

def _markdown() -> list:
    nb = json.loads((REPO / "chapters" / f"{STEM}.ipynb").read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]


def test_comparison_note_only_when_gemm_rows_are_missing(ch10):
    """Is the closing table's note empty with the recorded chapter 07-08 rows, and without them does it say
    how to record them (not that the chapters are unwritten)?"""
    rows = ch10.comparison_rows()
    assert any(r["chapter"].startswith(("07", "08")) for r in rows), "the recording lost chapters 07-08"
    assert ch10.comparison_note(rows) == ""
    note = ch10.comparison_note([r for r in rows if not r["chapter"].startswith(("07", "08"))])
    assert "python -m benchmarks --only 07_staged_gemm,08_tensor_cores" in note and "not written" not in note
    nb = (REPO / "chapters" / f"{STEM}.ipynb").read_text(encoding="utf-8")
    assert "not written yet" not in nb and "ch10.comparison_note(rows)" in nb


def test_size_sweep_text_matches_the_recording():
    """Does section 4's reading of the size sweep quote the recorded n = 1024 rates and fractions of 4096
    (FP32 at 0.66, not 'half the GPU idles')?"""
    sweep = json.loads((REPO / "benchmarks" / "results" / "sweeps" / "10_cublas_sizes.json").read_text())
    rate = {(p["values"]["compute"], p["values"]["n"]): p["value"] for p in sweep["points"]}
    text = " ".join(next(c for c in _markdown() if c.startswith("Read off where each mode reaches")).split())
    assert "half the GPU idles" not in text
    assert f"FP32 already runs at {rate['fp32', 1024]:.4g} TFLOP/s" in text
    assert f"{rate['fp32', 1024] / rate['fp32', 4096]:.2f} of its {rate['fp32', 4096]:.4g} at 4096" in text
    tf32, bf16, fp16 = (f"{rate[c, 1024] / rate[c, 4096]:.2f}" for c in ("tf32", "bf16", "fp16"))
    assert f"reach only {tf32}, {bf16} and {fp16} of theirs" in text
    assert f"{rate['bf16', 1024]:.4g} TFLOP/s (BF16)" in text
    assert 2 * 1024 ** 3 / (rate["bf16", 1024] * 1e12) < 10e-6          # "under 10 microseconds"
