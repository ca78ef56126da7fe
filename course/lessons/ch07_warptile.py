"""Chapter 07, the warptiling stage: the notebook's one kernel text, many tile shapes, and the sweep that picks one.

Stage 6 plus a warp level (each warp owns a WM x WN piece of the block tile) with stage 6's signature, loads,
transposed A, double buffer and edges. `warptile_source` puts a `Config`'s ``#define``s before the one text,
`check_config` says why a shape cannot work, `sweep` (GPU) checks and times `CANDIDATES` next to cuBLAS SGEMM
in one run; ``python -m benchmarks.warptile_sweep`` records it in benchmarks/results. No CUDA at import.
"""
from __future__ import annotations

import dataclasses
import sys

import course
from ..gemm import check_gemm, gemm_flops, make_inputs

__all__ = ["KERNEL", "FULL_KERNEL", "is_full", "SIZE", "CHECK_SHAPES", "SMEM_PER_BLOCK", "SMEM_PER_SM", "Config",
           "CANDIDATES", "warptile_source", "check_config", "cell_config", "smem_bytes", "launch", "sweep", "markdown"]

KERNEL = "sgemm_warptile"
FULL_KERNEL = "sgemm_warptile_full"   # the same cell's kernel for tile multiples and 16-byte aligned matrices
SIZE = 4096
# scalar edges (N, K odd); float4 path with partial tiles; tile multiples of every candidate (the full kernel)
CHECK_SHAPES = ((1000, 1037, 999), (129, 136, 40), (512, 512, 48))
SMEM_PER_BLOCK = 227 * 1024      # H100 (sm_90): opt-in dynamic shared memory per block
SMEM_PER_SM = 228 * 1024         # per SM, of which the driver reserves 1 KiB per resident block
CHAPTER = "07_staged_gemm"       # the kernel's one home: the chapter's %%cuda cell named KERNEL


@dataclasses.dataclass(frozen=True)
class Config:
    """Block BM x BN x BK, warp WM x WN as WMITER x WNITER sub-tiles, thread TM x TN; MIN_BLOCKS: blocks per SM
    for __launch_bounds__; GROUP_M > 1: blocks in groups of GROUP_M rows; KUNROLL: k-loop unroll (0: all)."""

    BM: int = 128; BN: int = 128; BK: int = 16                  # noqa: E702  (the block tile, the K-slice)
    WM: int = 64; WN: int = 64; WNITER: int = 4                 # noqa: E702  (the warp tile)
    TM: int = 8; TN: int = 4; THREADS: int = 128                # noqa: E702  (the thread tile; 32 per warp)
    MIN_BLOCKS: int = 1; GROUP_M: int = 1; KUNROLL: int = 0     # noqa: E702

    @property
    def WMITER(self) -> int:
        return (self.WM * self.WN) // (32 * self.TM * self.TN * self.WNITER)

    @property
    def name(self) -> str:
        return (f"{self.BM}x{self.BN}x{self.BK} warp {self.WM}x{self.WN} ({self.WMITER}x{self.WNITER}) thread "
                f"{self.TM}x{self.TN}, {self.THREADS} thr x{self.MIN_BLOCKS}"
                + (f", group {self.GROUP_M}" if self.GROUP_M > 1 else "")
                + (f", unroll {self.KUNROLL}" if self.KUNROLL else ""))


def _config(cfg=None, **params) -> Config:
    if isinstance(cfg, Config):
        return dataclasses.replace(cfg, **params)
    return Config(**{**(cfg or {}), **params})


def cell_config(source: str | None = None) -> Config:
    """The `Config` of the chapter cell's ``#ifndef`` defaults (``source``: that cell's text, default the cell as
    it stands); the stage table launches stage 6b with these."""
    import re
    src = course.lesson_cell(CHAPTER, KERNEL).source if source is None else source
    found = dict(re.findall(r"#ifndef[ \t]+(\w+)[ \t]*\n[ \t]*#define[ \t]+\1[ \t]+(\d+)", src))
    names = {f.name for f in dataclasses.fields(Config)}
    c = Config(**{k: int(v) for k, v in found.items() if k in names})
    return dataclasses.replace(c, KUNROLL=0) if c.KUNROLL == c.BK else c   # KUNROLL 0 stands for the whole slice


