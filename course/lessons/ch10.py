"""Chapter 10 helpers: column-major storage on the CPU, cuBLAS precisions, two streams, cuBLASLt.

The CPU part (``colmajor_view``, ``colmajor_gemm``, ``rowmajor_gemm_by_swap``, ``swap_arguments``) shows
with NumPy alone why a row-major product can be asked of a column-major library by swapping the
operands. The GPU part (everything that takes CuPy arrays) is only called from ``%%gpu`` cells; CuPy,
cuBLAS and nvmath-python are imported inside the functions, so importing this module needs none of them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from .._table import print_table  # noqa: F401  (re-exported: the notebooks call chNN.print_table)

__all__ = [
    "colmajor_view", "rowmajor_bytes_as_colmajor", "colmajor_gemm", "rowmajor_gemm_by_swap", "swap_arguments",
    "rel_error", "gemm", "operands", "precision_table", "print_table", "size_runner", "size_sweep",
    "SIZES", "COMPUTES", "concurrent_gemms", "nvmath_missing", "lt_compute_types", "lt_algorithms",
    "fused_vs_separate", "recorded_rows", "comparison_rows", "BIAS_RELU_SRC", "NO_NVMATH",
]

REPO = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# CPU: column-major storage and the operand swap
# ---------------------------------------------------------------------------------------------


def colmajor_view(buf, rows: int, cols: int, ld: int | None = None) -> np.ndarray:
    """Read a flat buffer as a column-major ``rows x cols`` matrix (element (r, c) at ``buf[r + c * ld]``).

    Parameters
    ----------
    buf : array_like
        One-dimensional buffer of at least ``ld * (cols - 1) + rows`` elements.
    rows, cols : int
        Shape of the matrix.
    ld : int, optional
        Leading dimension (distance between the starts of two columns); default ``rows``.

    Returns
    -------
    numpy.ndarray
        A ``(rows, cols)`` view (no copy) of the buffer.
    """
    buf = np.asarray(buf)
    ld = rows if ld is None else ld
    if buf.ndim != 1:
        raise ValueError("`buf` should be one-dimensional (a flat buffer)")
    if ld < rows:
        raise ValueError(f"`ld` should be >= rows ({rows}); got {ld}")
    if cols and buf.size < ld * (cols - 1) + rows:
        raise ValueError(f"`buf` holds {buf.size} elements; a {rows} x {cols} matrix with ld={ld} needs "
                         f"{ld * (cols - 1) + rows}")
    s = buf.itemsize
    return np.lib.stride_tricks.as_strided(buf, shape=(rows, cols), strides=(s, ld * s), writeable=False)


def rowmajor_bytes_as_colmajor(x: np.ndarray) -> np.ndarray:
    """The bytes of a row-major ``(M, N)`` matrix read by a column-major library: an ``N x M`` matrix.

    The result equals ``x.T``: that is the whole trick of the chapter.
    """
    x = np.ascontiguousarray(x)
    m, n = x.shape
    return colmajor_view(x.ravel(), n, m)


def colmajor_gemm(m: int, n: int, k: int, a_buf, lda: int, b_buf, ldb: int, ldc: int | None = None) -> np.ndarray:
    """A toy column-major BLAS: ``C = A @ B`` with no transposes, as cuBLAS's gemm sees its arguments.

    Parameters
    ----------
    m, n, k : int
        ``A`` is ``m x k``, ``B`` is ``k x n``, ``C`` is ``m x n``, all column-major.
    a_buf, b_buf : array_like
        Flat buffers holding ``A`` and ``B`` with leading dimensions ``lda`` and ``ldb``.
    ldc : int, optional
        Leading dimension of ``C``; default ``m``.

    Returns
    -------
    numpy.ndarray
        The flat buffer of ``C`` (``ldc * n`` elements), column-major.
    """
    ldc = m if ldc is None else ldc
    a = colmajor_view(a_buf, m, k, lda).astype(np.float64)
    b = colmajor_view(b_buf, k, n, ldb).astype(np.float64)
    c = np.zeros(ldc * n)
    colmajor_out = np.lib.stride_tricks.as_strided(c, shape=(m, n), strides=(8, ldc * 8))
    colmajor_out[...] = a @ b
    return c


def swap_arguments(m: int, n: int, k: int) -> dict:
    """The column-major gemm arguments that compute the row-major ``C (m x n) = A (m x k) @ B (k x n)``.

    Returns
    -------
    dict
        ``m, n, k`` as the library sees them, which operand goes first, and the leading dimensions:
        the library computes ``C^T = B^T @ A^T``, so its ``m`` is our ``n`` and its first operand is ``B``.
    """
    return {"m": n, "n": m, "k": k, "first": "B", "lda": n, "second": "A", "ldb": k, "ldc": n,
            "transa": "N", "transb": "N"}


def rowmajor_gemm_by_swap(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-major ``a @ b`` computed by the column-major ``colmajor_gemm`` with swapped operands.

    Nothing is transposed or copied: the row-major buffers are handed over as they are.
    """
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}")
    arg = swap_arguments(m, n, k)
    c = colmajor_gemm(arg["m"], arg["n"], arg["k"], b.ravel(), arg["lda"], a.ravel(), arg["ldb"], arg["ldc"])
    return c.reshape(m, n)      # the column-major n x m result, read row-major: m x n


