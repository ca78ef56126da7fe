"""Matrix-product inputs and checks shared by the GEMM chapters (07 staged GEMM, 08 tensor cores, 10 cuBLAS).

C = A @ B with A (M x K), B (K x N) and C (M x N) row-major. 16-bit operands travel as their uint16 bit
patterns ("bf16", "fp16"), since CuPy has no bfloat16 dtype; `values64` reads them back exactly.
"""
from __future__ import annotations

__all__ = ["gemm_flops", "values64", "make_inputs", "check_gemm", "tile_multiple"]


def gemm_flops(m: int, n: int, k: int) -> int:
    """2 m n k: one multiply and one add per term."""
    return 2 * int(m) * int(n) * int(k)


_POISON16 = {"bf16": 0x7FC0, "fp16": 0x7E00}   # the NaN bit patterns of each 16-bit format


def values64(x, precision: str = "fp32"):
    """The float64 values of an operand: float32 as is, "bf16"/"fp16" given as their uint16 bits."""
    import cupy
    from course.cublas import from_bf16
    if precision == "bf16":
        return from_bf16(x).astype(cupy.float64)
    if precision == "fp16":
        return x.view(cupy.float16).astype(cupy.float64)
    return x.astype(cupy.float64)


def make_inputs(m: int, n: int, k: int, precision: str = "fp32", seed: int = 0, out: str | None = None):
    """CuPy A, B (standard normal, as float32 or as "bf16"/"fp16" bits in uint16) and C full of NaN.

    ``out`` is C's type: by default the inputs' own (what cuBLAS writes), ``"float32"`` for kernels that
    write their FP32 accumulators.
    """
    import cupy
    from course.cublas import to_bf16
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"`precision` should be 'fp32', 'bf16' or 'fp16'; got {precision!r}")
    rng = cupy.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=cupy.float32)
    b = rng.standard_normal((k, n), dtype=cupy.float32)
    if precision == "bf16":
        a, b = to_bf16(a), to_bf16(b)
    elif precision == "fp16":
        a, b = (x.astype(cupy.float16).view(cupy.uint16) for x in (a, b))
    if (out or precision) in ("fp32", "float32"):
        return a, b, cupy.full((m, n), cupy.nan, dtype=cupy.float32)
    return a, b, cupy.full((m, n), _POISON16[precision], dtype=cupy.uint16)


def check_gemm(c, a, b, precision: str = "fp32", name: str = "C"):
    """Compare ``c`` with the float64 product of the same inputs (``precision`` names their format).

    A float32 ``c`` holds FP32 sums of K products rounded along the way: within ``1e-4 x max|C|``. A
    16-bit ``c`` (uint16 bits of the inputs' format) adds one final rounding to 8 or 11 significant bits,
    so ``8e-3 x max|C|``. A wrong index or a missing k-slice is off by O(max|C|) and fails either way.
    """
    import cupy
    import course
    ref = values64(a, precision) @ values64(b, precision)
    if c.dtype == cupy.uint16:
        got, rel = values64(c, precision), 8e-3
    else:
        got, rel = c.astype(cupy.float64), 1e-4
    scale = max(float(cupy.abs(ref).max()), 1e-30)
    return course.check(got, ref, rtol=0, atol=rel * scale, name=name)


def tile_multiple(a, b, c, bm: int, bn: int, bk: int) -> bool:
    """May C = A @ B into ``c`` take a kernel without bounds tests: M, N and K multiples of the block tile
    (``bm`` x ``bn``) and of its K slice ``bk``, and all three matrices starting on 16-byte boundaries (float4
    loads and stores)? Arrays are CuPy's, or NumPy's for tests without a GPU."""
    (m, k), n = a.shape, b.shape[1]
    return m % bm == 0 and n % bn == 0 and k % bk == 0 and all(_address(x) % 16 == 0 for x in (a, b, c))


def _address(x) -> int:
    ptr = getattr(x.data, "ptr", None)   # a CuPy array's device address; a NumPy array's data is a buffer
    return x.__array_interface__["data"][0] if ptr is None else ptr
