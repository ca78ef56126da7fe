"""Chapter 08 (tensor cores): fragment layouts, ldmatrix and its swizzle, mma.sync, the reference's ablation.

The chapter's kernels are ``%%cuda`` cells of its notebook: ``mma_probe`` (one warp, one m16n8k16 MMA,
every lane's registers written out, so the layout pictures here are checked against the hardware),
``mma_simple`` (a first whole mma.sync GEMM; both fall back to FP16 m16n8k8 below sm_80) and ``mma_peak``.
The helpers take the kernels the notebook compiled, or read the cells with `course.lesson_cell`. The fast
kernel is the graded exercise; its reference, solutions/08_tensor_cores/mma_gemm.cu, is measured feature by
feature (the ablation, one `course.variants.compare` table) where the solutions folder is present.
"""
from __future__ import annotations

import numpy as np

import course
from ..access import bank_access
from ..gemm import check_gemm, gemm_flops, make_inputs, values64
from ..variants import Variant, compare

__all__ = [
    "SIZE", "CHAPTER", "fragment_map", "plot_fragment", "probe_layouts", "ldmatrix_access", "swizzle_table",
    "plot_swizzle", "round_bf16", "bf16_error_table", "mma_gemm_smem", "mma_gemm_launcher", "ABLATION",
    "ablation_variants", "compare_ablation", "mma_peak", "simple_gemm", "input_dtype",
]

SIZE = 4096
CHAPTER = "08_tensor_cores"


# --- fragment layouts ------------------------------------------------------------------------------

def fragment_map(operand: str) -> np.ndarray:
    """Who holds what in mma.m16n8k16 (PTX ISA, "Matrix fragments for mma.m16n8k16").

    Returns an int array shaped like the operand (A 16 x 16, B 16 x 8 as k x n, C 16 x 8) whose
    entries are ``lane * 8 + slot``: the lane, and the 16-bit half (A, B) or float (C) of its registers,
    counted as the probe kernel writes them out (A: 8 halves, B: 4 halves, C: 4 floats).
    """
    lanes = np.arange(32)
    g, t = lanes // 4, lanes % 4
    if operand == "A":
        out = np.full((16, 16), -1)
        for reg, (dr, dc) in enumerate(((0, 0), (8, 0), (0, 8), (8, 8))):
            for h in range(2):
                out[g + dr, 2 * t + h + dc] = lanes * 8 + 2 * reg + h
    elif operand == "B":
        out = np.full((16, 8), -1)
        for reg, dk in enumerate((0, 8)):
            for h in range(2):
                out[2 * t + h + dk, g] = lanes * 8 + 2 * reg + h
    elif operand == "C":
        out = np.full((16, 8), -1)
        for reg, (dr, h) in enumerate(((0, 0), (0, 1), (8, 0), (8, 1))):
            out[g + dr, 2 * t + h] = lanes * 8 + reg
    else:
        raise ValueError(f"`operand` should be 'A', 'B' or 'C'; got {operand!r}")
    return out


