"""Chapter 07 (staged GEMM): the stages as one comparison, their tile intensity, and the tile sweep.

C = A @ B with A (M x K), B (K x N) and C (M x N) row-major. The stages, in the order the chapter builds
them: 1 naive, 2 coalesced, 3 shared-memory tiles, 4 register tiles in 1D, 5 in 2D, 6 vectorized and
double-buffered (FP32, against cuBLAS SGEMM); 7 WMMA on BF16 with shared-memory tiles, 8 the same fed by
cp.async, double then multi-stage (against cuBLAS's BF16 GEMM). Every kernel is a ``%%cuda`` cell of the
notebook, read with `course.lesson_cell` (in a notebook session: the cell as it last ran, edits
included); the WMMA cell is built three times, with ``-DSTAGES=1/2/4``. Stages 3 and 6 are the chapter's
graded exercises: their kernels come from solutions/07_staged_gemm/ where that folder is shipped and are
left out, with a sentence, where it is not. Nothing here touches CUDA at import.
"""
from __future__ import annotations

import dataclasses
import math
import re

import course
from ..gemm import check_gemm, gemm_flops, make_inputs
from ..variants import Comparison, Variant, compare

__all__ = [
    "SIZE", "CHAPTER", "CHECK_SIZES", "Stage", "STAGES", "stage_intensity", "stage_variants", "compare_stages",
    "recorded_stages", "roofline_points", "tile_config", "tile_sweep", "kernel_defines", "tiling_figure", "waves",
    "wave_rows", "memory_levels",
]

SIZE = 4096                                      # M = N = K of the staged table
CHAPTER = "07_staged_gemm"
CHECK_SIZES = ((129, 136, 40), (1000, 1032, 520))  # no tile divides them; N and K multiples of 8 (WMMA)


def _wmma_smem(stages: int) -> int:
    # A tiles 128 x 40 and B tiles 32 x 136 bf16 per stage; the epilogue scratch (8 warps x 1 KiB) fits
    return max(stages * (128 * 40 + 32 * 136) * 2, 8 * 256 * 4)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of the chapter: where its kernel comes from, how it is launched, what its tile is."""

    number: str
    key: str
    title: str
    precision: str                 # "fp32" or "bf16": the cuBLAS it is compared with
    kernel: str
    cell: str | None               # the notebook's %%cuda cell; None: the graded exercise's solution file
    options: tuple = ()
    block_tile: tuple = (1, 1)     # (BM, BN): the C tile of one block (grid and intensity model)
    block: object = 256            # threads per block (an int, or (x, y))
    smem: int = 0                  # dynamic shared bytes
    full_kernel: str | None = None # the cell's kernel for tile-multiple shapes and 16-byte aligned matrices

    @property
    def name(self) -> str:
        """The stage's row name, in the comparison and in the benchmark suite's recordings."""
        return f"stage {self.number}: {self.title}"

    def source(self) -> str | None:
        """The kernel's CUDA source; None for a graded stage where solutions/ is not shipped."""
        if self.cell is None:
            return course.solution_source(CHAPTER, self.kernel)
        return course.lesson_cell(CHAPTER, self.cell).source

    def launch(self, m: int, n: int, k: int) -> tuple:
        """(grid, block, dynamic shared bytes) for an m x n x k product."""
        bm, bn = self.block_tile
        if self.key == "naive":        # the one stage whose x runs down the rows of C
            return (course.grid_for(m, bm), course.grid_for(n, bn)), self.block, self.smem
        return (course.grid_for(n, bn), course.grid_for(m, bm)), self.block, self.smem

    def launcher(self):
        """``run(a, b, c)``: the stage compiled for this GPU and launched for the shapes of a and b (with
        ``full_kernel`` where the shapes are multiples of the cell's BM, BN, BK and the matrices 16-byte aligned)."""
        if self.cell is None:
            kern = course.compile(self.source(), options=self.options).kernel(self.kernel)
        else:
            kern = course.lesson_cell(CHAPTER, self.cell).kernel(self.kernel, options=self.options)
        full = None
        if self.full_kernel:
            full = course.lesson_cell(CHAPTER, self.cell).kernel(self.full_kernel, options=self.options)
            bk = kernel_defines(self.cell)["BK"]

        def run(a, b, c):
            (m, k), n = a.shape, b.shape[1]
            grid, block, smem = self.launch(m, n, k)
            use = full if full is not None and course.gemm.tile_multiple(a, b, c, *self.block_tile, bk) else kern
            use(grid, block, a, b, c, m, n, k, shared_mem=smem)
        return run


