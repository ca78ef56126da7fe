"""Chapter 13 (Hopper GEMM: TMA, wgmma, mbarrier pipelines, warp specialization, clusters): the ladder's launches.

The kernels live in the notebook's `%%cuda` cells (each step includes the `hopper_parts` cell). This module
knows how each step is launched (threads, dynamic shared memory, the boxes of its TMA maps, its grid), checks
every step at a shape no tile divides, and times the ladder against cuBLAS BF16 on the same inputs with
`course.variants.compare`; the benchmark rows build the same table. C = A B^T: A is M x K and B is N x K, both
row-major BF16 (K-major, as wgmma reads them), C is BF16. Section 4's CuTe kernel (`CUTE`, a cell that includes
CuTe's headers: the optional `cute` extra) takes step 3's tiling, launch and tensor maps, and `compare_cute` times
it beside step 3 and cuBLAS.
"""
from __future__ import annotations

import course
from course.gemm import check_gemm, gemm_flops, make_inputs
from course.variants import Variant, compare

__all__ = ["CHAPTER", "SIZE", "LADDER", "STAGE_BYTES", "CUTE", "CUTE_MIRRORS", "grid_of", "launcher", "inputs",
           "ladder_variants", "compare_ladder", "compare_cute"]

CHAPTER = "13_hopper_gemm"
SIZE = 4096
STAGE_BYTES = (128 + 256) * 64 * 2     # one pipeline slot: A's 128 x 64 and B's 256 x 64 BF16 tiles
_ALIGN = 1024                          # the kernels round the dynamic shared memory up to a 1024-byte start

# step -> launch: threads, dynamic shared bytes, rows of the A and B boxes (64 BF16 wide, 128-byte swizzle),
# the grid's kind, whether C is written through a TMA map, and the idea the step adds
LADDER = {
    "hg1_tma_wgmma": (128, 0, 64, 128, "tiles64", False, "TMA loads into 128B-swizzled tiles, one warpgroup's wgmma"),
    "hg2_big_tile": (256, STAGE_BYTES + _ALIGN, 128, 256, "tiles", False, "a 128 x 256 tile, two warpgroups"),
    "hg3_pipeline": (256, 4 * STAGE_BYTES + _ALIGN, 128, 256, "tiles", False, "4 slots of tiles in flight"),
    "hg4_specialized": (384, 4 * STAGE_BYTES + _ALIGN, 128, 256, "tiles", False,
                        "a producer warpgroup, two consumers, full/empty barriers, setmaxnreg"),
    "hg5_persistent": (384, 4 * STAGE_BYTES + _ALIGN, 128, 256, "persistent", False,
                       "one block per SM walking tiles in an L2-friendly order"),
    "hg6_cluster": (384, 4 * STAGE_BYTES + _ALIGN, 128, 128, "cluster", False,
                    "clusters of 2 sharing B through TMA multicast"),
    "hg7_tma_store": (384, 4 * STAGE_BYTES + 32768 + _ALIGN, 128, 128, "cluster", True,
                      "the epilogue through shared memory and TMA stores"),
}

# Section 4: step 3's tiling (128 x 256 tiles, two consumer warpgroups, 4 TMA slots, a __syncthreads a slice)
# written with CuTe's layouts and atoms; launched exactly as step 3, so the two differ only in how they are written.
CUTE, CUTE_MIRRORS = "cute_gemm", "hg3_pipeline"
_LAUNCH = {**LADDER, CUTE: LADDER[CUTE_MIRRORS][:-1] + ("step 3's tiling written with CuTe's layouts and atoms",)}


def grid_of(step: str, kernel, m: int, n: int):
    """The step's grid for an M x N result: one block per tile, or a persistent grid (one block per SM, or as
    many clusters of two as can run at once: a cluster that waited for a free pair of SMs would start its share
    of the tiles only when a whole cluster had finished)."""
    threads, smem, _, _, kind, _, _ = _LAUNCH[step]
    tiles = course.grid_for(n, 256) * course.grid_for(m, 128)
    if kind == "tiles64":
        return course.grid_for(n, 128), course.grid_for(m, 64)
    if kind == "tiles":
        return course.grid_for(n, 256), course.grid_for(m, 128)
    if kind == "persistent":
        return min(course.device_info().sm_count, tiles)
    pairs = course.grid_for(n, 256) * course.grid_for(m, 256)
    return 2 * min(kernel.max_active_clusters(threads, smem, 2), pairs)


