"""Chapter 15 (Triton next to CUDA): the same problems in both, one comparison per problem, and what Triton made.

The Triton kernels live in the notebook's ``%%triton`` cells (`vec_add`, `softmax_rows`, `layer_norm`,
`matmul_bf16`, `attention`) and run through `course.triton` (compiled by Triton, launched by CuPy on the timer's
stream). Each ``compare_*`` checks every row before timing anything (`course.variants.compare`) and puts Triton
beside the course's CUDA kernel for the problem (earlier chapters' cells, or a graded reference) and the library
(CuPy's own kernels, cuBLAS), with an anchor timed in the same run: a device copy of the same bytes for the
memory-bound problems, cuBLAS for the matrix product. Chapter 14's attention kernels come in as ``cuda`` rows
from the caller (lesson modules do not import each other).
"""
from __future__ import annotations

import math

import course
from course.variants import Variant, compare

__all__ = ["CHAPTER", "CELLS", "kernels", "MATMUL_CONFIGS", "compare_vec_add", "compare_softmax",
           "compare_layer_norm", "compare_matmul", "tune_matmul", "compare_attention", "summary", "plot_summary",
           "lines_of_code", "generated"]

CHAPTER = "15_triton"
CELLS = ("vec_add", "softmax_rows", "layer_norm", "matmul_bf16", "attention")
# BF16 matmul configurations for Hopper and Ampere: (BM, BN, BK, GROUP_M, warps, stages)
MATMUL_CONFIGS = [dict(BM=bm, BN=bn, BK=bk, GROUP_M=8, num_warps=w, num_stages=s)
                  for bm, bn, bk, w, s in ((128, 256, 64, 8, 3), (128, 128, 64, 8, 4), (128, 128, 64, 4, 4),
                                           (256, 128, 64, 8, 3), (64, 256, 64, 4, 4), (128, 64, 64, 4, 4))]


def kernels() -> dict:
    """name -> the JITFunction of every Triton cell of the chapter (a cell run in this session wins)."""
    out = {}
    for cell in CELLS:
        out.update(course.triton.lesson_kernels(CHAPTER, cell))
    return out


def _copy_anchor(x, out, nbytes):
    """A device-to-device copy of ``nbytes``: the bandwidth a memory-bound kernel is measured against."""
    import cupy
    n = nbytes // 2 // x.itemsize
    src, dst = x.ravel()[:n], out.ravel()[:n]
    return Variant("device copy (same bytes)", lambda: cupy.copyto(dst, src), work=nbytes,
                   about="cudaMemcpy-like: one read and one write of half the bytes each")


