"""Chapter 10 rows: cuBLAS precisions, two streams, the graded epilogues (fused into the GEMM, and as a
separate pass), and cuBLASLt's fused epilogue.

TF32 and bf16 are anchored on this run's ceilings (SGEMM and bf16 from `course.measure_ceilings`); the
two-stream row on the same small GEMMs issued from one stream; the fused epilogue on cuBLASLt's own
product followed by the lesson's separate bias+ReLU kernel (time ratio, lower is better). Without
nvmath-python the cuBLASLt rows are left out with a note row instead of failing the chapter.

The two-stream and fused-epilogue measurements are the notebook's sections 5 and 6 (which show that code
to the student) in the suite's form; the lesson's kernel is its %%cuda cell (course.lesson_cell), the graded
references are solutions/10_cublas/*.cu.
"""
from __future__ import annotations

import numpy as np

STEM = "10_cublas"
N = 4096
BIAS_M, BIAS_N = 16384, 4099        # the graded bias_relu at a non-multiple-of-32 width (256 MiB)
FUSED = {"m": 4096, "n": 4096, "k": 1024}   # sgemm_bias_relu's speed size (autograder/specs/10_cublas.py)


def _precision_rows(ctx, ch10) -> list:
    rows = {r["compute"]: r for r in ch10.precision_table(N, computes=("fp32", "tf32", "bf16"))}
    fp32, tf32, bf16 = rows["fp32"], rows["tf32"], rows["bf16"]
    for r in rows.values():
        assert r["rel_error"] < 2e-2, f"{r['compute']} GEMM error {r['rel_error']:.2e}"
    return [ctx.row(f"cuBLAS TF32 tensor-op GEMM {N}^3", tf32["tflops"], "TFLOP/s",
                    anchor="cuBLAS pedantic FP32 SGEMM, same run", anchor_value=fp32["tflops"], target=2.0,
                    note=f"rel. error vs float64: TF32 {tf32['rel_error']:.2e}, FP32 {fp32['rel_error']:.2e}"),
            ctx.row(f"cuBLAS gemmEx bf16 inputs, FP32 accumulate, {N}^3", bf16["tflops"], "TFLOP/s",
                    anchor="ceilings.bf16_tflops", anchor_value=ctx.ceilings.bf16_tflops, target=0.9,
                    note=f"rel. error vs float64 of the float32 inputs: {bf16['rel_error']:.2e}")]


def _bias_grid(m, n):
    """The graded exercise's launch (autograder/specs/10_cublas.py), so the row times what is graded."""
    from autograder import get_exercise
    return get_exercise(STEM, "bias_relu").launch({"m": m, "n": n}, {})[0]


def _two_streams(n: int, count: int = 48, reps: int = 10, streams: int = 2) -> dict:
    """``count`` FP32 ``n^3`` products on one stream, then product i on stream ``i % streams``, each stream
    with its own cuBLAS handle (bound with cublasSetStream, and by making the stream current, since CuPy's
    binding re-binds the handle to the current stream on every call). Medians of ``reps`` rounds, event-timed
    from one start event to the last stream's end; ``max_abs_err`` of every product against CuPy."""
    import cupy
    from cupy_backends.cuda.libs import cublas
    from course.lessons import ch10
    a, b = zip(*(ch10.operands(n, n, n, "fp32", seed=i)[:2] for i in range(count)))
    c = [cupy.empty((n, n), cupy.float32) for _ in a]
    ss = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]
    handles = [cublas.create() for _ in ss]
    for h, s in zip(handles, ss):
        cublas.setStream(h, s.ptr)
    cupy.cuda.Device().synchronize()            # the operands were made on the default stream

    def round_(k):
        start = cupy.cuda.Event()
        start.record(ss[0])
        for s in ss[1:k]:
            s.wait_event(start)
        for i in range(count):
            with ss[i % k]:
                ch10.gemm(a[i], b[i], c[i], handle=handles[i % k])
        ends = [cupy.cuda.Event() for _ in range(k)]
        for e, s in zip(ends, ss):
            e.record(s)
        for e in ends:
            e.synchronize()
        return max(cupy.cuda.get_elapsed_time(start, e) for e in ends)

    try:
        for k in (1, streams):
            round_(k)                           # warm-up
        serial = float(np.median([round_(1) for _ in range(reps)]))
        conc = float(np.median([round_(streams) for _ in range(reps)]))
        err = float(cupy.abs(cupy.stack(c) - cupy.stack(a) @ cupy.stack(b)).max())
    finally:
        cupy.cuda.Device().synchronize()
        for h in handles:
            cublas.destroy(h)
    return {"serial_ms": serial, "concurrent_ms": conc, "max_abs_err": err}


