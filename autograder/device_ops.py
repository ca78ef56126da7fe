"""The grader's own device passes: fresh inputs, masking an answer, counting wrong elements.

Each is one pass over the data with no temporaries, which matters when several gradings share a GPU:
the speed step makes a fresh input set and a masked expected output for every timed launch, and the
correctness step compares outputs of hundreds of MiB. Random bits come from a counter-based hash of a
seed passed as a kernel argument, so no generator state sits in device memory where a student kernel
could find it.

The counts are small grid-stride kernels (`_COUNTS`). `count_bad` applies exactly the rule of `course.check` (the same float64 operations, each rounded once:
no fused multiply-add), so a zero count is the host check's pass without the host pass; anything else
goes to the host check, which writes the message and has the final word.

Each also takes NumPy arrays (the CPU tier's fake device), computing the same values on the host: the
GPU tests hold the kernels to these models bit for bit.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["fresh_gather", "xor_mask", "count_bad", "count_differ", "tolerances", "mix"]

_MIX = r"""
__device__ __forceinline__ unsigned long long grader_mix(unsigned long long z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
"""

# Counting kernels: a grid-stride loop, a warp sum, one atomic per warp. (CuPy's ReductionKernel gives a
# full reduction to one value a single block, some 40 ms for 50 MB on an H100.) The tolerance rule is
# course.check's: non-finite values must agree exactly, finite ones lie within atol + rtol * |expected|;
# __dadd_rn / __dmul_rn keep NVRTC from contracting into an FMA, which would round differently from NumPy.
_COUNTS = r"""
__device__ __forceinline__ unsigned long long grader_bad(double o, double r, double atol, double rtol) {
    if (!isfinite(o) || !isfinite(r)) {
        bool same = (isnan(o) && isnan(r)) || (isinf(o) && o == r);
        return same ? 0ull : 1ull;
    }
    double err = fabs(__dadd_rn(o, -r));
    double lim = __dadd_rn(atol, __dmul_rn(rtol, fabs(r)));
    return err <= lim ? 0ull : 1ull;
}

__device__ __forceinline__ void grader_add(unsigned long long c, unsigned long long* out) {
    for (int off = 16; off > 0; off >>= 1) c += __shfl_down_sync(0xffffffffu, c, off);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(out, c);
}

template <typename T>
__global__ void grader_bad_count(const T* o, const T* r, long long n, double atol, double rtol,
                                 unsigned long long* out) {
    unsigned long long c = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        c += grader_bad((double)o[i], (double)r[i], atol, rtol);
    grader_add(c, out);
}

template <typename U>
__global__ void grader_differ_count(const U* a, const U* b, long long n, unsigned long long* out) {
    unsigned long long c = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        c += a[i] != b[i];
    grader_add(c, out);
}

// the largest finite |r|, as its bits plus one (0: none finite); for non-negative doubles the bit
// patterns order like the values, so an integer atomicMax finds it
template <typename T>
__global__ void grader_finite_top(const T* r, long long n, unsigned long long* out) {
    unsigned long long m = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        double v = (double)r[i];
        if (isfinite(v)) {
            unsigned long long b = (unsigned long long)__double_as_longlong(fabs(v)) + 1ull;
            m = b > m ? b : m;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        unsigned long long o = __shfl_down_sync(0xffffffffu, m, off);
        m = o > m ? o : m;
    }
    if ((threadIdx.x & 31) == 0 && m) atomicMax(out, m);
}
"""
_COUNT_NAMES = ["grader_bad_count<float>", "grader_bad_count<double>", "grader_finite_top<float>",
                "grader_finite_top<double>"] + [f"grader_differ_count<{t}>" for t in (
                    "unsigned char", "unsigned short", "unsigned int", "unsigned long long")]
_CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.uint8): "unsigned char",
          np.dtype(np.uint16): "unsigned short", np.dtype(np.uint32): "unsigned int",
          np.dtype(np.uint64): "unsigned long long"}
_THREADS = 256
_MAX_BLOCKS = 2048

_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@functools.lru_cache(maxsize=None)
def _kernels():
    import cupy
    gather = cupy.ElementwiseKernel(
        "raw T a, raw T b, uint32 pool, uint64 seed", "T out",
        "unsigned long long h = grader_mix(seed + (unsigned long long)i * 0xD1B54A32D192ED03ull);"
        "unsigned int k = (unsigned int)(h >> 32) % pool;"
        "out = (h & 1ull) ? a[k] : b[k];",
        "grader_fresh_gather", preamble=_MIX)
    mask = cupy.ElementwiseKernel(
        "uint64 seed", "uint8 bits",
        "bits ^= (unsigned char)(grader_mix(seed + (unsigned long long)(i >> 3)) >> ((i & 7) * 8));",
        "grader_xor_mask", preamble=_MIX)
    module = cupy.RawModule(code=_COUNTS, options=("--std=c++17",), name_expressions=_COUNT_NAMES)
    return {"gather": gather, "mask": mask, "module": module}


def _count(name: str, dtype, n: int, *args) -> int:
    """Launch counting kernel ``name<dtype>`` over ``n`` elements; its one 64-bit result."""
    import cupy
    fn = _kernels()["module"].get_function(f"{name}<{_CTYPE[np.dtype(dtype)]}>")
    out = cupy.zeros(1, dtype=cupy.uint64)
    blocks = max(1, min(-(-n // _THREADS), _MAX_BLOCKS))
    fn((blocks,), (_THREADS,), (*args, out))
    return int(out.get()[0])


def _bits(a):
    return a.reshape(-1).view(_UINT[a.dtype.itemsize])


def _on_host(a) -> bool:
    return isinstance(a, np.ndarray)


_M64 = 2**64 - 1


def mix(z):
    """The kernels' hash (splitmix64's finaliser after its increment) on NumPy uint64, wrapping."""
    with np.errstate(over="ignore"):
        z = np.asarray(z, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def fresh_gather(dst, a, b, seed: int) -> None:
    """Fill ``dst`` (contiguous) with values picked from the pools ``a`` and ``b`` (same dtype, same size,
    flat) by a hash of ``seed`` and each element's index: every element is one the generator drew."""
    pool = int(a.size)
    if pool == 0 or dst.size == 0:
        return
    seed &= _M64
    if _on_host(dst):
        with np.errstate(over="ignore"):
            h = mix(np.uint64(seed) + np.arange(dst.size, dtype=np.uint64) * np.uint64(0xD1B54A32D192ED03))
        k = ((h >> np.uint64(32)) % np.uint64(pool)).astype(np.intp)
        _bits(dst)[...] = np.where((h & np.uint64(1)) == 1, _bits(a)[k], _bits(b)[k])
        return
    _kernels()["gather"](_bits(a), _bits(b), np.uint32(pool), np.uint64(seed), _bits(dst))


