"""Chapter 13 rows: the Hopper ladder, one idea a step, against cuBLAS BF16 (BF16 in, FP32 accumulate, BF16 out)
on the same inputs in the same run, at 4096^3 and 8192^3.

The table is the lesson's own (`ch13.compare_ladder`, a `course.variants.compare` that checks every step at a
shape no tile divides before timing any). One more pair: step 6 as it is against step 6 built with
-DCLUSTER_RELEASE, whose remote arrivals carry release semantics at cluster scope (the section 3 text quotes
it). The issue's goal is 0.90 x cuBLAS at both sizes on the H100 for
the chapter's best kernel (step 7, and the graded hopper_gemm reference, the same kernel with FP32 stores,
timed against cuBLAS BF16 with FP32 out through the spec's own launch). Steps 1 and 2 are
left out at 8192^3, where they only cost time. Section 4's CuTe kernel (step 3's tiling written with CuTe) is timed
at 4096^3 beside step 3 and cuBLAS BF16 in one run, where CuTe's headers are installed (the optional `cute`
extra). Needs sm_90 (wgmma, setmaxnreg and TMA are in sm_90a only): on another GPU the chapter has no rows.
"""
from __future__ import annotations

CHAPTER = "13_hopper_gemm"
TARGETED = ("hg7_tma_store",)        # the chapter's best step: the goal is its ratio


def rows(ctx) -> list:
    import course
    from course.lessons import ch13
    if course.device_info().cc != (9, 0):
        return []
    out = []
    for size in (4096, 8192):
        steps = [s for s in ch13.LADDER if size == 4096 or s not in ("hg1_tma_wgmma", "hg2_big_tile")]
        table = ch13.compare_ladder(size, steps=steps, verbose=False, progress=False)
        cublas = next(r for r in table if r["is_anchor"])
        for r in table:
            if r["is_anchor"]:
                continue
            out.append(ctx.row(f"{r['name']} {size}^3", r["rate"], "TFLOP/s", anchor=f"{cublas['name']}, same run",
                               anchor_value=cublas["rate"], target=0.90 if r["name"] in TARGETED else None,
                               note=r["about"]))
    a, b, c, _ = ch13.inputs(4096, 4096, 4096, seed=3)
    cell = course.lesson_cell(CHAPTER, "hg6_cluster")
    runs = {"default": ch13.launcher("hg6_cluster", cell.kernel())(a, b, c),
            "release": ch13.launcher("hg6_cluster", cell.kernel(options=["-DCLUSTER_RELEASE"]))(a, b, c)}
    t = ctx.interleaved(runs)
    flops = course.gemm.gemm_flops(4096, 4096, 4096)
    out.append(ctx.row("hg6_cluster with .release.cluster remote arrivals 4096^3", t["release"].tflops(flops),
                       "TFLOP/s", anchor="hg6_cluster as in the chapter, same run",
                       anchor_value=t["default"].tflops(flops),
                       note="every remote mbarrier.arrive a release fence at cluster scope"))
    out += _graded_rows(ctx)
    out += _cute_rows(ctx)
    return out


def _cute_rows(ctx) -> list:
    """The CuTe kernel at 4096^3 against cuBLAS BF16 and against step 3, the hand-written kernel it mirrors, all
    three checked first and timed in one run (`ch13.compare_cute`); none without CuTe's headers."""
    import course
    from course.lessons import ch13
    if not course.cute.available()[0]:
        return []
    table = ch13.compare_cute(4096, verbose=False, progress=False)
    by_name = {r["name"]: r for r in table}
    cublas = next(r for r in table if r["is_anchor"])
    cute, by_hand = by_name[ch13.CUTE], by_name[ch13.CUTE_MIRRORS]
    note = f"{cute['about']} (CUTLASS {course.cute.version()} headers through NVRTC)"
    return [ctx.row(f"{ch13.CUTE} (CuTe) 4096^3", cute["rate"], "TFLOP/s", anchor=f"{cublas['name']}, same run",
                    anchor_value=cublas["rate"], note=note),
            ctx.row(f"{ch13.CUTE} (CuTe) against {ch13.CUTE_MIRRORS} 4096^3", cute["rate"], "TFLOP/s",
                    anchor=f"{ch13.CUTE_MIRRORS} (step 3 by hand), same run", anchor_value=by_hand["rate"],
                    note="the same tiling, launch and tensor maps")]


def _graded_rows(ctx) -> list:
    """The graded hopper_gemm reference (FP32 out) against cuBLAS BF16 in, FP32 out, at both sizes, launched with
    the spec's launch and boxes and checked first."""
    import cupy
    import course
    from autograder import get_exercise
    from course.lessons import ch13
    ex = get_exercise(CHAPTER, "hopper_gemm")
    cfg = ex.launch_defaults
    kern = course.compile(course.solution_source(CHAPTER, ex.source_file), arch="sm_90a").kernel(ex.kernel)
    out = []
    for size in (4096, 8192):
        a, b, _, b_kn = ch13.inputs(size, size, size, seed=5)
        c = cupy.full((size, size), cupy.nan, dtype=cupy.float32)
        grid, block, smem = ex.launch({"m": size, "n": size, "k": size}, cfg)
        maps = [course.tma.tensor_map(a, (cfg["bm"], 64), swizzle="128B"),
                course.tma.tensor_map(b, (cfg["bb"], 64), swizzle="128B"),
                course.tma.tensor_map(c, (64, 32), swizzle="128B")]

        def run(maps=maps, grid=grid, smem=smem, size=size):
            kern(grid, block, *maps, size, size, size, shared_mem=smem)
        run()
        res = course.gemm.check_gemm(c, a, b_kn, "bf16", name=f"hopper_gemm reference at {size}^3")
        if not res:
            raise course.CheckError(res.message)
        c_blas = cupy.empty((size, size), dtype=cupy.float32)
        t = ctx.interleaved({"ref": run, "cublas": lambda: course.cublas.gemm(a, b_kn, c_blas, compute="bf16_f32")})
        flops = course.gemm.gemm_flops(size, size, size)
        out.append(ctx.row(f"graded hopper_gemm reference (FP32 out) {size}^3", t["ref"].tflops(flops), "TFLOP/s",
                           anchor="cuBLAS BF16 in, FP32 out, same run", anchor_value=t["cublas"].tflops(flops),
                           target=0.90, note="step 7 with FP32 results: solutions/13_hopper_gemm/hopper_gemm.cu"))
    return out
