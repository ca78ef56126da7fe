"""Chapter 10 helpers: column-major storage on the CPU, cuBLAS precisions, cuBLASLt's candidates, the closing table.

The CPU part (``colmajor_view``, ``colmajor_gemm``, ``rowmajor_gemm_by_swap``, ``swap_arguments``) shows
with NumPy alone why a row-major product can be asked of a column-major library by swapping the
operands. The GPU part (everything that takes CuPy arrays) is only called from ``%%gpu`` cells; CuPy,
cuBLAS and nvmath-python are imported inside the functions, so importing this module needs none of them.
The two-streams and fused-epilogue code is in the notebook itself, as is its kernel (``add_bias_relu``).
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "colmajor_view", "rowmajor_bytes_as_colmajor", "colmajor_gemm", "rowmajor_gemm_by_swap", "swap_arguments",
    "rel_error", "gemm", "operands", "precision_table", "size_runner", "size_sweep", "SIZES", "COMPUTES",
    "nvmath_missing", "lt_compute_types", "lt_algorithms", "COMPARED", "comparison_rows", "comparison_note",
    "NO_NVMATH",
]

# ---------------------------------------------------------------------------------------------
# CPU: column-major storage and the operand swap
# ---------------------------------------------------------------------------------------------


def colmajor_view(buf, rows: int, cols: int, ld: int | None = None) -> np.ndarray:
    """A flat buffer read as a column-major ``rows x cols`` matrix, element (r, c) at ``buf[r + c * ld]``.

    ``ld``, the leading dimension (distance between the starts of two columns), defaults to ``rows``.
    Returns a read-only ``(rows, cols)`` view: no copy, as a column-major library sees the bytes.
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

    ``A`` (m x k), ``B`` (k x n) and ``C`` (m x n) are column-major in flat buffers with leading dimensions
    ``lda``, ``ldb`` and ``ldc`` (default ``m``). Returns the flat buffer of ``C`` (``ldc * n`` elements).
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

    The library computes ``C^T = B^T @ A^T``, so its ``m`` is our ``n`` and its first operand is ``B``.
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


def gemm(a, b, out=None, *, compute: str = "fp32", handle=None):
    """Row-major ``a @ b`` through cublasGemmEx with the operand swap, on the current CuPy stream.

    ``compute`` is "fp32" (pedantic FP32), "tf32" (FP32 with TF32 tensor-core math), "bf16" or "fp16"
    (16-bit inputs, FP32 accumulation); `operands` makes inputs of the right type. ``handle`` is a cuBLAS
    handle of your own (``cublas.create()``, one per stream, say); by default ``course.cublas.gemm``'s.
    CuPy's gemmEx binding calls ``cublasSetStream(handle, current stream)`` before every call, so in Python
    a handle is bound to a stream by making that stream current (``with stream:``).
    """
    import course.cublas
    if handle is None or compute not in course.cublas.COMPUTE:     # the course's handle, or its error
        return course.cublas.gemm(a, b, out, compute=compute)
    in_t, in_dt, out_t, out_dt, ctype = course.cublas.COMPUTE[compute]
    contiguous = a.flags.c_contiguous and b.flags.c_contiguous
    if {a.dtype, b.dtype} != {np.dtype(in_dt)} or a.shape[1] != b.shape[0] or not contiguous:
        raise ValueError(f"`a` and `b` should be C-contiguous {np.dtype(in_dt).name} matrices with a.shape[1] == "
                         f"b.shape[0] for compute={compute!r}; got {a.dtype} {a.shape} and {b.dtype} {b.shape}")
    import cupy
    from cupy_backends.cuda.libs import cublas
    (m, k), n = a.shape, b.shape[1]
    out = cupy.empty((m, n), dtype=out_dt) if out is None else out
    one, zero = np.ones((), np.float32), np.zeros((), np.float32)
    cublas.gemmEx(handle, 0, 0, n, m, k, one.ctypes.data, b.data.ptr, in_t, n, a.data.ptr, in_t, k,
                  zero.ctypes.data, out.data.ptr, out_t, n, ctype, -1)    # out^T = b^T a^T, column-major
    return out


def operands(m: int, n: int, k: int, compute: str = "fp32", seed: int = 0):
    """``(a, b, a32, b32)``: row-major operands for `gemm` in the input type of ``compute`` (bf16 as uint16
    bits), and the float32 values in [-1, 1) they were rounded from."""
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
    """Speed and accuracy of one ``n^3`` product at each compute type: rows of ``compute``, ``median_ms``,
    ``tflops``, ``rel_error``.

    The error is measured against a float64 product of the *float32* inputs, so rounding the inputs
    to TF32, bf16 or fp16 counts as error (it is what a user of the faster modes pays).
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


def lt_algorithms(m: int = 4096, n: int = 4096, k: int = 4096, compute: str = "tf32", limit: int = 8) -> list:
    """The cuBLASLt heuristic's candidate algorithms for one product, each checked and timed on its own:
    rows of ``rank`` (the heuristic's order), ``algorithm_id``, ``tile``, ``stages``, ``split_k``,
    ``median_ms``, ``tflops``."""
    import course
    from nvmath.linalg.advanced import Matmul
    a, b = operands(m, n, k, "fp32", seed=2)[:2]
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


# ---------------------------------------------------------------------------------------------
# Recorded results (CPU)
# ---------------------------------------------------------------------------------------------

COMPARED = ("00_ceilings", "06_building_blocks", "07_staged_gemm", "08_tensor_cores", "10_cublas")


def comparison_rows(rows=None) -> list:
    """The closing table: cuBLAS ceilings and the course's own kernels, as recorded on every GPU.

    ``rows`` default to `course.results.rows_of` of the chapters in ``COMPARED``. Returns dicts of ``gpu``,
    ``chapter``, ``row``, ``value`` (with unit) and ``ratio`` to its anchor, where recorded.
    """
    from course.results import rows_of
    rows = rows_of(COMPARED) if rows is None else rows
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


def comparison_note(rows) -> str:
    """What to print under the closing table when it lacks the hand-written GEMMs (chapters 07 and 08), else "".

    The kernels exist; a missing row means the recordings here were made without those chapters (or on
    another GPU), so the note says how to add them rather than that they do not exist.
    """
    if any(r["chapter"].startswith(("07", "08")) for r in rows):
        return ""
    return ("(No recording under benchmarks/results/ has rows of chapters 07-08, the hand-written GEMMs, yet: "
            "on a GPU, `python -m benchmarks --only 07_staged_gemm,08_tensor_cores` records them.)")