STAGES = [
    Stage("1", "naive", "naive: one output per thread, x down a column", "fp32", "gemm_naive", "gemm_naive",
          block_tile=(32, 8), block=(32, 8)),
    Stage("2", "coalesced", "coalesced: x along a row", "fp32", "gemm_coalesced", "gemm_coalesced",
          block_tile=(8, 32), block=(32, 8)),
    Stage("3", "tiled", "shared-memory tiles 32 x 32", "fp32", "sgemm_tiled", None,
          block_tile=(32, 32), block=(32, 32)),
    Stage("4", "reg1d", "register tiles 1D (8 outputs/thread)", "fp32", "gemm_reg1d", "gemm_reg1d",
          block_tile=(64, 64), block=512),
    Stage("5", "reg2d", "register tiles 2D (8 x 8 outputs/thread)", "fp32", "gemm_reg2d", "gemm_reg2d",
          block_tile=(128, 128)),
    Stage("6", "vector", "float4 loads, transposed A, double buffer", "fp32", "sgemm_regtile", None,
          block_tile=(128, 128)),
    Stage("6b", "warptile", "warptiling: 128 x 256 tiles, 64 x 64 per warp", "fp32", "sgemm_warptile",
          "sgemm_warptile", block_tile=(128, 256), block=256, smem=2 * 16 * (128 + 4 + 256) * 4,
          full_kernel="sgemm_warptile_full"),
    Stage("7", "wmma", "WMMA BF16, shared-memory tiles", "bf16", "gemm_wmma", "gemm_wmma", ("-DSTAGES=1",),
          block_tile=(128, 128), smem=_wmma_smem(1)),
    Stage("8a", "wmma_db", "WMMA + cp.async double buffer", "bf16", "gemm_wmma", "gemm_wmma", ("-DSTAGES=2",),
          block_tile=(128, 128), smem=_wmma_smem(2)),
    Stage("8b", "wmma_ms", "WMMA + cp.async 4 stages", "bf16", "gemm_wmma", "gemm_wmma", ("-DSTAGES=4",),
          block_tile=(128, 128), smem=_wmma_smem(4)),
]


def stage_intensity(stage: Stage) -> float:
    """FLOP per byte the stage's blocks request from global memory (what L2/DRAM must serve).

    A block computing a BM x BN tile reads BM x K of A and K x BN of B: 2 BM BN K FLOPs for
    (BM + BN) K elements, whatever K. For the two one-output-per-thread stages the block is the warp's
    footprint and nothing is shared through shared memory, so they sit at 2 FLOPs per 2 loads whatever the
    caches catch; every other stage's intensity grows with its tile, which is the point of tiling.
    """
    elem = 2 if stage.precision == "bf16" else 4
    if stage.key in ("naive", "coalesced"):
        return 2 / (2 * elem)
    bm, bn = stage.block_tile
    return 2 * bm * bn / ((bm + bn) * elem)


def _anchor_name(precision: str, size: int) -> str:
    return f"cuBLAS SGEMM {size}^3 (FP32, TF32 off)" if precision == "fp32" else f"cuBLAS BF16 {size}^3"


def _checker(stage: Stage, run, sizes):
    def check():
        for m, n, k in sizes:
            a, b, c = make_inputs(m, n, k, stage.precision, seed=m + n + k)   # C starts as NaN
            run(a, b, c)
            res = check_gemm(c, a, b, stage.precision, name=f"{stage.name} at {m}x{n}x{k}")
            if not res:
                return res
        return res
    return check


