"""Row-major matrix products through cuBLAS at a chosen precision (FP32, TF32, FP16, BF16).

cuBLAS is column-major. A row-major M x K matrix is the same bytes as a column-major K x M matrix
(its transpose), so C = A @ B in row-major is computed as C^T = B^T @ A^T in column-major: swap the
operands, keep every "no transpose" flag, and pass N, M, K as the column-major m, n, k.
"""
from __future__ import annotations

import numpy as np

__all__ = ["gemm", "gemm_batched", "COMPUTE", "to_bf16", "from_bf16", "bf16_uniform", "bf16_product64", "handle"]

_CUDA_R_32F, _CUDA_R_16F, _CUDA_R_16BF = 0, 2, 14
_COMPUTE_32F, _COMPUTE_32F_PEDANTIC, _COMPUTE_32F_FAST_TF32 = 68, 69, 77
_GEMM_DEFAULT = -1

# name -> (input CUDA type, input dtype, output CUDA type, output dtype, compute type)
COMPUTE = {
    "fp32": (_CUDA_R_32F, np.float32, _CUDA_R_32F, np.float32, _COMPUTE_32F_PEDANTIC),
    "tf32": (_CUDA_R_32F, np.float32, _CUDA_R_32F, np.float32, _COMPUTE_32F_FAST_TF32),
    "fp16": (_CUDA_R_16F, np.float16, _CUDA_R_16F, np.float16, _COMPUTE_32F),
    "bf16": (_CUDA_R_16BF, np.uint16, _CUDA_R_16BF, np.uint16, _COMPUTE_32F),
    "bf16_f32": (_CUDA_R_16BF, np.uint16, _CUDA_R_32F, np.float32, _COMPUTE_32F),   # BF16 in, FP32 out
}


def to_bf16(x):
    """float32 array (NumPy or CuPy) -> bf16 bits as uint16, rounding to nearest even."""
    xp = _xp(x)
    u = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
    rounding = ((u >> 16) & 1) + 0x7FFF
    return ((u + rounding) >> 16).astype(xp.uint16)


def from_bf16(b):
    """bf16 bits (uint16) -> float32."""
    xp = _xp(b)
    return (b.astype(xp.uint32) << 16).view(xp.float32)


def bf16_uniform(rng, shape, dtype=np.uint16):
    """BF16 bits of uniform [-1, 1) values drawn by NumPy's ``rng``, rounded to nearest even: the generator of the
    graded BF16 exercises (a spec's ``gen`` takes ``(rng, shape, dtype)``; the dtype is always the bits')."""
    return to_bf16(rng.uniform(-1, 1, shape).astype(np.float32))


def bf16_product64(a, b, *, trans_b: bool = False):
    """a @ b (a @ b.T with ``trans_b``) of BF16 bits, computed in float64 from the exact BF16 values and returned
    as float32: the reference a BF16 GEMM accumulating in FP32 is checked against."""
    b64 = from_bf16(b).astype(np.float64)
    return (from_bf16(a).astype(np.float64) @ (b64.T if trans_b else b64)).astype(np.float32)


def _xp(a):
    if isinstance(a, np.ndarray):
        return np
    import cupy
    return cupy


_handles = {}


def handle():
    """(cublas module, this device's course handle). CuPy's gemmEx sets the handle's stream to the
    current stream on each call, so no stream is bound here."""
    import cupy
    from cupy_backends.cuda.libs import cublas
    dev = cupy.cuda.Device().id
    if dev not in _handles:
        # our own handle: CuPy's may carry a TF32 math mode chosen by CUPY_TF32 at its first matmul
        _handles[dev] = cublas.create()
    return cublas, _handles[dev]