def compare_vec_add(n: int = 1 << 26, k=None, cuda=None, **kw):
    """out = x + y over ``n`` floats: Triton against chapter 06's float4 kernel and CuPy's elementwise add."""
    import cupy
    launch = course.triton.launch
    k = k or kernels()["vec_add"]
    v4 = cuda or course.lesson_cell("06_building_blocks", "vec_add4").kernel("vec_add4")
    rng = cupy.random.default_rng(1)
    x, y = rng.standard_normal(n, dtype=cupy.float32), rng.standard_normal(n, dtype=cupy.float32)
    out = cupy.full(n, cupy.nan, dtype=cupy.float32)
    want = x + y

    def check(run):
        out.fill(cupy.nan)
        run()
        return course.check(out, want, name="out")

    tri = lambda: launch(k, course.grid_for(n, 1024), x, y, out, n, BLOCK=1024, num_warps=4)  # noqa: E731
    cu = lambda: v4(course.grid_for(n // 4, 256), 256, x, y, out, n)  # noqa: E731
    lib = lambda: cupy.add(x, y, out=out)  # noqa: E731
    rows = [Variant("Triton vec_add", tri, lambda: check(tri), about="BLOCK 1024, 4 warps"),
            Variant("CUDA vec_add4 (chapter 06)", cu, lambda: check(cu), about="one float4 per thread"),
            Variant("CuPy x + y (library)", lib, lambda: check(lib))]
    return compare(rows, anchors=[_copy_anchor(x, out, 8 * n)], work=12 * n, unit="GB/s",
                   title=f"vector add, {n:,} floats", **kw)


def _rows_softmax(x, out):
    import cupy
    e = cupy.exp(x - x.max(axis=1, keepdims=True))
    cupy.divide(e, e.sum(axis=1, keepdims=True), out=out)


def compare_softmax(rows: int = 32768, cols: int = 2048, k=None, cuda: dict | None = None, **kw):
    """Row softmax of a rows x cols float32 matrix: Triton (a row in registers), chapter 14's CUDA kernels (a warp
    per row: ``cuda`` maps names to kernels taking (x, y, rows, cols) with one warp per row, by default
    `softmax_online`), and CuPy's five kernels (max, subtract-exp, sum, divide)."""
    import cupy
    import numpy as np
    k = k or kernels()["softmax_rows"]
    block = 1 << max(5, (cols - 1).bit_length())
    x = 2 * cupy.random.default_rng(2).standard_normal((rows, cols), dtype=cupy.float32)
    out = cupy.full_like(x, cupy.nan)
    want = cupy.exp(x.astype(cupy.float64) - x.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)

    def check(run):
        out.fill(cupy.nan)
        run()
        return course.check(out, want, rtol=1e-5, atol=1e-7, name="y")

    cuda = cuda or {"CUDA softmax_online (chapter 14)":
                    course.lesson_cell("14_flash_attention", "softmax_online").kernel("softmax_online")}
    runs = {"Triton softmax_rows": lambda: course.triton.launch(k, rows, x, out, cols, BLOCK=block,
                                                                 num_warps=8 if block >= 2048 else 4)}
    for name, kern in cuda.items():
        runs[name] = (lambda kern=kern: kern(course.grid_for(rows, 8), 256, x, out, np.int32(rows), np.int32(cols)))
    runs["CuPy composite (library)"] = lambda: _rows_softmax(x, out)
    variants = [Variant(name, run, lambda run=run: check(run)) for name, run in runs.items()]
    return compare(variants, anchors=[_copy_anchor(x, out, 8 * rows * cols)], work=8 * rows * cols, unit="GB/s",
                   title=f"row softmax, {rows:,} x {cols:,}", **kw)


def compare_layer_norm(rows: int = 16384, cols: int = 4096, k=None, **kw):
    """Layer norm over rows (eps 1e-5, weight and bias): Triton in one pass of memory against CuPy's composite
    (mean, variance, normalize, scale: several kernels). No earlier chapter has a CUDA layer norm."""
    import cupy
    k = k or kernels()["layer_norm"]
    rng = cupy.random.default_rng(3)
    x = rng.standard_normal((rows, cols), dtype=cupy.float32) + 3
    w, b = rng.standard_normal(cols, dtype=cupy.float32), rng.standard_normal(cols, dtype=cupy.float32)
    out = cupy.full_like(x, cupy.nan)
    x64 = x.astype(cupy.float64)
    want = (x64 - x64.mean(1, keepdims=True)) / cupy.sqrt(x64.var(1, keepdims=True) + 1e-5) * w + b
    block = 1 << (cols - 1).bit_length()

    def lib():
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        cupy.add((x - mean) / cupy.sqrt(var + 1e-5) * w, b, out=out)

    def check(run):
        out.fill(cupy.nan)
        run()
        return course.check(out, want, rtol=1e-4, atol=1e-4, name="y")

    tri = lambda: course.triton.launch(k, rows, x, w, b, out, cols, 1e-5, BLOCK=block, num_warps=8)  # noqa: E731
    rows_ = [Variant("Triton layer_norm", tri, lambda: check(tri), about="a row in registers"),
             Variant("CuPy composite (library)", lib, lambda: check(lib), about="mean, variance, normalize, scale: a dozen kernels")]
    return compare(rows_, anchors=[_copy_anchor(x, out, 8 * rows * cols)], work=8 * rows * cols, unit="GB/s",
                   title=f"layer norm, {rows:,} x {cols:,}", **kw)


def _matmul_run(k, a, b, c, cfg):
    (m, kk), n = a.shape, b.shape[1]
    cfg = dict(cfg)
    warps, stages = cfg.pop("num_warps"), cfg.pop("num_stages")
    grid = math.ceil(m / cfg["BM"]) * math.ceil(n / cfg["BN"])
    bf = course.triton.BF16
    return lambda: course.triton.launch(k, grid, bf(a), bf(b), c, m, n, kk, num_warps=warps, num_stages=stages, **cfg)


def tune_matmul(size: int = 4096, k=None, configs=MATMUL_CONFIGS):
    """(best config, {label: BenchResult}) of the BF16 matmul at size^3 over ``configs``, each checked first."""
    k = k or kernels()["matmul_bf16"]
    a, b, c = course.gemm.make_inputs(size, size, size, "bf16", seed=4, out="float32")
    sa, sb, sc = course.gemm.make_inputs(1009, 1032, 1000, "bf16", seed=5, out="float32")
    for cfg in configs:
        _matmul_run(k, sa, sb, sc, cfg)()
        course.assert_close(sc, course.gemm.values64(sa, "bf16") @ course.gemm.values64(sb, "bf16"),
                            rtol=0, atol=1e-4 * float(abs(sc).max()), name=f"C {cfg}")
    return course.triton.autotune(lambda **cfg: _matmul_run(k, a, b, c, cfg)(), configs)


def compare_matmul(size: int = 4096, config=None, k=None, cuda: dict | None = None, **kw):
    """BF16 C = A B (FP32 out) at size^3: Triton with ``config`` (default the first of MATMUL_CONFIGS) against
    the course's CUDA kernels (``cuda``: name -> ``f(a, b, c)``) and cuBLAS (BF16 in, FP32 out), the anchor."""
    k = k or kernels()["matmul_bf16"]
    config = config or MATMUL_CONFIGS[0]
    a, b, c = course.gemm.make_inputs(size, size, size, "bf16", seed=6, out="float32")
    sa, sb, sc = course.gemm.make_inputs(1009, 1032, 1000, "bf16", seed=7, out="float32")

    def checked(make):
        return lambda: (make(sa, sb, sc)(), course.gemm.check_gemm(sc, sa, sb, "bf16"))[1]

    rows = [Variant("Triton matmul_bf16", _matmul_run(k, a, b, c, config),
                    checked(lambda x, y, z: _matmul_run(k, x, y, z, config)),
                    about=", ".join(f"{n}={v}" for n, v in config.items()))]
    for name, f in (cuda or {}).items():
        rows.append(Variant(name, lambda f=f: f(a, b, c), checked(lambda x, y, z, f=f: lambda: f(x, y, z))))
    lib = Variant("cuBLAS BF16 (FP32 out)", lambda: course.cublas.gemm(a, b, c, compute="bf16_f32"),
                  checked(lambda x, y, z: lambda: course.cublas.gemm(x, y, z, compute="bf16_f32")))
    return compare(rows, anchors=[lib], work=course.gemm.gemm_flops(size, size, size), unit="TFLOP/s",
                   title=f"BF16 matmul, {size}^3", **kw)


def compare_attention(shape=(64, 4096, 128), causal: bool = False, k=None, cuda: dict | None = None,
                      anchors: dict | None = None, **kw):
    """Attention forward: Triton against chapter 14's kernels (``cuda``: name -> ``run(q, k, v, o, causal)`` ->
    launch, e.g. `course.lessons.ch14.launcher("flash_fwd")`) and library anchors (``anchors``: name -> launch on
    the same inputs, e.g. PyTorch's attention); every row checked at n = 1000 first."""
    import cupy
    from course.attention import attention_flops, check_attention, inputs
    k = k or kernels()["attention"]
    heads, n, d = shape
    q, kk, v, o = inputs(heads, n, d, seed=8)
    sq, sk, sv, so = inputs(2, 1000, d, seed=9)
    bf = course.triton.BF16

    def tri(q, kk, v, o):
        h, n_, d_ = q.shape
        return lambda: course.triton.launch(k, (math.ceil(n_ / 128), h), bf(q), bf(kk), bf(v), o, n_,
                                            1 / math.sqrt(d_), CAUSAL=int(causal), D=d_, BM=128, BN=64,
                                            num_warps=8, num_stages=3)

    def checked(make):
        def run():
            so.fill(cupy.nan)
            make(sq, sk, sv, so)()
            return check_attention(so, sq, sk, sv, causal)
        return run

    rows = [Variant("Triton attention", tri(q, kk, v, o), checked(tri), about="BM 128, BN 64, 8 warps, 3 stages")]
    for name, run in (cuda or {}).items():
        rows.append(Variant(name, run(q, kk, v, o, causal), checked(lambda a, b_, c_, d_, run=run:
                                                                     run(a, b_, c_, d_, causal))))
    libs = [Variant(name, f) for name, f in (anchors or {}).items()]
    return compare(rows, anchors=libs, work=attention_flops(heads, n, d, causal), unit="TFLOP/s",
                   title=f"attention forward{' (causal)' if causal else ''}, {heads} heads x {n} x {d}", **kw)


def summary(tables: dict) -> list:
    """One row per problem: the rate of Triton, of the best CUDA row and of the library row, each a fraction of
    the problem's anchor. ``tables``: problem -> `course.variants.compare` rows."""
    out = []
    for problem, rows in tables.items():
        def best(pick):
            got = [r for r in rows if pick(r["name"]) and r.get("of_anchor")]
            return max((r["of_anchor"] for r in got), default=None)
        out.append({"problem": problem, "Triton": best(lambda s: s.startswith("Triton")),
                    "CUDA": best(lambda s: s.startswith("CUDA")),
                    "library": best(lambda s: "library" in s or "cuBLAS" in s or "torch" in s.lower())})
    return out


def plot_summary(rows: list, ax=None):
    """Grouped bars per problem: Triton, the course's CUDA, the library, as fractions of the problem's anchor."""
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(9, 3.6))[1]
    width = 0.27
    for i, who in enumerate(("Triton", "CUDA", "library")):
        xs = [j + (i - 1) * width for j in range(len(rows))]
        ax.bar(xs, [r[who] or 0 for r in rows], width, label=who)
    ax.set_xticks(range(len(rows)), [r["problem"] for r in rows])
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_ylabel("fraction of the anchor")
    ax.set_title("Triton, the course's CUDA and the library (copy bandwidth or cuBLAS = 1)")
    ax.legend()
    return ax


def _lines(text: str, comment: str) -> int:
    return sum(1 for ln in text.splitlines() if ln.strip() and not ln.strip().startswith(comment))


def lines_of_code(pairs: dict) -> list:
    """Rows (problem, Triton lines, CUDA lines) without blank or comment lines; ``pairs``: problem -> (Triton cell
    name, CUDA source or None)."""
    return [{"problem": p, "Triton": _lines(course.triton.cell_source(CHAPTER, t), "#"),
             "CUDA": _lines(cu, "//") if cu else None} for p, (t, cu) in pairs.items()]


def generated(fn, signature: dict, constexprs: dict, *, arch: str = "sm_90", num_warps: int = 4,
              num_stages: int = 3) -> dict:
    """What Triton made of ``fn`` for ``arch`` (no GPU needed): the summary line, SASS opcode counts of interest,
    and the PTX lines that show its choices (vector loads, cp.async, wgmma, barriers). Pointers and integers are
    marked divisible by 16, as `course.triton.launch` marks them for aligned arrays and sizes like 4096."""
    c = course.triton.compile_for(fn, signature, constexprs, arch=arch, num_warps=num_warps, num_stages=num_stages,
                                  attrs={(i,): [["tt.divisibility", 16]] for i, t in enumerate(signature.values())
                                         if t.startswith("*") or t in ("i32", "i64")})
    ops = course.sass_opcodes(c.sass()).get(c.name, {})
    keep = ("LDG", "STG", "LDGSTS", "HMMA", "HGMMA", "UTMALDG", "LDSM", "MUFU", "BAR", "SYNCS")
    ptx = [ln.strip() for ln in c.ptx.splitlines()
           if any(t in ln for t in ("ld.global.v4", "cp.async", "wgmma.mma_async", "mma.sync", "ldmatrix"))]
    return {"summary": c.summary(), "sass": {o: n for o, n in sorted(ops.items()) if o.startswith(keep)},
            "ptx": sorted(set(ptx))[:12], "compiled": c}