def launcher(step: str, kernel=None):
    """``run(a, b, c)`` for BF16 bits a (M x K), b (N x K) and c (M x N): the step's kernel (default: compiled
    from its cell) with TMA maps of a and b (and c) encoded for these arrays and its grid."""
    k = kernel or course.lesson_cell(CHAPTER, step).kernel(step)
    threads, smem, a_rows, b_rows, _, c_map, _ = _LAUNCH[step]

    def run(a, b, c):
        (m, kk), n = a.shape, b.shape[0]
        maps = [course.tma.tensor_map(a, (a_rows, 64), swizzle="128B"),
                course.tma.tensor_map(b, (b_rows, 64), swizzle="128B")]
        last = course.tma.tensor_map(c, (64, 64), swizzle="128B") if c_map else c
        grid = grid_of(step, k, m, n)
        return lambda: k(grid, threads, *maps, last, m, n, kk, shared_mem=smem)
    return run


def inputs(m: int, n: int, k: int, seed: int):
    """a (M x K), b as N x K (K-major), c (M x N, NaN-poisoned BF16 bits) and b as K x N for the checks and
    cuBLAS."""
    import cupy
    a, b_kn, c = make_inputs(m, n, k, "bf16", seed=seed)
    return a, cupy.ascontiguousarray(b_kn.T), c, b_kn


def ladder_variants(size: int = SIZE, steps=None, kernels=None, check_shape=(300, 776, 200)) -> tuple:
    """``(variants, anchors)`` for `course.variants.compare`: every step checked at ``check_shape`` (partial
    tiles in M, N and K) and timed at size^3; cuBLAS BF16 (BF16 out) on the same inputs as the anchor.
    ``kernels``: name -> compiled kernel (the notebook's), else each step's cell is compiled here."""
    a, b, c, b_kn = inputs(size, size, size, seed=1)
    variants = []
    for step in steps or LADDER:
        run = launcher(step, (kernels or {}).get(step))

        def check(run=run, step=step):
            sa, sb, sc, sb_kn = inputs(*check_shape, seed=check_shape[0])
            run(sa, sb, sc)()
            return check_gemm(sc, sa, sb_kn, "bf16", name=f"{step} at {'x'.join(map(str, check_shape))}")
        variants.append(Variant(step, run(a, b, c), check=check, about=_LAUNCH[step][-1]))
    anchor = Variant(f"cuBLAS BF16 {size}^3 (bf16 out)", lambda: course.cublas.gemm(a, b_kn, c, compute="bf16"))
    return variants, [anchor]


def compare_ladder(size: int = SIZE, steps=None, kernels=None, **kw):
    """The ladder as one `course.variants.Comparison`; [] with a sentence where this GPU is not sm_90."""
    if course.device_info().cc != (9, 0):
        print(f"The ladder runs on sm_90 (H100, H200): wgmma and setmaxnreg exist only in sm_90a. "
              f'course.results.show_recorded("{CHAPTER}") prints the recorded one.')
        return []
    variants, anchors = ladder_variants(size, steps, kernels)
    kw = {"budget_s": 1.5, "max_samples": 30,
          "title": f"the Hopper ladder at {size}^3 (BF16 in, FP32 accumulate, BF16 out)", **kw}
    return compare(variants, anchors=anchors, work=gemm_flops(size, size, size), unit="TFLOP/s", **kw)


def compare_cute(size: int = SIZE, kernels=None, **kw):
    """The CuTe kernel beside the step it mirrors and cuBLAS BF16, each checked first (`ladder_variants`); [] with
    one sentence where this GPU is not sm_90 or CuTe's headers are not installed."""
    ok, why = course.cute.available()
    if not ok:
        print(why)
        return []
    kw = {"title": f"step 3 by hand and in CuTe at {size}^3 (BF16 in, FP32 accumulate, BF16 out)", **kw}
    return compare_ladder(size, steps=[CUTE_MIRRORS, CUTE], kernels=kernels, **kw)