def rel_error(c, ref) -> float:
    """Relative Frobenius-norm error ``||c - ref|| / ||ref||`` in float64 (NumPy or CuPy arrays)."""
    xp = np if isinstance(ref, np.ndarray) else __import__("cupy")
    c64, r64 = xp.asarray(c, dtype=xp.float64), xp.asarray(ref, dtype=xp.float64)
    den = float(xp.linalg.norm(r64))
    return float(xp.linalg.norm(c64 - r64)) / (den if den else 1.0)


# ---------------------------------------------------------------------------------------------
# GPU: cuBLAS at several precisions
# ---------------------------------------------------------------------------------------------

COMPUTES = ("fp32", "tf32", "bf16", "fp16")
SIZES = (256, 512, 1024, 2048, 4096, 8192)


def gemm(a, b, out=None, *, compute: str = "fp32"):
    """Row-major ``a @ b`` through ``course.cublas.gemm`` (cublasGemmEx, operand swap), on the current stream.

    Parameters
    ----------
    a, b : cupy.ndarray
        Row-major operands of the dtype the compute type needs (see `operands`).
    compute : {"fp32", "tf32", "bf16", "fp16"}
        Pedantic FP32, FP32 with TF32 tensor-core math, bf16 or fp16 inputs (FP32 accumulation).
    """
    from course import _cublas
    # CuPy's gemmEx binding points the handle at the current stream on every call, so the product
    # lands on the caller's stream; saving and restoring the handle's stream would restore one that
    # a finished benchmark may already have destroyed
    return _cublas.gemm(a, b, out, compute=compute)


def operands(m: int, n: int, k: int, compute: str = "fp32", seed: int = 0):
    """Random row-major operands for `gemm`, and the float32 originals they were rounded from.

    Returns
    -------
    tuple
        ``(a, b, a32, b32)``: ``a``, ``b`` in the input type of ``compute`` (bf16 as uint16 bits),
        ``a32``, ``b32`` the float32 values drawn from [-1, 1).
    """
    import cupy
    from course.cublas import to_bf16
    rng = cupy.random.default_rng(seed)
    a32 = rng.uniform(-1, 1, (m, k), dtype=cupy.float64).astype(cupy.float32)
    b32 = rng.uniform(-1, 1, (k, n), dtype=cupy.float64).astype(cupy.float32)
    if compute in ("fp32", "tf32"):
        return a32, b32, a32, b32
    if compute == "fp16":
        return a32.astype(cupy.float16), b32.astype(cupy.float16), a32, b32
    if compute == "bf16":
        return to_bf16(a32), to_bf16(b32), a32, b32
    raise ValueError(f"`compute` should be one of {', '.join(COMPUTES)}; got {compute!r}")


def _as_f32(c, compute):
    from course.cublas import from_bf16
    return from_bf16(c) if compute == "bf16" else c.astype("float32")


def precision_table(n: int = 4096, computes=COMPUTES, seed: int = 0) -> list:
    """Speed and accuracy of one ``n^3`` product at each compute type.

    The error is measured against a float64 product of the *float32* inputs, so rounding the inputs
    to TF32, bf16 or fp16 counts as error (it is what a user of the faster modes pays).

    Returns
    -------
    list of dict
        One row per compute type: ``compute``, ``median_ms``, ``tflops``, ``rel_error``.
    """
    import cupy
    import course
    rows = []
    a32, b32 = operands(n, n, n, "fp32", seed)[2:]
    ref = a32.astype(cupy.float64) @ b32.astype(cupy.float64)
    for compute in computes:
        a, b = operands(n, n, n, compute, seed)[:2]
        c = gemm(a, b, compute=compute)
        err = rel_error(_as_f32(c, compute), ref)
        t = course.benchmark(lambda: gemm(a, b, c, compute=compute), name=compute)   # noqa: B023
        rows.append({"compute": compute, "median_ms": t.median_ms, "tflops": t.tflops(2.0 * n ** 3),
                     "rel_error": err})
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