def stage_variants(size: int = SIZE, keys=None, check_sizes=CHECK_SIZES) -> tuple:
    """``(variants, anchors)`` for `course.variants.compare`: every stage that can run here, checked at
    ``check_sizes`` (no tile divides them) and timed at size^3; cuBLAS SGEMM (TF32 off) and cuBLAS BF16 as
    anchors, each stage a fraction of the cuBLAS of its own precision.

    A graded stage whose reference is not shipped, and the BF16 stages below sm_80, are left out with a
    sentence saying why (and what the benchmark suite recorded for a graded one, if anything).
    """
    bf16 = course.supports("bf16_mma")
    recorded = {r["name"]: r for r in course.results.recorded_rows(CHAPTER)[0]}
    inputs, variants = {}, []
    for st in STAGES:
        if keys is not None and st.key not in keys:
            continue
        if st.precision == "bf16" and not bf16:
            print(f"{st.name}: left out, BF16 tensor cores and cp.async need sm_80 or newer")
            continue
        if st.source() is None:
            r = recorded.get(st.name)
            print(f"{st.name}: left out, the graded exercise {st.kernel}'s reference is not in this copy of the "
                  "course" + (f" (recorded: {r['value']:.1f} TFLOP/s, {r['ratio']:.2f}x cuBLAS)" if r else ""))
            continue
        if st.precision not in inputs:
            inputs[st.precision] = make_inputs(size, size, size, st.precision, seed=1)
        a, b, c = inputs[st.precision]
        run = st.launcher()
        variants.append(Variant(st.name, lambda run=run, a=a, b=b, c=c: run(a, b, c),
                                check=_checker(st, run, check_sizes),
                                about=f"{st.precision.upper()}, tile {stage_intensity(st):.1f} FLOP/B",
                                anchor=_anchor_name(st.precision, size)))
    anchors = []
    for p, (a, b, c) in inputs.items():
        anchors.append(Variant(_anchor_name(p, size), lambda a=a, b=b, c=c, p=p: course.cublas.gemm(a, b, c, compute=p),
                               about="the library, same inputs"))
    return variants, anchors


def compare_stages(size: int = SIZE, keys=None, **kw) -> Comparison:
    """Check every stage, then time stages and cuBLAS at size^3: one `course.variants.Comparison`.

    ``kw`` goes to `compare` (budget_s, verbose, progress...). A wrong stage raises `course.CheckError`
    before anything is timed.
    """
    variants, anchors = stage_variants(size, keys)
    kw = {"budget_s": 1.0, "max_samples": 30, **kw}
    return compare(variants, anchors=anchors, work=gemm_flops(size, size, size), unit="TFLOP/s",
                   title=f"C = A @ B at {size}^3, each stage against the cuBLAS of its precision", **kw)


def recorded_stages() -> Comparison:
    """The staged table as the benchmark suite recorded it (printed), as rows for ``.plot()`` and
    `roofline_points`; empty, with a sentence, where nothing is recorded yet."""
    rec, gpu, _c = course.results.recorded_rows(CHAPTER)
    rows = Comparison()
    rows.title, rows.unit = f"C = A @ B at {SIZE}^3, recorded on {gpu} by the benchmark suite", "TFLOP/s"
    nan = float("nan")     # the recording keeps rates and ratios, not the samples
    for r in rec:
        if r["name"].startswith("stage "):
            rows.append({"name": r["name"], "about": "", "ms": nan, "spread": nan, "rate": r["value"],
                         "unit": r["unit"], "anchor": (r.get("anchor") or "").removesuffix(", same run"),
                         "of_anchor": r.get("ratio"), "is_anchor": False, "result": None})
    if rows:
        course.results.show_recorded(CHAPTER, "stage ")
    else:
        print(f"No recorded staged table yet: `python -m benchmarks --only {CHAPTER}` on a GPU records it.")
    return rows


def roofline_points(rows) -> list:
    """(label, FLOP/B, TFLOP/s) for course.plots.roofline: each stage row at its tile's intensity."""
    by_name = {st.name: st for st in STAGES}
    return [(f"{by_name[r['name']].number} {by_name[r['name']].key}", stage_intensity(by_name[r["name"]]),
             r["rate"]) for r in rows if r["name"] in by_name]


def kernel_defines(cell: str) -> dict:
    """The integer ``#define``s of a chapter cell (the defaults its -D options override)."""
    return {k: int(v) for k, v in re.findall(r"#define\s+(\w+)\s+(\d+)\b", course.lesson_cell(CHAPTER, cell).source)}


