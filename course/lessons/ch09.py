"""Chapter 09 (convolution case study): the lesson's kernels, their launches, checks and the block sweep.

The chapter computes ``y[i] = sum_{j<G} x[i+j] * w[j]`` for ``i < F`` (a correlation, which is what
signal-processing and deep-learning code call a convolution), with ``x`` zero-padded to ``F + G - 1``
floats so no thread needs a bounds test inside the tap loop. The kernel sources below are the text of
the notebook's ``%%cuda`` cells (a test keeps them equal). Nothing here touches CUDA at import time.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "F", "TAPS", "MAX_TAPS", "NAIVE_SRC", "CONST_SRC", "REG_SRC", "SLOW_BLOCKED_SRC", "REG_OUTPUTS", "REG_BLOCK",
    "flops", "min_bytes", "intensity", "correlate64", "sample_check", "emulate_blocked", "make_inputs",
    "Lesson", "blocks_sweep", "cupy_convolve",
]

F = 1 << 23          # outputs
TAPS = 512           # filter taps (G)
MAX_TAPS = 4096      # the __constant__ array of CONST_SRC: 16 KiB of the 64 KiB constant space
REG_OUTPUTS = 16     # outputs per thread in REG_SRC (its R)
REG_BLOCK = 256      # threads per block in REG_SRC (its __launch_bounds__)

NAIVE_SRC = r'''
// One output per loop trip; grid-stride, so the same kernel runs as one thread, one block or the GPU.
extern "C" __global__ void conv_naive(const float* x, const float* w, float* y, int n, int g)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < g; ++j)
            acc += x[i + j] * w[j];      // x is padded to n + g - 1: no test needed
        y[i] = acc;
    }
}
'''.strip("\n")

CONST_SRC = r'''
// The taps in __constant__ memory: every lane reads c_w[j] at the same j, one broadcast per warp.
#define MAX_TAPS 4096
__constant__ float c_w[MAX_TAPS];

extern "C" __global__ void conv_cmem(const float* __restrict__ x, float* __restrict__ y, int n, int g)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float acc = 0.0f;
    for (int j = 0; j < g; ++j)
        acc = fmaf(x[i + j], c_w[j], acc);
    y[i] = acc;
}
'''.strip("\n")

REG_SRC = r'''
// R consecutive outputs per thread; the R x values they need at tap j sit in registers a[0..R-1]
// and slide by one per tap, so each tap costs one load of x, one of w, and R FMAs.
#ifndef TAPS
#define TAPS 512            // compile-time tap count: the loops unroll and a[] stays in registers
#endif
#ifndef R
#define R 16
#endif
#define BLOCK 256
__constant__ float c_taps[TAPS];

extern "C" __global__ void __launch_bounds__(BLOCK)
conv_reg(const float* __restrict__ x, float* __restrict__ y, int n)
{
    const int i0 = (blockIdx.x * BLOCK + threadIdx.x) * R;
    if (i0 >= n) return;
    if (i0 + R > n) {                         // the last thread: fewer than R outputs, plain loops
        for (int i = i0; i < n; ++i) {
            float acc = 0.0f;
            for (int j = 0; j < TAPS; ++j) acc = fmaf(x[i + j], c_taps[j], acc);
            y[i] = acc;
        }
        return;
    }
    float a[R], acc[R];
    #pragma unroll
    for (int r = 0; r < R; ++r) { a[r] = x[i0 + r]; acc[r] = 0.0f; }
    for (int j0 = 0; j0 < TAPS; j0 += R) {
        #pragma unroll
        for (int k = 0; k < R; ++k) {         // R taps per trip: after unrolling, the slide is renaming
            const float wj = c_taps[j0 + k];
            #pragma unroll
            for (int r = 0; r < R; ++r) acc[r] = fmaf(a[r], wj, acc[r]);    // a[r] = x[i0 + r + j]
            #pragma unroll
            for (int r = 0; r + 1 < R; ++r) a[r] = a[r + 1];
            if (j0 + k + 1 < TAPS) a[R - 1] = x[i0 + R + j0 + k];            // next tap's newest value
        }
    }
    #pragma unroll
    for (int r = 0; r < R; ++r) y[i0 + r] = acc[r];
}
'''.strip("\n")


SLOW_BLOCKED_SRC = r"""
// Correct but slow, in the grader's geometry for conv_blocked (blocks of 128 threads, 2,048 outputs each):
// each thread takes outputs out0 + t, out0 + t + 128, ... one at a time, one load of x and of w per FMA.
extern "C" __global__ void conv_blocked_slow(const float* __restrict__ x, const float* __restrict__ w,
                                             float* __restrict__ y, int n)
{
    const int out0 = blockIdx.x * 2048;
    const int end = min(out0 + 2048, n);
    for (int i = out0 + threadIdx.x; i < end; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < 512; ++j)
            acc = fmaf(x[i + j], w[j], acc);
        y[i] = acc;
    }
}
""".strip("\n")
"""The exercise notebook's starting point for conv_blocked: correct, one output per loop trip."""

# --- counting (CPU) ------------------------------------------------------------------------------

