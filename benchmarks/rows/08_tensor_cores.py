"""Chapter 08 rows: the mma.sync reference feature by feature, its ceiling, and the simpler kernels.

The ablation is the chapter's own comparison, course.lessons.ch08.compare_ablation: every variant checked
at an odd shape before anything is timed, cuBLAS BF16 (bf16 out) timed in the same run. The reference with
everything on is the target row (0.60 x cuBLAS BF16); the mma.sync peak row (the notebook's mma_peak cell:
the tensor pipe with no memory traffic) is the ceiling that an mma.sync kernel cannot pass on this GPU.
"""
from __future__ import annotations


def rows(ctx) -> list:
    import course
    from course.lessons import ch08
    size = ch08.SIZE
    flops = course.gemm.gemm_flops(size, size, size)
    table = ch08.compare_ablation(size, verbose=False, progress=False)
    if not table:
        raise RuntimeError("the ablation needs solutions/08_tensor_cores and an sm_80 or newer GPU")
    cublas = next(r for r in table if r["is_anchor"])
    base, anchor = cublas["rate"], f"{cublas['name']}, same run"
    out = []
    for i, r in enumerate(r for r in table if not r["is_anchor"]):
        out.append(ctx.row(r["name"], r["rate"], "TFLOP/s", anchor=anchor, anchor_value=base,
                           target=0.60 if i == 0 else None,
                           note="mma.sync m16n8k16 + ldmatrix + 4-stage cp.async, 256 x 128 tiles: solutions/08"
                           if i == 0 else f"one feature of the reference changed: {r['about']}"))
    peak = ch08.mma_peak()
    out.append(ctx.row("mma.sync peak: m16n8k16 with no memory traffic (ceiling of any mma.sync kernel)", peak,
                       "TFLOP/s", anchor=anchor, anchor_value=base,
                       note="cuBLAS reaches beyond it with Hopper's wgmma"))

    # the lesson's first mma.sync GEMM and the graded references, float out, launched with the grader's
    # geometry (the specs' launch functions)
    from autograder import get_exercise
    simple = ch08.simple_gemm()
    graded = {}
    for name in ("wmma_gemm", "mma_gemm"):
        ex = get_exercise("08_tensor_cores", name)
        graded[name] = (ex, course.compile(course.solution_source("08_tensor_cores", ex.source_file)).kernel(ex.kernel))

    def launcher(name, a, b, c):
        if name == "simple":
            return lambda: simple(a, b, c)
        ex, kern = graded[name]
        (m, k), n = a.shape, b.shape[1]
        grid, block, smem = ex.launch({"m": m, "n": n, "k": k}, ex.launch_defaults)
        return lambda: kern(grid, block, a, b, c, m, n, k, shared_mem=smem)

    # every output checked first, at shapes each contract allows but no tile divides
    for name, shape in (("simple", (512, 640, 256)), ("wmma_gemm", (272, 144, 528)), ("mma_gemm", (1009, 1032, 1000))):
        sa, sb, sc = course.gemm.make_inputs(*shape, "bf16", seed=8, out="float32")
        launcher(name, sa, sb, sc)()
        res = course.gemm.check_gemm(sc, sa, sb, "bf16", name=name)
        if not res:
            raise course.CheckError(f"{name} wrong at {shape}: {res.message}")
    a, b, c32 = course.gemm.make_inputs(size, size, size, "bf16", seed=7, out="float32")
    runs = {k: launcher(name, a, b, c32) for k, name in (("simple", "simple"), ("wmma", "wmma_gemm"),
                                                          ("graded", "mma_gemm"))}
    t = ctx.interleaved(runs)
    tf = {k: v.tflops(flops) for k, v in t.items()}
    out += [
        ctx.row("graded mma_gemm reference (float out)", tf["graded"], "TFLOP/s", anchor=anchor, anchor_value=base,
                note="writes 4-byte outputs: 2x the bytes of cuBLAS's bf16 C"),
        ctx.row("lesson's first mma.sync GEMM (64 x 64 tiles, no cp.async, padded rows)", tf["simple"], "TFLOP/s",
                anchor="graded mma_gemm reference (float out)", anchor_value=tf["graded"]),
        ctx.row("graded wmma_gemm reference (one warp per 16 x 16 tile, no shared memory)", tf["wmma"], "TFLOP/s",
                anchor="graded mma_gemm reference (float out)", anchor_value=tf["graded"]),
    ]
    return out