def _operands(a, b, compute: str, ndim: int) -> tuple:
    """(input CUDA type, output CUDA type, output dtype, compute type) once ``a`` and ``b`` are checked: the dtype
    ``compute`` takes, C-contiguous, ``ndim`` dimensions (2: matrices, 3: batches of them)."""
    if compute not in COMPUTE:
        raise ValueError(f"`compute` should be one of {', '.join(COMPUTE)}; got {compute!r}")
    in_t, in_dt, out_t, out_dt, ctype = COMPUTE[compute]
    for nm, x in (("a", a), ("b", b)):
        if x.dtype != np.dtype(in_dt):
            raise TypeError(f"`{nm}` should be {np.dtype(in_dt).name} for compute={compute!r}; got {x.dtype}")
        if x.ndim != ndim or not x.flags.c_contiguous:
            what = "2-D matrix" if ndim == 2 else "3-D batch of matrices"
            raise ValueError(f"`{nm}` should be a C-contiguous {what}; got shape {x.shape}")
    return in_t, out_t, out_dt, ctype


def gemm(a, b, out=None, *, compute: str = "fp32", alpha: float = 1.0, beta: float = 0.0):
    """``out = alpha * a @ b + beta * out`` for row-major CuPy matrices, on the current stream.

    Parameters
    ----------
    a, b : cupy.ndarray
        Row-major ``(M, K)`` and ``(K, N)``; dtype float32 for "fp32"/"tf32", float16 for "fp16",
        uint16 bf16 bits for "bf16".
    compute : {"fp32", "tf32", "fp16", "bf16", "bf16_f32"}
        "fp32" is pedantic FP32 (no tensor cores); "tf32" rounds inputs to TF32 on tensor cores; "bf16_f32"
        takes BF16 inputs and writes an FP32 ``out`` (the graded GEMMs of chapter 13 write FP32).
    """
    import cupy
    in_t, out_t, out_dt, ctype = _operands(a, b, compute, 2)
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"inner dimensions differ: a is {a.shape}, b is {b.shape}")
    if out is None:
        out = cupy.zeros((m, n), dtype=out_dt)
    cublas, h = handle()
    al = np.array(alpha, dtype=np.float32)
    be = np.array(beta, dtype=np.float32)
    # column-major view: out^T (n x m) = b^T (n x k) @ a^T (k x m)
    cublas.gemmEx(h, 0, 0, n, m, k, al.ctypes.data, b.data.ptr, in_t, n, a.data.ptr, in_t, k,
                  be.ctypes.data, out.data.ptr, out_t, n, ctype, _GEMM_DEFAULT)
    return out


def gemm_batched(a, b, out=None, *, compute: str = "fp32", trans_b: bool = False, alpha: float = 1.0):
    """``out[i] = alpha * a[i] @ op(b[i])`` for every i of C-contiguous row-major batches, one cuBLAS call
    (cublasGemmStridedBatchedEx): the per-head products of naive attention (chapter 14).

    ``a`` is ``(batch, M, K)``; ``b`` is ``(batch, K, N)``, or ``(batch, N, K)`` with ``trans_b=True`` (S = Q K^T
    reads K as stored). Types as for `gemm`.
    """
    import cupy
    in_t, out_t, out_dt, ctype = _operands(a, b, compute, 3)
    (batch, m, k), (b_batch, r, c) = a.shape, b.shape
    n, k2 = (r, c) if trans_b else (c, r)
    if k != k2 or batch != b_batch:
        raise ValueError(f"shapes do not multiply: a is {a.shape}, b is {b.shape} (trans_b={trans_b})")
    if out is None:
        out = cupy.zeros((batch, m, n), dtype=out_dt)
    cublas, h = handle()
    al = np.array(alpha, dtype=np.float32)
    be = np.array(0.0, dtype=np.float32)
    # column-major: out^T (n x m) = op(b)^T (n x k) @ a^T (k x m); a K-major b (trans_b) is read transposed
    cublas.gemmStridedBatchedEx(h, 1 if trans_b else 0, 0, n, m, k, al.ctypes.data, b.data.ptr, in_t,
                                k if trans_b else n, n * k, a.data.ptr, in_t, k, m * k, be.ctypes.data,
                                out.data.ptr, out_t, n, m * n, batch, ctype, _GEMM_DEFAULT)
    return out