def size_runner():
    """``run(n, compute) -> TFLOP/s`` of one ``n^3`` cuBLAS product, for `course.widgets.sweep`."""
    def run(n, compute):
        import cupy
        import course
        a, b = operands(n, n, n, compute)[:2]
        c = gemm(a, b, compute=compute)
        t = course.benchmark(lambda: gemm(a, b, c, compute=compute), budget_s=1.0)
        a = b = c = None
        cupy.get_default_memory_pool().free_all_blocks()
        return t.tflops(2.0 * n ** 3)
    return run


def size_sweep(**kw):
    """The chapter's sweep: TFLOP/s over the matrix size (x axis) and the compute type (slider)."""
    import course.widgets
    return course.widgets.sweep(size_runner(), {"n": list(SIZES), "compute": list(COMPUTES)},
                                metric="TFLOP/s", name="10_cublas_sizes", logx=True,
                                title="cuBLAS n x n x n", **kw)


# ---------------------------------------------------------------------------------------------
# GPU: two handles on two streams
# ---------------------------------------------------------------------------------------------

def concurrent_gemms(n: int = 512, count: int = 48, streams: int = 2, reps: int = 10,
                     compute: str = "fp32") -> dict:
    """``count`` independent small GEMMs, all on one stream, then spread over ``streams`` streams.

    Each stream has its own cuBLAS handle bound to it with ``cublasSetStream`` (a handle's work goes to
    one stream; two host threads or two streams each want their own handle). Timed with events:
    the median of ``reps`` rounds after a warm-up.

    Returns
    -------
    dict
        ``serial_ms``, ``concurrent_ms``, ``speedup`` (serial / concurrent), ``max_abs_err`` of the
        concurrent results against CuPy, and ``spans`` [(lane, label, start_ms, end_ms)] of the last
        concurrent round, for `course.plots.timeline`.
    """
    if compute not in ("fp32", "tf32"):
        raise ValueError(f"`compute` should be 'fp32' or 'tf32' here; got {compute!r}")
    import cupy
    from cupy_backends.cuda.libs import cublas
    from course.cublas import COMPUTE
    in_t, _in_dt, out_t, _out_dt, ctype = COMPUTE[compute]
    rng = cupy.random.default_rng(1)
    a = [rng.random((n, n), dtype=cupy.float32) for _ in range(count)]
    b = [rng.random((n, n), dtype=cupy.float32) for _ in range(count)]
    c = [cupy.empty((n, n), dtype=cupy.float32) for _ in range(count)]
    al, be = np.array(1.0, np.float32), np.array(0.0, np.float32)
    ss = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]
    handles = []
    for s in ss:
        h = cublas.create()
        cublas.setStream(h, s.ptr)
        handles.append(h)

    def one(i, h):       # row-major c[i] = a[i] @ b[i]: column-major c^T = b^T a^T
        cublas.gemmEx(h, 0, 0, n, n, n, al.ctypes.data, b[i].data.ptr, in_t, n, a[i].data.ptr, in_t, n,
                      be.ctypes.data, c[i].data.ptr, out_t, n, ctype, -1)

    def round_(k, record=False):
        used = ss[:k]
        start = cupy.cuda.Event()
        start.record(used[0])
        for s in used[1:]:
            s.wait_event(start)
        marks = []
        for i in range(count):
            j = i % k
            e0 = cupy.cuda.Event() if record else None
            if record:
                e0.record(used[j])
            one(i, handles[j])
            if record:
                e1 = cupy.cuda.Event()
                e1.record(used[j])
                marks.append((j, i, e0, e1))
        ends = []
        for s in used:
            e = cupy.cuda.Event()
            e.record(s)
            ends.append(e)
        for e in ends:
            e.synchronize()
        total = max(cupy.cuda.get_elapsed_time(start, e) for e in ends)
        spans = [(f"stream {j}", "GEMM", cupy.cuda.get_elapsed_time(start, e0), cupy.cuda.get_elapsed_time(start, e1))
                 for j, _i, e0, e1 in marks]
        return total, spans

    try:
        for k in (1, streams):
            round_(k)                                   # warm-up
        serial = float(np.median([round_(1)[0] for _ in range(reps)]))
        conc = float(np.median([round_(streams)[0] for _ in range(reps)]))
        _t, spans = round_(streams, record=True)
        want = cupy.matmul(a[-1], b[-1])
        err = float(cupy.abs(c[-1] - want).max())
    finally:
        cupy.cuda.Device().synchronize()
        for h in handles:
            cublas.destroy(h)
    return {"serial_ms": serial, "concurrent_ms": conc, "speedup": serial / conc, "max_abs_err": err,
            "spans": spans}