def smem_bytes(cfg) -> int:
    """Dynamic shared bytes of one block: two buffers of A^T (BK x (BM + 4)) and B (BK x BN) floats."""
    c = _config(cfg)
    return 2 * c.BK * (c.BM + 4 + c.BN) * 4


def warptile_source(cfg=None, **params) -> str:
    """The CUDA source for a `Config` (or its fields as keywords): its ``#define``s, then the one kernel text."""
    c = _config(cfg, **params)
    defs = {**dataclasses.asdict(c), "KUNROLL": c.KUNROLL or c.BK}      # KUNROLL 0: the whole K-slice
    # the cell's own #ifndef defaults give way to these
    return "".join(f"#define {k} {v}\n" for k, v in defs.items()) + course.lesson_cell(CHAPTER, KERNEL).source


def check_config(cfg) -> str:
    """What is wrong with a tile shape, in words ('' when it can run): the kernel's static_asserts, an H100's
    launch and shared-memory limits, and a floor on registers that predicts certain spills."""
    try:
        c = _config(cfg)
    except TypeError as exc:
        return f"not a tile shape: {exc} (the fields are {', '.join(f.name for f in dataclasses.fields(Config))})"
    f = dataclasses.asdict(c)
    bad = [k for k, v in f.items() if not isinstance(v, int) or isinstance(v, bool) or v < (k != "KUNROLL")]
    if bad:
        return "; ".join(f"{k} should be a positive integer{' or 0' * (k == 'KUNROLL')}; got {f[k]!r}" for k in bad)
    if c.KUNROLL and c.BK % c.KUNROLL:
        return f"KUNROLL = {c.KUNROLL} should divide BK = {c.BK} (or be 0, the whole K-slice unrolled)"
    if c.BM % c.WM or c.BN % c.WN:
        return f"the {c.BM} x {c.BN} block tile does not split into {c.WM} x {c.WN} warp tiles"
    warps = (c.BM // c.WM) * (c.BN // c.WN)
    if c.THREADS != 32 * warps or c.THREADS > 1024:
        return f"{warps} warp tiles need THREADS = {32 * warps}, and a block at most 1024; got THREADS = {c.THREADS}"
    if c.TM % 4 or c.TN % 4 or c.BK % 4 or c.BM % 4 or c.BN % 4:
        return (f"TM = {c.TM}, TN = {c.TN}, BK = {c.BK}, BM = {c.BM} and BN = {c.BN} should be multiples of 4: "
                "fragments, global loads and shared rows are float4 (16-byte aligned)")
    row = 32 * c.TM * c.TN * c.WNITER
    if (c.WM * c.WN) % row or c.WN % c.WNITER:
        return (f"a {c.WM} x {c.WN} warp tile ({c.WM * c.WN} outputs) does not split into rows of WNITER = "
                f"{c.WNITER} sub-tiles of 32 lanes x {c.TM} x {c.TN} outputs ({row} per row of sub-tiles)")
    wsubm, wsubn = c.WM / c.WMITER, c.WN // c.WNITER
    if wsubm % c.TM or wsubn % c.TN or (wsubm // c.TM) * (wsubn // c.TN) != 32:
        return (f"the {wsubm:g} x {wsubn} sub-tile (WMITER = {c.WMITER}) is not a grid of 32 lanes of "
                f"{c.TM} x {c.TN}; change WNITER, TM or TN")
    for what, n in (("A", c.BM * c.BK // 4), ("B", c.BK * c.BN // 4)):
        if n % c.THREADS:
            return f"the {n} float4 loads of {what}'s tile do not split evenly over {c.THREADS} threads"
    smem = smem_bytes(c)
    if smem > SMEM_PER_BLOCK:
        return f"{smem} bytes of shared memory per block; an H100 allows {SMEM_PER_BLOCK} (use a smaller BK or tile)"
    if c.MIN_BLOCKS * (smem + 1024) > SMEM_PER_SM:
        return (f"MIN_BLOCKS = {c.MIN_BLOCKS} blocks of {smem} shared bytes (+1 KiB each) do not fit the "
                f"{SMEM_PER_SM} bytes of an SM")
    # a floor: accumulators, two k-steps of fragments (the compiler reads the next one early), the prefetched
    # slice, ~16 for addresses and flags; the compiled kernel's spill count has the last word
    need = (c.WMITER * c.TM * c.WNITER * c.TN + 2 * (c.WMITER * c.TM + c.WNITER * c.TN)
            + (c.BM + c.BN) * c.BK // c.THREADS + 16)
    cap = min(255, 65536 // (c.THREADS * c.MIN_BLOCKS) // 8 * 8)
    if need > cap:
        return (f"needs at least about {need} registers per thread, but {c.MIN_BLOCKS} block(s) of {c.THREADS} "
                f"threads per SM leave {cap}: it would spill. Lower MIN_BLOCKS or the outputs per thread")
    return ""


def _c(**kw) -> Config:
    return Config(**{"MIN_BLOCKS": 2, **kw})


# For the H100 (132 SMs; 64K registers and 228 KiB shared per SM): 128 threads x 128 outputs (up to 255
# registers, two blocks: 8 warps per SM with much ILP each), 256 threads x 128 outputs (one block), 256 x 64
# (128 registers, two blocks: stage 6's budget) and 128 x 64 tiles at three blocks. Every lane grid keeps
# LR, LC <= 8, and each shape compiles without spills for sm_75, sm_80 and sm_90 (the tests check).
CANDIDATES = [
    _c(), _c(KUNROLL=2), _c(BK=8),                                           # siboehm's kernel 10 shape
    _c(TN=8, WNITER=2), _c(TN=8, WNITER=2, BK=8),
    _c(WM=32, WN=128, TM=4, TN=8, BK=8),           # (BK 16 of this shape spills in the sm_75 full kernel)
    _c(BK=8, GROUP_M=8),
    _c(BN=256, THREADS=256, MIN_BLOCKS=1), _c(BN=256, THREADS=256, MIN_BLOCKS=1, KUNROLL=2),   # 128 x 256
    _c(BN=256, THREADS=256, MIN_BLOCKS=1, KUNROLL=2, GROUP_M=8), _c(BN=256, THREADS=256, MIN_BLOCKS=1, BK=8),
    _c(BM=256, THREADS=256, MIN_BLOCKS=1),
    _c(WN=32, WNITER=2, THREADS=256, BK=8),                                  # 8 warps of 64 outputs
    _c(WM=32, WNITER=2, TM=4, THREADS=256, BK=8),                            # stage 6's 4 x 4 quads, per warp
    _c(BN=64, WN=32, WNITER=2, MIN_BLOCKS=3), _c(BN=64, WN=32, WNITER=2, MIN_BLOCKS=3, BK=8),
    _c(BM=64, WM=32, WNITER=2, TM=4, TN=8, MIN_BLOCKS=3),
]


def launch(cfg, m: int, n: int) -> tuple:
    """(grid, block, dynamic shared bytes) for an m x n output."""
    c = _config(cfg)
    return (course.grid_for(n, c.BN), course.grid_for(m, c.BM)), c.THREADS, smem_bytes(c)


def is_full(cfg, x, y, z) -> bool:
    """May C = x @ y into z take `FULL_KERNEL` (`course.gemm.tile_multiple` with the config's BM, BN, BK)?"""
    c = _config(cfg)
    return course.gemm.tile_multiple(x, y, z, c.BM, c.BN, c.BK)


def _prepare(cfg, a, b, ref, out, check_shapes) -> tuple:
    """(row, timed launch or None): the shape refused, or compiled, its resources read and its output checked."""
    import cupy
    problem = check_config(cfg)
    if problem.startswith("not a tile shape"):
        return {"config": str(cfg), "candidate": None, "params": None, "correct": False, "error": problem}, None
    c = _config(cfg)
    row = {"config": c.name, "candidate": CANDIDATES.index(c) + 1 if c in CANDIDATES else None,
           "params": dataclasses.asdict(c), "smem": smem_bytes(c), "correct": False, "error": problem}
    if problem:
        return row, None

    def run(x, y, z):
        grid, block, smem = launch(c, x.shape[0], y.shape[1])
        (full if is_full(c, x, y, z) else kern)(grid, block, x, y, z, x.shape[0], y.shape[1], x.shape[1],
                                                shared_mem=smem)
    try:
        module = course.compile(warptile_source(c))
        kern, full = module.kernel(KERNEL), module.kernel(FULL_KERNEL)
        res = full.resources      # the kernel timed at SIZE^3; the general one's are checked by the tests
        row.update(registers=res.registers, local_bytes=res.local_bytes, spill_stores=res.spill_stores,
                   spill_loads=res.spill_loads, blocks_per_sm=full.occupancy(c.THREADS, smem_bytes(c)))
        for m, n, k in check_shapes:          # against the float64 product: every output, edges included
            x, y, z = make_inputs(m, n, k, "fp32", seed=m + n + k)       # C starts as NaN
            run(x, y, z)
            ok = check_gemm(z, x, y, "fp32", name=f"{c.name} at {m}x{n}x{k}")
            if not ok:
                raise course.CheckError(ok.message)
        out.fill(cupy.nan)                    # the previous shape's output is right too: poison it
        run(a, b, out)                        # against cuBLAS SGEMM (TF32 off) at the timed size
        ok = course.check(out, ref, rtol=0, atol=1e-4 * max(float(cupy.abs(ref).max()), 1e-30),
                          name=f"{c.name} at {out.shape[0]}^3 against cuBLAS SGEMM")
        if not ok:
            raise course.CheckError(ok.message)
    except (course.CompileError, course.LaunchError, course.CheckError) as exc:
        row["error"] = f"{type(exc).__name__}: " + " ".join(str(exc).split("\n")[:3])
        return row, None
    row["correct"] = True
    return row, (lambda: run(a, b, out))


def sweep(n: int = SIZE, configs=None, budget_s: float = 4.0, check_shapes=CHECK_SHAPES, max_samples: int = 40,
          verbose: bool = True) -> list:
    """On a GPU: each of ``configs`` (default `CANDIDATES`) refused with `check_config`'s reason, or compiled
    (registers, spills, blocks per SM), checked at ``check_shapes`` against float64 and at n^3 against cuBLAS
    SGEMM (TF32 off), then timed with cuBLAS in one `course.interleaved` run. Rows fastest first, cuBLAS last."""
    course.device_info()                      # NoGPUError with the reason, before any work
    import cupy
    configs = CANDIDATES if configs is None else list(configs)
    a, b, ref = make_inputs(n, n, n, "fp32", seed=1)
    course.cublas.gemm(a, b, ref, compute="fp32")
    out = cupy.empty_like(ref)                # one output for every shape: checked one by one, then timed
    rows, fns = [], {}
    for i, cfg in enumerate(configs):
        row, fn = _prepare(cfg, a, b, ref, out, check_shapes)
        rows.append(row)
        if fn is not None:
            fns[i] = fn
        if verbose:
            print(f"[{i + 1}/{len(configs)}] {row['config']}: " + (row["error"] or (
                f"correct, {row['registers']} registers, {row['spill_stores']} B spilled, "
                f"{row['blocks_per_sm']} block(s)/SM")), file=sys.stderr)
    cub = "cuBLAS SGEMM (FP32, TF32 off)"
    fns[cub] = lambda: course.cublas.gemm(a, b, ref, compute="fp32")
    times = course.interleaved(fns, budget_s=budget_s, max_samples=max_samples)
    flops = gemm_flops(n, n, n)
    for i, row in enumerate(rows):
        t = times.get(i)
        row.update(size=n, ms=t and t.median_ms, spread=t and t.rel_iqr, tflops=t and t.tflops(flops),
                   of_cublas=t and times[cub].median_ms / t.median_ms)
    rows.sort(key=lambda r: -(r["of_cublas"] or 0))
    t = times[cub]
    return rows + [{"config": cub, "candidate": None, "params": None, "size": n, "ms": t.median_ms,
                    "spread": t.rel_iqr, "tflops": t.tflops(flops), "of_cublas": 1.0, "correct": True, "error": ""}]


def markdown(rows) -> str:
    """The sweep's rows as a markdown table."""
    keys = {"#": "candidate", "config": "config", "ms": "ms", "TFLOP/s": "tflops", "x cuBLAS": "of_cublas",
            "regs": "registers", "spills (B)": "spill_stores", "blocks/SM": "blocks_per_sm", "smem (B)": "smem"}

    def cell(v):
        return "" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v).replace("|", "/")
    lines = ["| " + " | ".join([*keys, "correct"]) + " |", "|---" * (len(keys) + 1) + "|"]
    return "\n".join(lines + ["| " + " | ".join([cell(r.get(k)) for k in keys.values()] + [
        "yes" if r.get("correct") else "no: " + cell(r.get("error"))]) + " |" for r in rows])
