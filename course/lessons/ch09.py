"""Chapter 09 (convolution case study): counts, inputs, a sampled check, the lesson's launches and the block sweep.

The chapter computes ``y[i] = sum_{j<G} x[i+j] * w[j]`` for ``i < F`` (a correlation, which is what
signal-processing and deep-learning code call a convolution), with ``x`` zero-padded to ``F + G - 1``
floats so no thread needs a bounds test inside the tap loop. The kernels live in the notebook's
``%%cuda`` cells (``conv_naive``, ``conv_cmem``, ``conv_reg``); what needs them here takes them compiled
or reads the cell with `course.lesson_cell`. The float64 reference is the grader's
(autograder/specs/09_convolution.py). Nothing here touches CUDA at import time.
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "CHAPTER", "F", "TAPS", "MAX_TAPS", "REG_OUTPUTS", "REG_BLOCK", "flops", "min_bytes", "intensity",
    "sample_check", "make_inputs", "Lesson", "blocks_sweep", "cupy_convolve",
]

CHAPTER = "09_convolution"
F = 1 << 23          # outputs
TAPS = 512           # filter taps (G)
MAX_TAPS = 4096      # conv_cmem's __constant__ c_w[MAX_TAPS]: 16 KiB of the 64 KiB constant space
REG_OUTPUTS = 16     # outputs per thread of conv_reg (its R)
REG_BLOCK = 256      # threads per block of conv_reg (its BLOCK, in __launch_bounds__)

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


def make_inputs(n: int = F, g: int = TAPS, seed: int = 0):
    """CuPy ``x`` (n + g - 1 floats, uniform in [-1, 1)), ``w`` (g taps) and ``y`` (n, NaN-filled)."""
    import cupy
    rng = cupy.random.default_rng(seed)
    x = rng.uniform(-1, 1, n + g - 1, dtype=cupy.float64).astype(cupy.float32)
    w = rng.uniform(-1, 1, g, dtype=cupy.float64).astype(cupy.float32)
    return x, w, cupy.full(n, cupy.nan, dtype=cupy.float32)


class Lesson:
    """The chapter's variants, compiled once, as launch functions ``f(x, w, y)`` for any n and g.

    The kernels are the notebook's (compiled ones passed in, or its cells compiled here); ``conv_reg``
    serves ``taps`` taps only (a compile-time constant: its cell is compiled with ``-DTAPS=taps``).
    The taps of the two ``__constant__`` kernels are copied in by each launch function (a device to
    device copy of at most 16 KiB, tiny next to the kernel) so every call is self-contained.
    """

    def __init__(self, taps: int = TAPS, *, naive=None, cmem=None, reg=None):
        from course import lesson_cell
        self.taps = taps
        self.naive = naive or lesson_cell(CHAPTER, "conv_naive").kernel()
        self.cmem = cmem or lesson_cell(CHAPTER, "conv_cmem").kernel()
        self.reg = reg or lesson_cell(CHAPTER, "conv_reg").kernel(options=(f"-DTAPS={taps}",))

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
            state["k"] = course.lesson_cell(CHAPTER, "conv_naive").kernel()
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