def plot_fragment(operand: str, ax=None, layout=None):
    """Draw an operand's elements colored by the lane that holds them, labelled lane.slot."""
    import matplotlib.pyplot as plt
    layout = fragment_map(operand) if layout is None else np.asarray(layout)
    rows, cols = layout.shape
    if ax is None:
        _fig, ax = plt.subplots(figsize=(cols * 0.55 + 1, rows * 0.38 + 1))
    ax.imshow(layout // 8, cmap="tab20", vmin=0, vmax=31, aspect="auto")
    for r in range(rows):
        for c in range(cols):
            ax.text(c, r, f"{layout[r, c] // 8}.{layout[r, c] % 8}", ha="center", va="center", fontsize=6)
    names = {"A": ("row m", "column k"), "B": ("row k", "column n"), "C": ("row m", "column n")}[operand]
    ax.set_ylabel(names[0])
    ax.set_xlabel(names[1])
    ax.set_title(f"m16n8k16 operand {operand}: lane.slot of each element")
    return ax


def input_dtype():
    """The 16-bit type the chapter's kernels take here: "bf16" from sm_80, "fp16" on sm_75."""
    return "bf16" if course.supports("bf16_mma") else "fp16"


def _to16(x, kind: str):
    import cupy
    return course.cublas.to_bf16(x) if kind == "bf16" else cupy.asarray(x, dtype=cupy.float16).view(cupy.uint16)


def probe_layouts(kernel=None) -> dict:
    """Run the probe (``kernel``: the notebook's compiled ``mma_probe``; by default its cell, compiled here)
    and read back, for A, B and C, which lane.slot holds each element.

    A and B are filled with their own element indices (exact in 16 bits); C is probed with A = the
    identity, so that C = B's 16 x 8 values, again element indices. Returns operand -> array shaped as
    in `fragment_map`, which it should equal.
    """
    import cupy
    kind = input_dtype()
    k = kernel or course.lesson_cell(CHAPTER, "mma_probe").kernel("mma_probe")
    idx_a = cupy.arange(256, dtype=cupy.float32).reshape(16, 16)
    idx_b = cupy.arange(128, dtype=cupy.float32).reshape(16, 8)
    a_out, b_out, c_out = cupy.zeros(256, cupy.uint16), cupy.zeros(128, cupy.uint16), cupy.zeros(128, cupy.float32)
    k(1, 32, _to16(idx_a, kind), _to16(idx_b, kind), a_out, b_out, c_out)
    found = {}
    # a_out holds 8 halves per lane and b_out 4: entry i is lane i // per, slot i % per
    for name, vals, shape, per in (("A", values64(a_out, kind), (16, 16), 8), ("B", values64(b_out, kind), (16, 8), 4)):
        lay = np.full(shape, -1)
        for i, v in enumerate(cupy.asnumpy(vals).astype(int)):
            lay.flat[v] = (i // per) * 8 + i % per
        found[name] = lay
    k(1, 32, _to16(cupy.eye(16, dtype=cupy.float32), kind), _to16(idx_b, kind), a_out, b_out, c_out)
    lay = np.full((16, 8), -1)
    for slot, v in enumerate(cupy.asnumpy(c_out).astype(int)):
        lay.flat[v] = (slot // 4) * 8 + slot % 4
    found["C"] = lay
    return found


# --- ldmatrix and the swizzle ---------------------------------------------------------------------

def ldmatrix_access(row_bytes: int, swizzle: bool, *, operand: str = "A", kstep: int = 0):
    """The bank picture of one ldmatrix.x4 of the reference kernel (`course.access.bank_access`).

    Each lane names a 16-byte row piece; a phase is 8 lanes (one 8 x 8 matrix). ``row_bytes`` is the
    shared tile's row: 64 for A with BK = 32, 256 for B with BN = 128. Swizzled, chunk c of row r is
    stored at c ^ ((r >> 1) & 3) (64-byte rows) or c ^ (r & 7) (rows of 128 bytes or more).
    """
    chunks = row_bytes // 16

    def index(lane):
        if operand == "A":      # rows 0-15, chunk 2*kstep (+1 for lanes 16-31)
            r, c = lane & 15, 2 * kstep + (lane >> 4)
        else:                   # .trans: rows k = 0-15 of chunk pair (lanes 16-31: the next n8 tile)
            r, c = lane & 15, lane >> 4
        return r * chunks + (c ^ (((r >> 1) & 3) if row_bytes == 64 else (r & 7)) if swizzle else c)
    return bank_access(index, elem_bytes=16)


def swizzle_table() -> list:
    """Conflict degree of the reference's ldmatrix loads with and without the XOR swizzle."""
    rows = []
    for label, rb, op in (("A tile, BK = 32 (64-byte rows)", 64, "A"), ("B tile, BN = 128 (256-byte rows)", 256, "B")):
        for sw in (False, True):
            acc = ldmatrix_access(rb, sw, operand=op)
            rows.append({"tile": label, "swizzle": "XOR" if sw else "none", "degree": acc.degree,
                         "wavefronts": acc.wavefronts, "summary": acc.summary()})
    return rows


def plot_swizzle(row_bytes: int = 64, rows: int = 8, ax=None):
    """Where each logical 16-byte chunk of the first ``rows`` rows lands, and the bank group it hits."""
    import matplotlib.pyplot as plt
    chunks = row_bytes // 16
    if ax is None:
        _fig, ax = plt.subplots(figsize=(chunks * 0.9 + 1.5, rows * 0.4 + 1))
    grid = np.zeros((rows, chunks), int)
    for r in range(rows):
        for c in range(chunks):
            p = c ^ (((r >> 1) & 3) if row_bytes == 64 else (r & 7))
            grid[r, p] = c
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, aspect="auto")
    for r in range(rows):
        for p in range(chunks):
            group = (r * row_bytes // 16 + p) % 8
            ax.text(p, r, f"c{grid[r, p]}\nb{4 * group}-{4 * group + 3}", ha="center", va="center", fontsize=6)
    ax.set_xlabel("physical 16-byte slot in the row")
    ax.set_ylabel("row")
    ax.set_title(f"XOR swizzle of {row_bytes}-byte rows: logical chunk c, banks b (color = logical chunk)")
    return ax


# --- BF16 accuracy --------------------------------------------------------------------------------

def round_bf16(x) -> np.ndarray:
    """float32 -> nearest bf16 (ties to even), returned as float32 (NumPy, no GPU)."""
    return course.cublas.from_bf16(course.cublas.to_bf16(np.asarray(x, np.float32)))


def bf16_error_table(ks=(64, 256, 1024, 4096), m: int = 64, n: int = 64, seed: int = 0) -> list:
    """Relative error of a BF16-input, FP32-accumulate product, measured two ways (NumPy only).

    Against the FP32 inputs' exact product, the error is the inputs' rounding (up to 2^-8 relative each:
    round to nearest with 8 significant bits); it stays near 2.5e-3 of the largest output, under 2^-8,
    whatever K, since the rounding errors of K products partly cancel just as the outputs themselves grow.
    Against the rounded inputs' exact product only the FP32 accumulation remains, thousands of times
    smaller. A test of a BF16 kernel must pick the reference it means and a tolerance to match.
    """
    rng = np.random.default_rng(seed)
    out = []
    for k in ks:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        ar, br = round_bf16(a), round_bf16(b)
        got = (ar @ br).astype(np.float32)           # what FP32 accumulation of the rounded inputs gives
        exact_rounded = ar.astype(np.float64) @ br.astype(np.float64)
        exact = a.astype(np.float64) @ b.astype(np.float64)
        scale = np.abs(exact).max()
        out.append({"K": k, "vs FP32 inputs": float(np.abs(got - exact).max() / scale),
                    "vs rounded inputs": float(np.abs(got - exact_rounded).max() / scale)})
    return out


# --- the reference kernel and its ablation --------------------------------------------------------

_DEFAULTS = dict(BM=256, BN=128, BK=32, WARPS_M=4, WARPS_N=2, STAGES=4, SWIZZLE=1, SMEM_EPILOGUE=1, OUT_BF16=1,
                 GROUP_M=8, FRAG_DB=1)

ABLATION = [     # (what changes, the -D macros of solutions/08_tensor_cores/mma_gemm.cu it changes)
    ("reference (everything on)", {}),
    ("fragments not double-buffered", {"FRAG_DB": 0}),
    ("blocks in row order (no grid swizzle)", {"GROUP_M": 1}),
    ("epilogue straight to global", {"SMEM_EPILOGUE": 0}),
    ("2 stages instead of 4", {"STAGES": 2}),
    ("3 stages", {"STAGES": 3}),
    ("128 x 256 tiles (2 x 4 warps)", {"BM": 128, "BN": 256, "WARPS_M": 2, "WARPS_N": 4}),
    ("no XOR swizzle", {"SWIZZLE": 0}),
]


def mma_gemm_smem(**cfg) -> int:
    """Dynamic shared bytes of mma_gemm for a configuration (pipeline, or the epilogue's staging tile)."""
    c = dict(_DEFAULTS, **cfg)
    pipe = c["STAGES"] * (c["BM"] + c["BN"]) * c["BK"] * 2
    return max(pipe, c["BM"] * (c["BN"] + 8) * 2 if c["SMEM_EPILOGUE"] else 0)


def mma_gemm_launcher(cfg=None):
    """``run(a, b, c)``: the reference compiled with ``cfg`` over its defaults (an ABLATION entry), for bf16
    a, b (uint16 bits) and a C of uint16 bf16 bits (OUT_BF16=1, the default) or float32 (OUT_BF16=0)."""
    c = dict(_DEFAULTS, **(cfg or {}))
    source = course.solution_source(CHAPTER, "mma_gemm")
    k = course.compile(source, options=[f"-D{a}={v}" for a, v in c.items()]).kernel("mma_gemm")

    def run(a, b, out):
        (m, kk), n = a.shape, b.shape[1]
        grid = course.grid_for(m, c["BM"]) * course.grid_for(n, c["BN"])
        if c["OUT_BF16"]:   # the kernel's float* C_out is a bf16 buffer in this mode (see its signature)
            out = out.view("float32")   # n is a multiple of 8, so every row pairs up
        k(grid, 32 * c["WARPS_M"] * c["WARPS_N"], a, b, out, m, n, kk, shared_mem=mma_gemm_smem(**c))
    return run


def ablation_variants(size: int = SIZE, check_shape=(777, 264, 520)) -> tuple:
    """``(variants, anchors)`` for `course.variants.compare`: each ABLATION variant of the reference (bf16
    out), checked at ``check_shape`` (partial tiles in m, n and k) and timed at size^3; cuBLAS BF16 on the
    same inputs as the anchor. Needs solutions/08_tensor_cores and sm_80."""
    a, b, c = make_inputs(size, size, size, "bf16", seed=5)
    variants = []
    for label, cfg in ABLATION:
        run = mma_gemm_launcher(cfg)

        def check(run=run, label=label):
            sa, sb, sc = make_inputs(*check_shape, "bf16", seed=check_shape[0])     # C starts as NaN
            run(sa, sb, sc)
            return check_gemm(sc, sa, sb, "bf16", name=f"mma_gemm ({label}) at {'x'.join(map(str, check_shape))}")
        about = ", ".join(f"{k}={v}" for k, v in cfg.items()) or "the defaults"
        variants.append(Variant(f"mma_gemm: {label}", lambda run=run: run(a, b, c), check=check, about=about))
    anchor = Variant(f"cuBLAS BF16 {size}^3 (bf16 out)", lambda: course.cublas.gemm(a, b, c, compute="bf16"))
    return variants, [anchor]


def compare_ablation(size: int = SIZE, **kw):
    """The ablation as one `course.variants.Comparison` (every variant checked, then all timed with cuBLAS
    BF16); [] with a sentence where the solutions folder or sm_80 is missing. ``kw`` goes to `compare`."""
    if course.solution_source(CHAPTER, "mma_gemm") is None or not course.supports("bf16_mma"):
        print("The ablation runs solutions/08_tensor_cores/mma_gemm.cu on sm_80 or newer; "
              f'course.results.show_recorded("{CHAPTER}", "mma_gemm: ") prints the recorded one.')
        return []
    variants, anchors = ablation_variants(size)
    kw = {"budget_s": 1.0, "max_samples": 30, **kw}
    return compare(variants, anchors=anchors, work=gemm_flops(size, size, size), unit="TFLOP/s",
                   title=f"mma_gemm at {size}^3 (BF16 in, FP32 accumulate, BF16 out), one feature changed per row",
                   **kw)


def mma_peak(acc: int = 16, iters: int = 4096, budget_s: float = 0.5) -> float:
    """TFLOP/s of the notebook's mma_peak cell built with ``-DACC=acc``: mma.sync m16n8k16 with no memory
    traffic, 8 warps on every SM."""
    import cupy
    k = course.lesson_cell(CHAPTER, "mma_peak").kernel("mma_peak", options=[f"-DACC={acc}"])
    blocks, threads = course.device_info().sm_count, 256
    out = cupy.empty(blocks * threads, cupy.float32)
    r = course.benchmark(lambda: k(blocks, threads, out, iters), budget_s=budget_s, max_samples=20)
    return r.tflops(blocks * (threads // 32) * iters * acc * 2 * 16 * 8 * 16)


def simple_gemm(kernel=None):
    """``f(a, b, c)`` for 16-bit a, b (uint16 bits) and float32 c: ``kernel`` (the notebook's compiled
    ``mma_simple``; by default its cell, compiled here) on (N / 64, M / 64) blocks of 128 threads."""
    k = kernel or course.lesson_cell(CHAPTER, "mma_simple").kernel("mma_simple")

    def launch(a, b, c):
        (m, kk), n = a.shape, b.shape[1]
        if m % 64 or n % 64 or kk % 32:
            raise ValueError(f"mma_simple needs M, N multiples of 64 and K of 32; got {m} x {n} x {kk}")
        k((n // 64, m // 64), 128, a, b, c, m, n, kk)
    return launch