def xor_mask(buf, seed: int) -> None:
    """Flip ``buf``'s bytes (contiguous) with a mask made from ``seed``; twice restores them."""
    if not buf.size:
        return
    seed &= _M64
    if _on_host(buf):
        bits = buf.reshape(-1).view(np.uint8)
        i = np.arange(bits.size, dtype=np.uint64)
        with np.errstate(over="ignore"):
            h = mix(np.uint64(seed) + (i >> np.uint64(3)))
        bits ^= ((h >> ((i & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)).astype(np.uint8)
        return
    _kernels()["mask"](np.uint64(seed), buf.reshape(-1).view(np.uint8))


def count_differ(got, want) -> int:
    """Elements whose bits differ."""
    if got.size == 0:
        return 0
    if _on_host(got):
        return int(np.count_nonzero(_bits(got) != _bits(want)))
    a, b = _bits(got), _bits(want)
    return _count("grader_differ_count", a.dtype, a.size, a, b, np.int64(a.size))


def tolerances(want, rtol, atol, dtype) -> tuple:
    """(rtol, atol) as `course.check` resolves them for ``want``: None takes the dtype's default, the
    absolute one scaled by the largest finite |want| (1 where none is finite)."""
    import course
    d_rtol, d_scale = course.default_tolerance(dtype)
    rtol = d_rtol if rtol is None else rtol
    if atol is None:
        if _on_host(want):
            finite = np.abs(want[np.isfinite(want)])
            top = float(finite.max()) if finite.size else -1.0
        else:
            v = _count("grader_finite_top", want.dtype, want.size, want.reshape(-1), np.int64(want.size))
            top = float(np.array([v - 1], dtype=np.uint64).view(np.float64)[0]) if v else -1.0
        scale = top if top >= 0 else 1.0
        atol = d_scale * max(scale, 1e-30)
    return float(rtol), float(atol)


def count_bad(got, want, rtol, atol) -> int | None:
    """Elements of ``got`` that fail `course.check` against ``want`` with these tolerances (None as there).

    Integers and booleans must match exactly. None where the dtype has no device rule here (float16 and
    others): the caller checks on the host.
    """
    if got.size == 0:
        return 0
    kind, size = got.dtype.kind, got.dtype.itemsize
    if kind in "iub":
        return count_differ(got, want)
    if kind != "f" or size not in (4, 8):
        return None
    rtol, atol = tolerances(want, rtol, atol, got.dtype)
    if _on_host(got):
        o, r = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            nonfinite = ~np.isfinite(o) | ~np.isfinite(r)
            same = (np.isnan(o) & np.isnan(r)) | (np.isinf(o) & (o == r))
            close = np.abs(o - r) <= atol + rtol * np.abs(r)
        return int(np.count_nonzero(np.where(nonfinite, ~same, ~close)))
    return _count("grader_bad_count", got.dtype, got.size, got.reshape(-1), want.reshape(-1), np.int64(got.size),
                  np.float64(atol), np.float64(rtol))