def flops(n: int = F, g: int = TAPS) -> int:
    """Floating-point operations of the convolution: one multiply and one add per output and tap."""
    return 2 * int(n) * int(g)


def min_bytes(n: int = F, g: int = TAPS) -> int:
    """Bytes a perfect kernel moves to and from DRAM: x and w read once, y written once (float32)."""
    return 4 * ((int(n) + int(g) - 1) + int(g) + int(n))


def intensity(n: int = F, g: int = TAPS) -> float:
    """Arithmetic intensity in FLOP per byte of compulsory DRAM traffic (about g / 4 for large n)."""
    return flops(n, g) / min_bytes(n, g)


def correlate64(x, w, n: int) -> np.ndarray:
    """``y[i] = sum_j x[i+j] * w[j]`` for ``i < n`` in float64 (direct when cheap, else by FFT).

    Parameters
    ----------
    x : array_like
        At least ``n + len(w) - 1`` values.
    w : array_like
        The taps.
    n : int
        Outputs wanted.

    Returns
    -------
    ndarray of float64, shape (n,)
        ``np.correlate(x, w, "valid")``, which is ``np.convolve(x, w[::-1], "valid")``.
    """
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    g = w.size
    if x.size < n + g - 1:
        raise ValueError(f"`x` should hold n + g - 1 = {n + g - 1} values; got {x.size}")
    if n * g <= 20_000_000:
        return np.correlate(x[:n + g - 1], w, mode="valid")
    size = 1 << int(np.ceil(np.log2(n + 2 * g)))
    full = np.fft.irfft(np.fft.rfft(x[:n + g - 1], size) * np.fft.rfft(w[::-1], size), size)
    return full[g - 1:g - 1 + n]