# ---------------------------------------------------------------------------------------------
# GPU: cuBLASLt through nvmath-python
# ---------------------------------------------------------------------------------------------

NO_NVMATH = ("nvmath-python is not installed here (or does not import), so the cuBLASLt cells are skipped; "
             "`pip install nvmath-python` adds it.")


def nvmath_missing() -> str | None:
    """None when nvmath-python imports, else the one sentence the lesson prints instead of a traceback."""
    try:
        import nvmath.linalg.advanced  # noqa: F401
        del nvmath
    except Exception:
        return NO_NVMATH
    return None


def lt_compute_types() -> dict:
    """The chapter's compute names -> nvmath's ``ComputeType`` (cublasComputeType_t) values."""
    from nvmath.linalg import ComputeType as C
    return {"fp32": C.COMPUTE_32F_PEDANTIC, "tf32": C.COMPUTE_32F_FAST_TF32, "fp32 (default)": C.COMPUTE_32F}


def _lt_pair(m, n, k, seed=2):
    import cupy
    rng = cupy.random.default_rng(seed)
    return (rng.uniform(-1, 1, (m, k), dtype=cupy.float64).astype(cupy.float32),
            rng.uniform(-1, 1, (k, n), dtype=cupy.float64).astype(cupy.float32))


def lt_algorithms(m: int = 4096, n: int = 4096, k: int = 4096, compute: str = "tf32", limit: int = 8) -> list:
    """The cuBLASLt heuristic's candidate algorithms for one product, each timed on its own.

    Returns
    -------
    list of dict
        In the heuristic's order: ``rank``, ``algorithm_id``, ``tile``, ``stages``, ``split_k``,
        ``median_ms``, ``tflops``.
    """
    import course
    from nvmath.linalg.advanced import Matmul
    a, b = _lt_pair(m, n, k)
    rows = []
    with Matmul(a, b, options={"compute_type": lt_compute_types()[compute]}) as mm:
        algos = mm.plan(preferences={"limit": limit})
        ref = mm.execute()
        for rank, alg in enumerate(algos):
            out = mm.execute(algorithm=alg)
            if rel_error(out, ref) > 1e-2:
                raise RuntimeError(f"algorithm {rank} disagrees with the first one")
            t = course.benchmark(lambda: mm.execute(algorithm=alg), budget_s=1.0)   # noqa: B023

            def get(attr):
                try:
                    v = getattr(alg, attr)
                    return v.name if hasattr(v, "name") else v
                except Exception:
                    return None
            rows.append({"rank": rank, "algorithm_id": get("algorithm_id"), "tile": get("tile"),
                         "stages": get("stages"), "split_k": get("split_k"), "median_ms": t.median_ms,
                         "tflops": t.tflops(2.0 * m * n * k)})
    return rows


BIAS_RELU_SRC = r'''
// y[i][j] = max(0, y[i][j] + bias[j]) in place: the epilogue as a separate pass over a row-major m x n y.
// One element per thread on a 2-D grid: x indexes columns, so warps read along rows (coalesced).
extern "C" __global__ void add_bias_relu(float* __restrict__ y, const float* __restrict__ bias, int m, int n)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < m && j < n) {
        long long at = (long long)i * n + j;
        y[at] = fmaxf(y[at] + bias[j], 0.0f);
    }
}
'''.lstrip("\n")
"""The lesson's separate epilogue kernel (the chapter's `%%cuda` cell holds the same text)."""


