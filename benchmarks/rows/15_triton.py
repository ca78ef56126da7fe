"""Chapter 15 rows: each problem in Triton beside the course's CUDA kernel and the library, as the lesson's
``ch15.compare_*`` time them (every row checked first; the anchor timed in the same run): vector add, the fused
row softmax and layer norm against a device copy of the same bytes; the BF16 matmul at 4096^3, autotuned over
``ch15.MATMUL_CONFIGS``, against cuBLAS (BF16 in, FP32 out); the attention forward at 64 heads x 4096 x 128
against chapter 14's flash_fwd and PyTorch's attention where PyTorch is installed. The issue's goal: the Triton
matmul at least 0.80 x cuBLAS in the same run. Then the graded Triton references (solutions/15_triton) at their
exercises' speed sizes: softmax against the copy ceiling, matmul against cuBLAS. Needs Triton; the BF16 rows
need sm_80.
"""
from __future__ import annotations

from . import table_rows

CHAPTER = "15_triton"


def rows(ctx) -> list:
    import course
    ok, why = course.triton.available()
    if not ok:
        raise RuntimeError(why)
    from course.lessons import ch15
    quiet = {"verbose": False, "progress": False}
    out = table_rows(ctx, ch15.compare_vec_add(**quiet), "vector add, 2^26 floats")
    out += table_rows(ctx, ch15.compare_softmax(**quiet), "row softmax, 32768 x 2048")
    out += table_rows(ctx, ch15.compare_layer_norm(**quiet), "layer norm, 16384 x 4096")
    if course.device_info().cc < (8, 0):
        return out
    best, times = ch15.tune_matmul()
    flops = course.gemm.gemm_flops(4096, 4096, 4096)
    for label, r in times.items():
        out.append(ctx.row(f"Triton matmul_bf16 config {label} (4096^3)", r.tflops(flops), "TFLOP/s",
                           note="autotuning: every config checked, then timed interleaved"))
    cuda = {}
    src = course.solution_source("08_tensor_cores", "mma_gemm.cu")
    if src:
        mma = course.compile(src).kernel("mma_gemm")

        def mma_gemm(a, b, c):
            (m, k), n = a.shape, b.shape[1]
            mma(-(-m // 256) * -(-n // 128), 256, a, b, c, m, n, k, shared_mem=98304)
        cuda["CUDA mma_gemm (chapter 08)"] = mma_gemm
    table = ch15.compare_matmul(config=best, cuda=cuda, **quiet)
    out += table_rows(ctx, table, "BF16 matmul 4096^3", targets={"Triton matmul_bf16": 0.80})
    from course.lessons import ch14
    for causal in (False, True):
        q, k, v, o = course.attention.inputs(64, 4096, 128)
        anchors = {f"torch {n}": f for n, f in ch14.torch_backends(q, k, v, causal).items()}
        table = ch15.compare_attention(causal=causal, cuda={"CUDA flash_fwd (chapter 14)": ch14.launcher("flash_fwd")},
                                       anchors=anchors, **quiet)
        out += table_rows(ctx, table, f"attention 64 x 4096 x 128, {'causal' if causal else 'full'}")
    return out + _graded_rows(ctx)


def _graded_rows(ctx) -> list:
    """The graded references at their exercises' speed sizes, launched with the grader's geometry."""
    import cupy
    import course
    from autograder import get_exercise
    out = []
    sm = get_exercise(CHAPTER, "softmax")
    k = course.triton.kernels_from_source(course.solution_source(CHAPTER, "softmax.py"), "softmax")["softmax"]
    rows_, cols = 30721, 2048
    x = 2 * cupy.random.default_rng(3).standard_normal((rows_, cols), dtype=cupy.float32)
    y = cupy.empty_like(x)
    cfg = sm.launch_defaults | {"BLOCK": 2048, "num_warps": 8}
    run = lambda: course.triton.launch(k, rows_, x, y, rows_, cols, BLOCK=cfg["BLOCK"], num_warps=cfg["num_warps"])  # noqa: E731
    run()
    course.assert_close(y[:64], cupy.exp(x[:64] - x[:64].max(1, keepdims=True)) /
                        cupy.exp(x[:64] - x[:64].max(1, keepdims=True)).sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    copy = course.ceilings().copy_gbps
    r = course.benchmark(run, name="graded softmax")
    out.append(ctx.row("graded softmax reference (Triton, 30721 x 2048)", r.gbps(8 * rows_ * cols), "GB/s",
                       anchor="copy ceiling", anchor_value=copy, note="x read once, y written once"))
    if course.device_info().cc < (8, 0):
        return out
    mm = get_exercise(CHAPTER, "matmul")
    k = course.triton.kernels_from_source(course.solution_source(CHAPTER, "matmul.py"), "matmul")["matmul"]
    a, b, c = course.gemm.make_inputs(4096, 4096, 4096, "bf16", seed=11, out="float32")
    d = dict(mm.launch_defaults)
    w, s = d.pop("num_warps"), d.pop("num_stages")
    grid = mm.launch({"m": 4096, "n": 4096, "k": 4096}, mm.launch_defaults)[0]
    bf = course.triton.BF16
    runs = {"graded": lambda: course.triton.launch(k, grid, bf(a), bf(b), c, 4096, 4096, 4096, num_warps=w,
                                                   num_stages=s, **d),
            "cublas": lambda: course.cublas.gemm(a, b, c, compute="bf16_f32")}
    runs["graded"]()
    t = ctx.interleaved(runs)
    flops = course.gemm.gemm_flops(4096, 4096, 4096)
    cub = t["cublas"].tflops(flops)
    out.append(ctx.row("graded matmul reference (Triton, 4096^3, FP32 out)", t["graded"].tflops(flops), "TFLOP/s",
                       anchor="cuBLAS BF16 (FP32 out), same run", anchor_value=cub,
                       note="128 x 128 x 64 tiles, 8 warps, 3 stages, grouped order"))
    return out