def _stream_rows(ctx) -> list:
    out = []
    for n in (128, 256, 512):  # whether two streams help depends on how many blocks one product launches
        r = _two_streams(n)
        assert r["max_abs_err"] < 1e-3, f"concurrent GEMM wrong: {r['max_abs_err']}"
        out.append(ctx.row(f"48 GEMMs {n}^3 FP32, two handles on two streams", r["serial_ms"] / r["concurrent_ms"],
                           "x", anchor="the same GEMMs on one stream (speedup 1)", anchor_value=1.0,
                           note=f"one stream {r['serial_ms']:.3f} ms, two streams {r['concurrent_ms']:.3f} ms"))
    return out


def _bias_relu_rows(ctx, cupy, course) -> list:
    k = course.compile(course.solution_source(STEM, "bias_relu")).kernel("bias_relu")
    rng = cupy.random.default_rng(5)
    for m, n in ((1, 1), (1009, 37), (300, 4099)):
        c = rng.uniform(-1, 1, (m, n), dtype=cupy.float64).astype(cupy.float32)
        b = rng.uniform(-1, 1, n, dtype=cupy.float64).astype(cupy.float32)
        want = cupy.maximum(c + b, 0)
        k(_bias_grid(m, n), (32, 8), c, b, m, n)
        assert bool((c == want).all()), f"bias_relu wrong at {m} x {n}"
    c = rng.random((BIAS_M, BIAS_N), dtype=cupy.float32)
    b = rng.random(BIAS_N, dtype=cupy.float32)
    grid = _bias_grid(BIAS_M, BIAS_N)
    t = ctx.benchmark(lambda: k(grid, (32, 8), c, b, BIAS_M, BIAS_N), name="bias_relu")
    return [ctx.row(f"reference bias_relu (graded), {BIAS_M} x {BIAS_N}", t.gbps(8 * c.size + 4 * BIAS_N), "GB/s",
                    anchor="D2D copy (read+write), same run", anchor_value=ctx.copy_gbps, target=0.85,
                    note=f"median {t.median_ms:.3f} ms")]


def _fused_gemm_rows(ctx, cupy, course, ch10) -> list:
    """The graded fused-epilogue GEMM against cuBLAS SGEMM, and against its unfused form: chapter 07's
    reference GEMM followed by the graded bias_relu pass, all launched as the specs launch them."""
    from autograder import get_exercise
    ex = get_exercise(STEM, "sgemm_bias_relu")
    ex_gemm = get_exercise("07_staged_gemm", "sgemm_regtile")
    fused = course.compile(course.solution_source(STEM, ex.source_file)).kernel(ex.kernel)
    gemm = course.compile(course.solution_source(ex_gemm.chapter, ex_gemm.source_file)).kernel(ex_gemm.kernel)
    epi = course.compile(course.solution_source(STEM, "bias_relu")).kernel("bias_relu")
    rng = cupy.random.default_rng(6)

    def geometry(spec, a, b):   # the graded launch of each kernel, as the specs give it
        (m, k), n = a.shape, b.shape[1]
        grid, block, _ = spec.launch({"m": m, "n": n, "k": k}, dict(spec.launch_defaults))
        return grid, block, m, n, k

    def launch_fused(a, b, bias, c):
        grid, block, m, n, k = geometry(ex, a, b)
        fused(grid, block, a, b, bias, c, m, n, k)

    def separate(a, b, bias, c):
        grid, block, m, n, k = geometry(ex_gemm, a, b)
        gemm(grid, block, a, b, c, m, n, k)
        epi(_bias_grid(m, n), (32, 8), c, bias, m, n)

    for m, n, k in ((1000, 1037, 1009), (257, 130, 4099)):
        a, b, _ = course.gemm.make_inputs(m, n, k, "fp32", seed=7)
        bias = rng.uniform(-1, 1, n, dtype=cupy.float64).astype(cupy.float32)
        want = cupy.maximum(a.astype(cupy.float64) @ b.astype(cupy.float64) + bias, 0).astype(cupy.float32)
        for how in (launch_fused, separate):
            c = cupy.full((m, n), cupy.nan, dtype=cupy.float32)
            how(a, b, bias, c)
            # the grader's tolerance for these exercises: float32's (1e-4 relative, 1e-5 x max |c|)
            course.assert_close(c, want, rtol=1e-4, name=f"{how.__name__} at {m} x {n} x {k}")
    m, n, k = FUSED["m"], FUSED["n"], FUSED["k"]
    a, b, _ = course.gemm.make_inputs(m, n, k, "fp32", seed=8)
    bias = rng.uniform(-1, 1, n, dtype=cupy.float64).astype(cupy.float32)
    c = cupy.empty((m, n), cupy.float32)
    t = course.interleaved({"fused": lambda: launch_fused(a, b, bias, c), "separate": lambda: separate(a, b, bias, c),
                            "cublas": lambda: ch10.gemm(a, b, c, compute="fp32")})
    flops = 2 * m * n * k
    label = f"{m} x {n} x {k}"
    return [ctx.row(f"reference sgemm_bias_relu (graded, fused epilogue), {label}", t["fused"].tflops(flops), "TFLOP/s",
                    anchor="cuBLAS pedantic FP32 SGEMM (no epilogue), same run",
                    anchor_value=t["cublas"].tflops(flops), target=0.7,
                    note=f"median {t['fused'].median_ms:.3f} ms"),
            ctx.row(f"fused sgemm_bias_relu, {label}", t["fused"].median_ms, "ms",
                    anchor="chapter 07's sgemm_regtile + the graded bias_relu pass", anchor_value=t["separate"].median_ms,
                    target=1.0, higher_is_better=False,
                    note=f"the separate pass adds {t['separate'].median_ms - t['fused'].median_ms:.3f} ms")]