def sample_check(y, x, w, *, samples: int = 4096, rtol: float = 1e-4, seed: int = 0, name: str = "y"):
    """Compare ``y`` with a float64 reference on a random sample of outputs (always the first and last).

    Parameters
    ----------
    y, x, w : arrays (NumPy or CuPy)
        Output, padded input and taps.
    samples : int
        Outputs checked; the full reference of 2^23 outputs x 512 taps would take a minute in NumPy.
    rtol : float
        Relative tolerance; the absolute one is ``1e-5 x`` the largest sampled output magnitude.

    Returns
    -------
    course.CheckResult
        Truthy when every sampled output is close.
    """
    import course
    host = [a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a) for a in (y, x, w)]
    yh, xh, wh = host
    n, g = yh.size, wh.size
    if samples >= n:
        idx = np.arange(n)
    else:
        idx = np.unique(np.concatenate([[0, n - 1], np.random.default_rng(seed).integers(0, n, samples)]))
    w64 = wh.astype(np.float64)
    want = np.concatenate([xh[c[:, None] + np.arange(g)[None, :]].astype(np.float64) @ w64
                           for c in np.array_split(idx, max(1, idx.size * g // (1 << 22)))])
    atol = 1e-5 * max(float(np.abs(want).max()), 1e-30)
    return course.check(yh[idx], want.astype(np.float32), rtol=rtol, atol=atol, name=name)


def emulate_blocked(x, w, n: int, *, block: int = 128, r: int = 16, pad: int = 4) -> np.ndarray:
    """NumPy replay of solutions/09_convolution/conv_blocked.cu's indexing, block by block.

    Stages each block's window in the padded segment layout (segments of ``r`` floats, ``pad`` floats
    apart), then has every thread slide its ``2 r`` register window exactly as the kernel does. It is
    for checking the index arithmetic on a CPU, not for speed.

    Returns
    -------
    ndarray of float32, shape (n,)
    """
    x = np.asarray(x, np.float32)
    w = np.asarray(w, np.float32)
    taps = w.size
    assert taps % r == 0
    seg_len, nseg = r + pad, block + taps // r
    y = np.full(n, np.nan, np.float32)
    t = np.arange(block)
    for b in range(-(-n // (block * r))):
        out0 = b * block * r
        win = np.zeros(nseg * r, np.float32)
        avail = x[out0:out0 + nseg * r]
        win[:avail.size] = avail                                  # past the end of x: zeros
        xs = np.zeros(nseg * seg_len, np.float32)
        for s in range(nseg):
            xs[s * seg_len:s * seg_len + r] = win[s * r:(s + 1) * r]
        acc = np.zeros((block, r), np.float32)
        a = np.stack([xs[t * seg_len + m] for m in range(r)], axis=1)
        for j0 in range(0, taps, r):
            nxt = np.stack([xs[(t + j0 // r + 1) * seg_len + m] for m in range(r)], axis=1)
            a2 = np.concatenate([a, nxt], axis=1)
            for k in range(r):
                acc = (acc + a2[:, k:k + r] * w[j0 + k]).astype(np.float32)
            a = nxt
        o = (out0 + t[:, None] * r + np.arange(r)[None, :]).ravel()
        keep = o < n
        y[o[keep]] = acc.ravel()[keep]
    return y


def make_inputs(n: int = F, g: int = TAPS, seed: int = 0):
    """CuPy ``x`` (n + g - 1 floats, uniform in [-1, 1)), ``w`` (g taps) and ``y`` (n, NaN-filled)."""
    import cupy
    rng = cupy.random.default_rng(seed)
    x = rng.uniform(-1, 1, n + g - 1, dtype=cupy.float64).astype(cupy.float32)
    w = rng.uniform(-1, 1, g, dtype=cupy.float64).astype(cupy.float32)
    return x, w, cupy.full(n, cupy.nan, dtype=cupy.float32)


class Lesson:
    """The chapter's variants, compiled once, as launch functions ``f(x, w, y)`` for any n and g.

    ``conv_reg`` is compiled for ``TAPS`` taps only (its tap count is a compile-time constant).
    The taps of the two ``__constant__`` kernels are copied in by each launch function (a device to
    device copy of at most 16 KiB, tiny next to the kernel) so every call is self-contained.
    """

    def __init__(self, taps: int = TAPS):
        import course
        self.taps = taps
        self.naive = course.compile(NAIVE_SRC).kernel("conv_naive")
        self.cmem = course.compile(CONST_SRC).kernel("conv_cmem")
        self.reg = course.compile(REG_SRC, options=(f"-DTAPS={taps}",)).kernel("conv_reg")
        self.sm_count = course.device_info().sm_count

    @staticmethod
    def _set(kernel, symbol, w):
        kernel.module.get_global(symbol).copy_from_device(w.data, w.nbytes)

    def one_thread(self, x, w, y):
        self.naive(1, 1, x, w, y, y.size, w.size)

    def one_block(self, x, w, y, block: int = 1024):
        self.naive(1, block, x, w, y, y.size, w.size)

    def whole_gpu(self, x, w, y, block: int = 256):
        import course
        self.naive(course.grid_for(y.size, block), block, x, w, y, y.size, w.size)

    def constant(self, x, w, y, block: int = 256, set_taps: bool = True):
        import course
        if w.size > MAX_TAPS:
            raise ValueError(f"conv_cmem holds at most {MAX_TAPS} taps; got {w.size}")
        if set_taps:
            self._set(self.cmem, "c_w", w)
        self.cmem(course.grid_for(y.size, block), block, x, y, y.size, w.size)

    def registers(self, x, w, y, set_taps: bool = True):
        import course
        if w.size != self.taps:
            raise ValueError(f"conv_reg was compiled for {self.taps} taps; got {w.size}")
        if set_taps:
            self._set(self.reg, "c_taps", w)
        self.reg(course.grid_for(course.grid_for(y.size, REG_OUTPUTS), REG_BLOCK), REG_BLOCK, x, y, y.size)


def blocks_sweep(record: bool | None = None, *, per_block: int = 1 << 15, g: int = TAPS):
    """Time against block count: each block computes ``per_block`` outputs with ``conv_naive``.

    Each launch asks for more than half the SM's shared memory (unused), so one block fits per SM: with
    ``sm_count`` SMs the time stays flat up to ``sm_count`` blocks and steps up at each multiple of it
    (the last, partial wave is the tail). Recorded as benchmarks/results/sweeps/09_convolution_blocks.json.
    """
    from course.widgets import sweep
    import course
    sms = course.device_info().sm_count if course.gpu_available() else 132
    blocks = sorted({max(1, int(sms * f)) for f in np.arange(0.25, 4.01, 0.125)} | {sms, sms + 1, 2 * sms + 1})
    state = {}

    def run(blocks: int) -> float:
        import cupy
        if "k" not in state:
            info = course.device_info()
            state["k"] = course.compile(NAIVE_SRC).kernel("conv_naive")
            state["smem"] = min(info.smem_per_block_optin, info.smem_per_block_optin // 2 + 8192)
            state["x"], state["w"], _ = make_inputs(per_block * (4 * sms + 8), g, seed=9)
        n = blocks * per_block
        y = cupy.empty(n, dtype=cupy.float32)
        block = 1024
        # grid-stride with per_block / 1024 trips per thread: every block does the same work
        res = course.benchmark(lambda: state["k"](blocks, block, state["x"], state["w"], y, n, g,
                                                  shared_mem=state["smem"]), budget_s=0.5)
        return res.median_ms

    return sweep(run, {"blocks": blocks}, metric="ms per launch", name="09_convolution_blocks",
                 title="conv_naive, fixed work per block, one block per SM", record=record)


def cupy_convolve(x, w, n: int):
    """CuPy's own answers: ``cupy.correlate(x, w, 'valid')`` and ``cupyx.scipy.signal.correlate``.

    Returns
    -------
    dict
        name -> function of no arguments returning the n outputs (for timing and checking).
    """
    import cupy
    out = {"cupy.correlate (valid)": lambda: cupy.correlate(x, w, mode="valid")[:n]}
    try:
        import cupyx.scipy.signal as sig
        out["cupyx.scipy.signal.correlate (direct)"] = lambda: sig.correlate(x, w, mode="valid", method="direct")[:n]
        out["cupyx.scipy.signal.correlate (fft)"] = lambda: sig.correlate(x, w, mode="valid", method="fft")[:n]
    except ImportError:
        pass
    return out