def _bias_relu_launch(m, n):
    return (-(-n // 32), -(-m // 8)), (32, 8)


def fused_vs_separate(m: int = 8192, n: int = 8192, k: int = 1024, compute: str = "tf32", kernel=None) -> dict:
    """``y = relu(x @ w + bias)``: cuBLASLt's fused RELU_BIAS epilogue against matmul + a separate kernel.

    ``x`` is ``m x k`` and ``w`` ``k x n``, row-major; ``bias`` has ``n`` entries, one per column of ``y``.
    cuBLASLt adds the bias per row of its (column-major) result, so the product is planned as
    ``y^T = w^T @ x^T`` (the operand swap again): the transposed views are column-major, the result is
    column-major ``n x m``, and its transpose is the row-major ``y``.

    Parameters
    ----------
    kernel : course Kernel, optional
        The separate epilogue ``(y, bias, m, n)``; default `BIAS_RELU_SRC` compiled here.

    Returns
    -------
    dict
        ``fused_ms``, ``separate_ms``, ``matmul_ms`` (product alone), ``epilogue_ms`` (kernel alone),
        ``ratio`` = fused / separate (below 1: fused is faster), and ``rel_error`` of both against float64.
    """
    import cupy
    import course
    from nvmath.linalg.advanced import Matmul, MatmulEpilog
    if kernel is None:
        kernel = course.compile(BIAS_RELU_SRC).kernel("add_bias_relu")
    x, w = _lt_pair(m, n, k, seed=3)
    bias = cupy.random.default_rng(4).uniform(-1, 1, n, dtype=cupy.float64).astype(cupy.float32)
    ref = cupy.maximum(x.astype(cupy.float64) @ w.astype(cupy.float64) + bias.astype(cupy.float64), 0)
    opts = {"compute_type": lt_compute_types()[compute]}
    grid, block = _bias_relu_launch(m, n)
    with Matmul(w.T, x.T, options=opts) as fused, Matmul(w.T, x.T, options=opts) as plain:
        fused.plan(epilog=MatmulEpilog.RELU_BIAS, epilog_inputs={"bias": bias})
        plain.plan()

        def separate():
            yt = plain.execute()
            y = yt.T
            kernel(grid, block, y, bias, m, n)
            return y
        y_fused = fused.execute().T
        y_sep = separate()
        if not y_sep.flags.c_contiguous:
            raise RuntimeError("expected cuBLASLt's result to be column-major (its transpose row-major)")
        errs = {"fused": rel_error(y_fused, ref), "separate": rel_error(y_sep, ref)}
        del ref
        t = course.interleaved({"fused": lambda: fused.execute(), "separate": separate,
                                "matmul": lambda: plain.execute()})
        y0 = cupy.array(y_sep)
        t_epi = course.benchmark(lambda: kernel(grid, block, y0, bias, m, n))
    cupy.get_default_memory_pool().free_all_blocks()
    return {"fused_ms": t["fused"].median_ms, "separate_ms": t["separate"].median_ms,
            "matmul_ms": t["matmul"].median_ms, "epilogue_ms": t_epi.median_ms,
            "ratio": t["fused"].median_ms / t["separate"].median_ms, "rel_error": errs}


# ---------------------------------------------------------------------------------------------
# Recorded results (CPU)
# ---------------------------------------------------------------------------------------------

def recorded_rows(chapters=("00_ceilings", "06_building_blocks", "07_staged_gemm", "08_tensor_cores", "10_cublas"),
                  results_dir=None) -> list:
    """Rows of every ``benchmarks/results/*.json`` for ``chapters``, each with its ``gpu`` name added."""
    out = []
    for path in sorted(Path(results_dir or REPO / "benchmarks" / "results").glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        gpu = data.get("device", {}).get("name", path.stem)
        out += [dict(r, gpu=gpu) for r in data.get("rows", []) if r.get("chapter") in chapters]
    return out


def comparison_rows(rows=None) -> list:
    """The closing table: cuBLAS ceilings and the course's own kernels, as recorded.

    Returns
    -------
    list of dict
        ``gpu``, ``chapter``, ``row``, ``value`` (with unit) and ``ratio`` to its anchor, where recorded.
    """
    rows = recorded_rows() if rows is None else rows
    keep = ("cuBLAS", "TF32", "SGEMM", "BF16", "reduction", "reduce", "scan", "histogram", "cuBLASLt", "fused",
            "stage ", "mma_gemm", "mma.sync")
    table = []
    for r in rows:
        if not any(w.lower() in r["name"].lower() for w in keep):
            continue
        ratio = r.get("ratio")
        table.append({"gpu": r["gpu"], "chapter": r["chapter"], "row": r["name"],
                      "value": f"{r['value']:.4g} {r['unit']}",
                      "ratio": "" if ratio is None else f"{ratio:.3f}"})
    return table