def _fused_epilogue(m: int = 8192, n: int = 8192, k: int = 1024, compute: str = "tf32") -> dict:
    """``y = relu(x @ w + bias)`` as the notebook's section 6 computes it: cuBLASLt planned on the views
    ``y^T = w^T x^T`` with the RELU_BIAS epilogue, against the same plan without it followed by the lesson's
    add_bias_relu. Returns the medians (``fused_ms``, ``separate_ms``, ``matmul_ms``, ``epilogue_ms``) and
    ``rel_error`` of both results against float64."""
    import cupy
    import course
    from nvmath.linalg.advanced import Matmul, MatmulEpilog
    from course.lessons import ch10
    kernel = course.lesson_cell(STEM, "add_bias_relu").kernel()
    x, w = ch10.operands(m, n, k, "fp32", seed=3)[:2]
    bias = cupy.random.default_rng(4).uniform(-1, 1, n, dtype=cupy.float64).astype(cupy.float32)
    ref = cupy.maximum(x.astype(cupy.float64) @ w.astype(cupy.float64) + bias.astype(cupy.float64), 0)
    opts = {"compute_type": ch10.lt_compute_types()[compute]}
    grid, block = (-(-n // 32), -(-m // 8)), (32, 8)
    with Matmul(w.T, x.T, options=opts) as fused, Matmul(w.T, x.T, options=opts) as plain:
        fused.plan(epilog=MatmulEpilog.RELU_BIAS, epilog_inputs={"bias": bias})
        plain.plan()

        def separate():
            y = plain.execute().T
            kernel(grid, block, y, bias, m, n)
            return y
        y_sep = separate()
        assert y_sep.flags.c_contiguous, "expected cuBLASLt's result column-major (its transpose row-major)"
        errs = {"fused": ch10.rel_error(fused.execute().T, ref), "separate": ch10.rel_error(y_sep, ref)}
        del ref
        t = course.interleaved({"fused": fused.execute, "separate": separate, "matmul": plain.execute})
        t_epi = course.benchmark(lambda: kernel(grid, block, y_sep, bias, m, n))
    cupy.get_default_memory_pool().free_all_blocks()
    return {"fused_ms": t["fused"].median_ms, "separate_ms": t["separate"].median_ms,
            "matmul_ms": t["matmul"].median_ms, "epilogue_ms": t_epi.median_ms, "rel_error": errs}


def _lt_rows(ctx, ch10) -> list:
    missing = ch10.nvmath_missing()
    if missing:
        return [ctx.row("cuBLASLt rows skipped", 0.0, "", note=missing)]
    algos = ch10.lt_algorithms(N, N, N, compute="tf32", limit=8)
    best = min(algos, key=lambda r: r["median_ms"])
    f = _fused_epilogue()
    assert max(f["rel_error"].values()) < 2e-2, f"fused/separate error {f['rel_error']}"
    return [ctx.row(f"cuBLASLt heuristic's first algorithm, TF32 {N}^3", algos[0]["tflops"], "TFLOP/s",
                    anchor=f"fastest of the {len(algos)} candidates", anchor_value=best["tflops"], target=0.9,
                    note=f"fastest is rank {best['rank']} (algorithm id {best['algorithm_id']})"),
            ctx.row("cuBLASLt fused RELU_BIAS epilogue, 8192 x 8192 x 1024 TF32", f["fused_ms"], "ms",
                    anchor="matmul + separate bias+ReLU kernel", anchor_value=f["separate_ms"], target=1.0,
                    higher_is_better=False,
                    note=f"matmul alone {f['matmul_ms']:.3f} ms, epilogue kernel alone {f['epilogue_ms']:.3f} ms")]


def rows(ctx) -> list:
    import cupy
    import course
    from course.lessons import ch10
    out = []
    for section in (lambda: _precision_rows(ctx, ch10), lambda: _stream_rows(ctx),
                    lambda: _bias_relu_rows(ctx, cupy, course), lambda: _fused_gemm_rows(ctx, cupy, course, ch10),
                    lambda: _lt_rows(ctx, ch10)):
        out += section()
        cupy.get_default_memory_pool().free_all_blocks()
    return out
