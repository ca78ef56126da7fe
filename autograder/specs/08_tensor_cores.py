"""Chapter 08 (tensor cores): BF16 inputs, FP32 accumulation and output, row-major matrices.

bf16 values travel as their bits (uint16 arrays, `unsigned short*` in the kernel); the inputs are
uniform in [-1, 1) rounded to bf16, and the float64 reference multiplies those rounded values, so only
FP32 accumulation separates a correct kernel from it (rtol 1e-4 plus 1e-5 x the largest output).

wmma_gemm: WMMA fragments, M, N, K multiples of 16; correctness points only. Needs sm_80 (bf16 WMMA).

mma_gemm: mma.sync m16n8k16 by inline PTX, any M, N and K multiples of 8. The grader confirms HMMA
instructions in the student's SASS (no tensor cores: no points). Speed points against
solutions/08_tensor_cores/mma_gemm.cu (ldmatrix, 4-stage cp.async, XOR swizzle; float output) at
4096^3: full at 0.5 of it, half at 0.25. On an H100 the lesson's first mma.sync GEMM (no cp.async,
padded shared memory, 64 x 64 tiles) ran at 96 TFLOP/s, about 0.2 of the reference: correct, no speed
points.
Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, Out, Points, Scalar, Tolerance, cdiv
from course.cublas import bf16_product64, bf16_uniform


def reference(v):
    return {"c": bf16_product64(v["a"], v["b"])}


def _params():
    return [
        In("a", np.uint16, ("m", "k"), gen=bf16_uniform),
        In("b", np.uint16, ("k", "n"), gen=bf16_uniform),
        Out("c", np.float32, ("m", "n")),
        Scalar("m", "int", "m"),
        Scalar("n", "int", "n"),
        Scalar("k", "int", "k"),
    ]


def wmma_launch(sizes, cfg):
    return (cdiv(sizes["n"], 64), sizes["m"] // 16), 128, 0


def mma_launch(sizes, cfg):
    grid = cdiv(sizes["m"], cfg["bm"]) * cdiv(sizes["n"], cfg["bn"])
    return grid, cfg["threads"], cfg["smem"]


EXERCISES = [
    Exercise(
        name="wmma_gemm",
        kernel="wmma_gemm",
        source_file="wmma_gemm.cu",
        description=("c = a @ b with a (m x k) and b (k x n) bf16 bits, c float, row-major; m, n, k multiples "
                     "of 16. WMMA 16 x 16 x 16 fragments, one warp per 16 x 16 tile of c: grid "
                     "(ceil(n / 64), m / 16), block 128 (4 warps along n)."),
        params=_params(),
        sizes=[{"m": 16, "n": 16, "k": 16}, {"m": 48, "n": 80, "k": 32}, {"m": 272, "n": 144, "k": 528},
               {"m": 1024, "n": 1040, "k": 512}, {"m": LARGER_THAN_L2, "n": 272, "k": 64}],
        size_multiples={"m": 16, "n": 16, "k": 16},
        launch=wmma_launch,
        launch_defaults={},
        reference=reference,
        tolerance=Tolerance(rtol=1e-4),
        points=Points(correctness=5, speed=0),
        min_cc=(8, 0),
        timeout_s=20.0,
        peak="bf16",             # tensor cores (no floor_flops here: correctness points only)
        # hidden sizes: m, n, k multiples of 16 (size_multiples, WMMA's contract); a block covers 16 rows and
        # 64 columns (4 warps along n), so n = 64 j +- 16 leaves warps of a block idle
        tile={"m": 16, "n": 64, "k": 16},
        required_techniques=("tensor_cores",),   # a CUDA-core GEMM is not the exercise: failed, not slow
    ),
    Exercise(
        name="mma_gemm",
        kernel="mma_gemm",
        source_file="mma_gemm.cu",
        description=("c = a @ b with a (m x k) and b (k x n) bf16 bits, c float, row-major; any m, n and k "
                     "multiples of 8. mma.sync m16n8k16 tensor-core instructions (inline PTX). 1-D grid of "
                     "ceil(m / bm) * ceil(n / bn) blocks; LAUNCH sets bm, bn, threads and smem (dynamic "
                     "shared bytes); the defaults are the reference's 256 x 128, 256 threads, 98304 bytes."),
        params=_params(),
        sizes=[{"m": 1, "n": 8, "k": 8}, {"m": 129, "n": 136, "k": 40}, {"m": 777, "n": 264, "k": 520},
               {"m": 1009, "n": 1032, "k": 1000}, {"m": 256, "n": 512, "k": 4096},
               {"m": LARGER_THAN_L2, "n": 264, "k": 64}],
        size_multiples={"n": 8, "k": 8},
        speed_size={"m": 4096, "n": 4096, "k": 4096},
        launch=mma_launch,
        launch_defaults={"bm": 256, "bn": 128, "threads": 256, "smem": 98304},
        reference=reference,
        tolerance=Tolerance(rtol=1e-4),
        points=Points(correctness=4, speed=6),
        speed_threshold=0.5,
        speed_tiers=((0.25, 0.5),),
        required_techniques=("tensor_cores",),   # HMMA, or HGMMA where an sm_90a kernel uses wgmma: else failed
        min_cc=(8, 0),
        floor_flops=lambda s: 2 * s["m"] * s["n"] * s["k"],
        peak="bf16",             # BF16 tensor cores: the FLOP floor is floor_flops / the BF16 peak
        timeout_s=20.0,
        # hidden sizes: any m, n and k multiples of 8 (size_multiples; cp.async moves 16-byte row pieces), around
        # the default launch's 256 x 128 block tile and its 32-deep k stages (n = 128 j +- 8, k = 32 j +- 8)
        tile={"m": 256, "n": 128, "k": 32},
    ),
]