def tiling_figure(cell: str = "gemm_reg2d"):
    """Block -> warp -> thread (WMMA: fragment) -> K-slice, drawn with the tile sizes and index formulas of
    the cell's kernel: gemm_reg2d's tcol = tid % (BN / TN), or gemm_wmma's warp offsets and fragments."""
    from ..diagrams import gemm_tiling
    src, d = course.lesson_cell(CHAPTER, cell).source, kernel_defines(cell)
    if cell == "gemm_wmma":
        div, wm, mod, wn = map(int, re.search(r"wm = \(warp / (\d+)\) \* (\d+), wn = \(warp % (\d+)\) \* (\d+)",
                                              src).groups())
        fm, fn = map(int, re.search(r"accumulator, (\d+), (\d+), \d+", src).groups())
        fi, fj = map(int, re.search(r"\bacc\[(\d+)\]\[(\d+)\];", src).groups())
        return gemm_tiling((d["BM"], d["BN"]), d["BK"], (fi * fm, fj * fn),
                           [((w // div) * wm, (w % mod) * wn) for w in range(d["THREADS"] // 32)], (fm, fn),
                           [(i * fm, j * fn) for i in range(fi) for j in range(fj)], unit="fragment",
                           title=f"gemm_wmma: {wm} x {wn} per warp as {fi} x {fj} fragments of {fm} x {fn}")
    tm, tn, cols = d["TM"], d["TN"], d["BN"] // d["TN"]
    threads, wc = (d["BM"] // tm) * cols, min(cols, 32)          # a warp: 32 consecutive tid
    origins = [((t // cols) * tm, (t % cols) * tn) for t in range(0, threads, 32)]
    return gemm_tiling((d["BM"], d["BN"]), d["BK"], (-(-32 // cols) * tm, wc * tn), origins, (tm, tn),
                       [((lane // wc) * tm, (lane % wc) * tn) for lane in range(32)],
                       title=f"{cell}: {threads} threads of {tm} x {tn} outputs, tcol = tid % {cols}")


def waves(m: int, n: int, bm: int, bn: int, sms: int, blocks_per_sm: int) -> dict:
    """Wave quantization: an m x n output in bm x bn tiles on sms x blocks_per_sm resident blocks."""
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    slots = sms * blocks_per_sm
    w = math.ceil(tiles / slots)
    return {"tiles": tiles, "slots": slots, "waves": tiles / slots, "rounds": w, "slots used": tiles / (w * slots)}


def wave_rows(sw, sms: int, shapes=((4096, 128, 128), (2048, 128, 128), (2048, 128, 256), (1024, 128, 128),
                                    (512, 128, 128))) -> list:
    """`waves` for gemm_reg2d's 8 x 8-per-thread shapes (BK = 8), blocks per SM from the tile sweep's notes."""
    out = []
    for n, bm, bn in shapes:
        shape = dict(BM=bm, BN=bn, BK=8, TM=8, TN=8)
        sw.measure(**shape)                          # measured once on a GPU; the recording replays it elsewhere
        per_sm = re.search(r"(\d+) block\(s\)", sw.note(**shape))
        if per_sm:
            out.append({"size": f"{n}^3", "tile": f"{bm} x {bn}", "blocks/SM": int(per_sm[1]),
                        **waves(n, n, bm, bn, sms, int(per_sm[1]))})
    return out


def memory_levels(rows) -> list:
    """The two memory levels of each BF16 stage row and of chapter 08's recorded tile: TB/s the blocks request
    from L2 (rate / tile intensity) and TB/s DRAM must give if L2 misses only the compulsory traffic."""
    pts = [(r["name"], stage_intensity(st), st.block_tile, r["rate"]) for r in rows for st in STAGES
           if r["name"] == st.name and st.precision == "bf16"]
    for r in course.results.recorded_rows("08_tensor_cores")[0]:
        tile = re.search(r"(\d+) x (\d+) tiles", r.get("note", ""))
        if r["name"].endswith("reference (everything on)") and tile:
            bm, bn = int(tile[1]), int(tile[2])
            pts.append(("chapter 08: " + r["name"], 2 * bm * bn / ((bm + bn) * 2), (bm, bn), r["value"]))
    return [{"kernel": name, "tile": f"{t[0]} x {t[1]}", "TFLOP/s": rate, "tile FLOP/B": ai,
             "L2 -> SMs TB/s": rate / ai, "DRAM TB/s (compulsory)": rate / (SIZE / 3)} for name, ai, t, rate in pts]


# --- the tile sweep of stage 5 ------------------------------------------------------------------

SWEEP_SIZE = 2048
SWEEP_PARAMS = {"BM": [32, 64, 128, 256], "BN": [64, 128, 256], "BK": [8, 16], "TM": [4, 8], "TN": [4, 8]}


def tile_config(BM: int, BN: int, BK: int, TM: int, TN: int) -> dict:
    """What a gemm_reg2d tile shape costs before it runs: threads, shared bytes, and why it is invalid.

    Returns a dict with ``threads``, ``smem`` and ``problem`` (None when the shape can run). The checks
    are the kernel's own static_asserts and the launch limits, explained in words.
    """
    threads = (BM // TM) * (BN // TN) if BM % TM == 0 and BN % TN == 0 else 0
    smem = (BM + BN) * BK * 4
    problem = None
    if BM % TM or BN % TN:
        problem = f"{BM} x {BN} does not split into {TM} x {TN} thread tiles"
    elif threads > 1024:
        problem = f"{threads} threads per block; the limit is 1024 (use bigger TM/TN or a smaller tile)"
    elif threads < 32:
        problem = f"{threads} threads per block: less than one warp, most of the SM would idle"
    elif (BM * BK) % threads or (BK * BN) % threads:
        problem = (f"the {BM} x {BK} and {BK} x {BN} tiles do not split evenly over {threads} threads "
                   "(the loader's static_assert)")
    elif smem > 48 * 1024:
        problem = f"{smem} bytes of static shared memory; the static limit is 48 KiB"
    return {"threads": threads, "smem": smem, "problem": problem}


def tile_sweep(record: bool | None = None):
    """Sweep the gemm_reg2d cell's BM, BN, BK, TM, TN at 2048^3: TFLOP/s, with registers, shared memory
    and occupancy in each point's note; invalid shapes are explained, not crashed.

    Recorded as benchmarks/results/sweeps/07_staged_gemm_tiles.json for machines without a GPU.
    """
    from course.widgets import sweep
    state = {}

    def run(BM, BN, BK, TM, TN):
        cfg = tile_config(BM, BN, BK, TM, TN)
        if cfg["problem"]:
            raise ValueError(cfg["problem"])
        if "in" not in state:
            state["in"] = make_inputs(SWEEP_SIZE, SWEEP_SIZE, SWEEP_SIZE, "fp32", seed=3)
        a, b, c = state["in"]
        opts = [f"-D{k}={v}" for k, v in dict(BM=BM, BN=BN, BK=BK, TM=TM, TN=TN).items()]
        kern = course.lesson_cell(CHAPTER, "gemm_reg2d").kernel("gemm_reg2d", options=opts)
        res = kern.resources
        grid = (course.grid_for(SWEEP_SIZE, BN), course.grid_for(SWEEP_SIZE, BM))
        c.fill(float("nan"))   # the previous point's C is right too: poison it, or a shape that skips outputs passes
        kern(grid, cfg["threads"], a, b, c, SWEEP_SIZE, SWEEP_SIZE, SWEEP_SIZE)
        ok = check_gemm(c, a, b, "fp32", name=f"{BM}x{BN}x{BK}/{TM}x{TN}")
        if not ok:
            raise course.CheckError(ok.message)
        t = course.benchmark(lambda: kern(grid, cfg["threads"], a, b, c, SWEEP_SIZE, SWEEP_SIZE, SWEEP_SIZE),
                             budget_s=0.3, max_samples=15).tflops(gemm_flops(SWEEP_SIZE, SWEEP_SIZE, SWEEP_SIZE))
        blocks = kern.occupancy(cfg["threads"])
        note = (f"{res.registers} regs/thread, {cfg['smem']} B shared, {blocks} block(s) = "
                f"{blocks * cfg['threads'] // 32} warps per SM" + (f", {res.spill_stores} B spilled" if res.spill_stores else ""))
        return t, note

    return sweep(run, SWEEP_PARAMS, metric="TFLOP/s", x="BM", name="07_staged_gemm_tiles",
                 title=f"gemm_reg2d at {SWEEP_SIZE}^3 (FP32)", record=record)
