"""Chapter 15 (Triton next to CUDA): every Triton cell compiles for sm_80 and sm_90 into the machine code the
chapter says it does (CPU tier), the comparisons check every row and time them (GPU tier), and the chapter's
quoted figures agree with the recording."""
import pytest

import course

triton = pytest.importorskip("triton", reason="Triton is optional (the course's triton extra)")
from course.lessons import ch15  # noqa: E402

SIGS = {
    "vec_add": ({"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                {"BLOCK": 1024}, 4, 3),
    "softmax_rows": ({"x_ptr": "*fp32", "y_ptr": "*fp32", "cols": "i32", "BLOCK": "constexpr"}, {"BLOCK": 2048}, 8, 3),
    "layer_norm": ({"x_ptr": "*fp32", "w_ptr": "*fp32", "b_ptr": "*fp32", "y_ptr": "*fp32", "cols": "i32",
                    "eps": "fp32", "BLOCK": "constexpr"}, {"BLOCK": 4096}, 8, 3),
    "matmul_bf16": ({"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32", "m": "i32", "n": "i32", "k": "i32",
                     "BM": "constexpr", "BN": "constexpr", "BK": "constexpr", "GROUP_M": "constexpr"},
                    {"BM": 128, "BN": 256, "BK": 64, "GROUP_M": 8}, 8, 3),
    "attention": ({"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*fp32", "n": "i32",
                   "scale": "fp32", "CAUSAL": "constexpr", "D": "constexpr", "BM": "constexpr", "BN": "constexpr"},
                  {"CAUSAL": 1, "D": 128, "BM": 128, "BN": 64}, 8, 3),
}


def test_every_cell_is_a_kernel_of_its_name():
    ks = ch15.kernels()
    assert set(ks) == set(ch15.CELLS) == set(SIGS)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(SIGS))
def test_what_triton_generates(name, arch):
    """The chapter's claims about each kernel's machine code: tensor-core products (HMMA on sm_80, wgmma's HGMMA
    on sm_90) for the matmul and attention, 128-bit loads for the vector add, no local memory anywhere."""
    sig, cx, warps, stages = SIGS[name]
    g = ch15.generated(ch15.kernels()[name], sig, cx, arch=arch, num_warps=warps, num_stages=stages)
    ops = course.sass_opcodes(g["compiled"].sass(), modifiers=True)[g["compiled"].name]
    assert not any(o.startswith(("LDL", "STL")) for o in ops), f"{name} spills on {arch}"
    if name in ("matmul_bf16", "attention"):
        want = "HGMMA" if arch == "sm_90" else "HMMA"
        assert want in g["sass"], g["sass"]
        assert g["compiled"].shared > 48 << 10           # the pipelined tiles of A and B (K and V)
    if name == "vec_add":
        assert any(o.startswith("LDG.E.128") for o in ops), ops.most_common(8)


def test_matmul_configs_fit_hopper_shared_memory():
    for cfg in ch15.MATMUL_CONFIGS:
        stage = (cfg["BM"] + cfg["BN"]) * cfg["BK"] * 2
        assert stage * cfg["num_stages"] <= 227 << 10, cfg


def test_summary_and_plot_read_the_tables():
    rows = [{"name": "Triton x", "of_anchor": 0.9}, {"name": "CUDA y", "of_anchor": 0.8},
            {"name": "CUDA z", "of_anchor": 0.95}, {"name": "CuPy composite (library)", "of_anchor": 0.3},
            {"name": "device copy (same bytes)", "of_anchor": None}]
    s = ch15.summary({"softmax": rows})
    assert s == [{"problem": "softmax", "Triton": 0.9, "CUDA": 0.95, "library": 0.3}]
    import matplotlib
    matplotlib.use("Agg")
    ax = ch15.plot_summary(s)
    assert len(ax.patches) == 3


def test_lines_of_code_skip_blanks_and_comments():
    rows = ch15.lines_of_code({"vec add": ("vec_add", "// a comment\n\nint x;\n  // another\nx = 1;")})
    assert rows[0]["CUDA"] == 2 and 5 <= rows[0]["Triton"] <= 12


@pytest.mark.gpu
def test_comparisons_check_and_time_every_row():
    if not course.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    quiet = {"verbose": False, "progress": False}
    for table in (ch15.compare_vec_add(n=1 << 22, **quiet), ch15.compare_softmax(rows=1024, cols=1000, **quiet),
                  ch15.compare_layer_norm(rows=1024, cols=3000, **quiet)):
        assert all(r["rate"] and r["rate"] > 0 for r in table)
    if course.device_info().cc < (8, 0):
        return
    best, times = ch15.tune_matmul(size=1024, configs=ch15.MATMUL_CONFIGS[:2])
    assert best in ch15.MATMUL_CONFIGS[:2] and len(times) == 2
    t = ch15.compare_matmul(size=1024, config=best, **quiet)
    assert {r["name"] for r in t} == {"Triton matmul_bf16", "cuBLAS BF16 (FP32 out)"}
    for causal in (False, True):
        t = ch15.compare_attention(shape=(4, 1024, 64), causal=causal, **quiet)
        assert t[0]["rate"] > 0


@pytest.mark.gpu
def test_a_wrong_kernel_stops_the_comparison():
    """compare checks before it times: a Triton softmax that never divides by the sum must be refused."""
    if not course.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    text = course.triton.cell_source("15_triton", "softmax_rows").replace("e / tl.sum(e, axis=0)", "e")
    bad = course.triton.kernels_from_source(text, "bad softmax")["softmax_rows"]
    with pytest.raises(course.CheckError, match="is wrong"):
        ch15.compare_softmax(rows=256, cols=2048, k=bad, verbose=False, progress=False)


def test_quotes_match_the_h200_recordings():
    """Section 6's figures are the benchmark suite's H200 rows (benchmarks/rows/15_triton.py)."""
    from repo_helpers import check_quotes, recorded_rows
    rows, _ = recorded_rows("15_triton", gpu="nvidia-h200")

    def r(name, key="ratio"):
        return rows[name][key]
    add, sm, ln = "(vector add, 2^26 floats)", "(row softmax, 32768 x 2048)", "(layer norm, 16384 x 4096)"
    mm, full, causal = "(BF16 matmul 4096^3)", "(attention 64 x 4096 x 128, full)", "(attention 64 x 4096 x 128, causal)"
    configs = {n: v["value"] for n, v in rows.items() if n.startswith("Triton matmul_bf16 config")}
    best = max(configs.values())
    check_quotes("15_triton", [
        ("Triton's 8-line kernel moved 4158 GB/s, 1.00 x the device copy", [8, r(f"Triton vec_add {add}", "value"),
                                                                          r(f"Triton vec_add {add}")]),
        ("as chapter 06's\n  float4 kernel did (1.03)".replace("\n  ", " "), [6, 4, r(f"CUDA vec_add4 (chapter 06) {add}")]),
        ("CuPy's generic `x + y` reached 0.60 of it", [r(f"CuPy x + y (library) {add}")]),
        ("the fused Triton kernel ran at 0.97 of the copy", [r(f"Triton softmax_rows {sm}")]),
        ("reads each row twice, at 0.50, and CuPy's five kernels at 0.11",
         [r(f"CUDA softmax_online (chapter 14) {sm}"), r(f"CuPy composite (library) {sm}")]),
        ("Triton 0.95 of the copy; CuPy's composite, a dozen kernels each over the whole matrix, 0.06",
         [r(f"Triton layer_norm {ln}"), r(f"CuPy composite (library) {ln}")]),
        ("reached 722 TFLOP/s, 0.95 x cuBLAS", [r(f"Triton matmul_bf16 {mm}", "value"), r(f"Triton matmul_bf16 {mm}")]),
        ("`mma.sync` kernel 0.59", [r(f"CUDA mma_gemm (chapter 08) {mm}")]),
        ("(717 TFLOP/s, the\n  other five configurations 412 to 521)".replace("\n  ", " "),
         [best, sorted(configs.values())[0], sorted(configs.values())[-2]]),
        ("ran at 365 TFLOP/s, 1.05 x PyTorch's FlashAttention-2", [r(f"Triton attention {full}", "value"),
                                                                 r(f"Triton attention {full}"), 2]),
        ("and 1.18 x with the causal mask", [r(f"Triton attention {causal}")]),
        ("`flash_fwd` at 1.12 and 1.17", [r(f"CUDA flash_fwd (chapter 14) {full}"), r(f"CUDA flash_fwd (chapter 14) {causal}")]),
        ("cuDNN's attention ran at 1.8 x the Triton kernel", [r(f"torch PyTorch SDPA cuDNN {full}", "value")
                                                              / r(f"Triton attention {full}", "value")]),
        ("cuDNN backend ran at 665, which shows", [r(f"torch PyTorch SDPA cuDNN {full}", "value")]),
    ], source="benchmarks/results/nvidia-h200.json")
    tuned = "Triton matmul_bf16 config BM=128, BN=256, BK=64, GROUP_M=8, num_warps=8, num_stages=3 (4096^3)"
    assert configs[tuned] == best, "the text says 128 x 256 tiles on 8 warps with 3 stages came first"


# Without a GPU: the chapter's own cells in Triton's interpreter on NumPy arrays (course.triton.interpret)

def _interpreted_cell(name, fix=None):
    """The cell's kernel; with ``fix`` (old, new), its function's text edited and compiled anew."""
    fn = course.triton.lesson_kernels(ch15.CHAPTER, name)[name]
    if not fix:
        return fn
    assert fix[0] in fn.src, f"the {name} cell no longer says {fix[0]!r}"
    text = "import triton\nimport triton.language as tl\n\n\n@triton.jit\n" + fn.src.replace(*fix)
    return course.triton.kernels_from_source(text, name)[name]


def test_the_memory_bound_cells_run_in_the_interpreter():
    """Vector add (with its masked tail), softmax and layer norm give the right answers on NumPy arrays."""
    import numpy as np
    rng = np.random.default_rng(0)
    interpret = course.triton.interpret
    n = 3001
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, dtype=np.float32)
    interpret(_interpreted_cell("vec_add"), course.grid_for(n, 1024), x, y, out, n, BLOCK=1024)
    assert np.array_equal(out, x + y)
    rows, cols = 19, 700
    xs = rng.standard_normal((rows, cols), dtype=np.float32) + 3
    ys = np.full_like(xs, np.nan)
    interpret(_interpreted_cell("softmax_rows"), rows, xs, ys, cols, BLOCK=1024)
    e = np.exp(xs - xs.max(1, keepdims=True))
    np.testing.assert_allclose(ys, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    w, b = rng.standard_normal(cols, dtype=np.float32), rng.standard_normal(cols, dtype=np.float32)
    ys.fill(np.nan)
    interpret(_interpreted_cell("layer_norm"), rows, xs, w, b, ys, cols, 1e-5, BLOCK=1024)
    want = (xs - xs.mean(1, keepdims=True)) / np.sqrt(xs.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(ys, want, rtol=1e-4, atol=1e-4)


def test_a_wrong_softmax_is_wrong_in_the_interpreter_too():
    """The interpreter is a real check: a softmax that never divides by the sum does not sum to 1."""
    import numpy as np
    bad = _interpreted_cell("softmax_rows", ("e / tl.sum(e, axis=0)", "e"))
    x = np.random.default_rng(1).standard_normal((4, 100), dtype=np.float32)
    y = np.zeros_like(x)
    course.triton.interpret(bad, 4, x, y, 100, BLOCK=128)
    assert not np.allclose(y.sum(1), 1.0)


def test_the_matmul_cell_runs_in_the_interpreter_on_fp16():
    """The matmul cell (BF16 on the GPU) on FP16 arrays at a shape no tile divides: the grouped order and the
    masks are checked without a GPU."""
    import numpy as np
    rng = np.random.default_rng(2)
    m, n, k = 70, 45, 40
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)
    c = np.full((m, n), np.nan, dtype=np.float32)
    course.triton.interpret(_interpreted_cell("matmul_bf16"), 3 * 2, a, b, c, m, n, k, BM=32, BN=32, BK=16,
                            GROUP_M=2)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("causal", [0, 1])
def test_the_attention_cell_runs_in_the_interpreter_on_fp16(causal):
    """Attention in FP16 with P cast to V's type (on sm_90 the same SASS as the cell's BF16 cast)."""
    import math

    import numpy as np
    att = _interpreted_cell("attention", ("p.to(tl.bfloat16)", "p.to(v.dtype)"))
    rng = np.random.default_rng(3)
    h, n, d = 2, 100, 64
    q, k, v = (rng.standard_normal((h, n, d)).astype(np.float16) for _ in range(3))
    o = np.full((h, n, d), np.nan, dtype=np.float32)
    course.triton.interpret(att, (math.ceil(n / 32), h), q, k, v, o, n, 1 / math.sqrt(d), CAUSAL=causal, D=d,
                            BM=32, BN=32)
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) / math.sqrt(d)
    if causal:
        s[:, np.triu(np.ones((n, n), dtype=bool), 1)] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(o, p / p.sum(-1, keepdims=True) @ v.astype(np.float64), atol=2e-3)
