"""Chapter 13 (Hopper GEMM): a single-warpgroup TMA + wgmma tile GEMM, and a full GEMM graded in speed tiers.

Both compute c = a b^T in FP32 from BF16 bits: a is m x k and b is n x k, row-major (K-major, the layout wgmma
reads without a transpose), c is m x n floats. The kernels never see a or b as pointers: the grader encodes
a TMA map of each (`TensorMap`, the 128-byte swizzle, boxes from the LAUNCH data) and passes it by value, a
fresh one for every input set; hopper_gemm writes c through a map too (TMA stores, which clip at the edges). m is any size; n and k are multiples of 8, so that every row is whole 16-byte
pieces (TMA's pitch rule) and c's columns pair up. The TMA fills the parts of a box beyond the matrix with
zeros, so partial tiles need no bounds checks on the loads; the stores of c need them.

Both need an sm_90 GPU (`arch="sm_90a"`: wgmma and setmaxnreg exist only in that target): elsewhere they are
skipped and their points left out of the total. Both must use wgmma (HGMMA in the SASS) and TMA loads
(UTMALDG): a kernel without either fails, since the chapter's instructions are the exercise. A correct kernel
whose wgmma ptxas serialized, or that spills, keeps its correctness points and gets no speed points.
Reference kernels: solutions/13_hopper_gemm/. Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, Out, Points, Scalar, TensorMap, Tolerance, cdiv
from course.cublas import bf16_product64, bf16_uniform


def reference(v):
    return {"c": bf16_product64(v["a"], v["b"], trans_b=True)}


def _params(a_rows, b_rows, c_map=False):
    return [
        TensorMap("a", np.uint16, ("m", "k"), box=(a_rows, 64), swizzle="128B", gen=bf16_uniform),
        TensorMap("b", np.uint16, ("n", "k"), box=(b_rows, 64), swizzle="128B", gen=bf16_uniform),
        # 64 x 32 floats: 128-byte rows, the widest the 128-byte swizzle allows
        TensorMap("c", np.float32, ("m", "n"), box=(64, 32), swizzle="128B", role="out") if c_map
        else Out("c", np.float32, ("m", "n")),
        Scalar("m", "int", "m"),
        Scalar("n", "int", "n"),
        Scalar("k", "int", "k"),
    ]


def tile_launch(sizes, cfg):
    return (cdiv(sizes["n"], cfg["bn"]), cdiv(sizes["m"], cfg["bm"])), 128, 0


def gemm_launch(sizes, cfg):
    blocks = cfg["blocks"]
    if not isinstance(blocks, int) or blocks < 2 or blocks % 2:
        raise ValueError(f"blocks should be an even number of blocks (clusters of two); got {blocks!r}")
    pairs = cdiv(sizes["m"], 2 * cfg["bm"]) * cdiv(sizes["n"], cfg["bn"])
    return min(blocks, 2 * pairs), 384, cfg["smem"]


SIZES = [{"m": 1, "n": 8, "k": 8}, {"m": 129, "n": 136, "k": 40}, {"m": 777, "n": 264, "k": 520},
         {"m": 1009, "n": 1032, "k": 1000}, {"m": LARGER_THAN_L2, "n": 264, "k": 64}]
SPEED = {"m": 4096, "n": 4096, "k": 4096}
# what both exercises share: the contract (n, k multiples of 8), the product and its check, the instructions
# they must use (wgmma and TMA; serialized wgmmas or spills cost the speed points), the one target they run on
HOPPER = dict(
    size_multiples={"n": 8, "k": 8},
    speed_size=SPEED,
    reference=reference,
    tolerance=Tolerance(rtol=1e-4),
    required_techniques=("wgmma", "tma"),
    techniques=("no_wgmma_serialization", "no_local_memory"),
    arch="sm_90a",
    peak="bf16",
    floor_flops=lambda s: 2 * s["m"] * s["n"] * s["k"],
    timeout_s=20.0,
)

EXERCISES = [
    Exercise(
        name="tma_wgmma",
        kernel="tma_wgmma",
        source_file="tma_wgmma.cu",
        description=("c = a b^T, a (m x k) and b (n x k) BF16 bits reached through their TMA maps (boxes bm x 64 "
                     "and bn x 64, 128-byte swizzle), c float (m x n); n and k multiples of 8. One warpgroup "
                     "a block computes a bm x bn tile with wgmma: grid (ceil(n / bn), ceil(m / bm)), 128 "
                     "threads, no dynamic shared memory (defaults bm 64, bn 128). Needs sm_90a."),
        params=_params("bm", "bn"),
        sizes=SIZES,
        launch=tile_launch,
        launch_defaults={"bm": 64, "bn": 128},
        points=Points(correctness=6, speed=4),
        # Calibration (H200, chapter 13's ladder): step 1, this reference with BF16 out, ran at 0.51 of
        # cuBLAS, and the pipelined steps at 0.79-1.00; any single-warpgroup kernel that waits for each
        # copy lands near the reference. 0.8 gives the reference its 20% of room and separates a kernel that
        # copies element by element or serializes its wgmmas; half the points from 0.5.
        speed_threshold=0.8,
        speed_tiers=((0.5, 0.5),),
        **HOPPER,
        # hidden sizes around the default block tile (64 x 128) and the 64-deep slices of K
        tile={"m": 64, "n": 128, "k": 64},
    ),
    Exercise(
        name="hopper_gemm",
        kernel="hopper_gemm",
        source_file="hopper_gemm.cu",
        description=("c = a b^T, a (m x k) and b (n x k) BF16 bits and c (m x n) float, all three reached through "
                     "their TMA maps (boxes bm x 64, bb x 64 and 64 x 32, 128-byte swizzle; c written with TMA "
                     "stores); n and k multiples of 8. A persistent grid of min(blocks, 2 ceil(m / 2bm) "
                     "ceil(n / bn)) blocks of 384 threads with smem bytes of dynamic shared memory (defaults bm "
                     "128, bn 256, bb 128, blocks 132, smem 230400: the reference's clusters of two sharing B "
                     "through multicast). Needs sm_90a."),
        params=_params("bm", "bb", c_map=True),
        sizes=SIZES + [{"m": 2048, "n": 1536, "k": 2048}],
        launch=gemm_launch,
        launch_defaults={"bm": 128, "bn": 256, "bb": 128, "blocks": 132,
                        "smem": 4 * 49152 + 32768 + 1024},
        points=Points(correctness=4, speed=6),
        # Tiers from chapter 13's ladder (H200, ratios to cuBLAS at 4096^3, BF16 out): TMA + wgmma alone 0.51, the
        # bigger tile 0.42, a pipeline 0.79, warp specialization 0.89, persistent 0.91, clusters 0.91, and with
        # TMA stores 1.00: this reference (the same kernel, FP32 out; 0.98 of cuBLAS with FP32 out). The graded
        # corpus's no_multicast.mutant (step 6 without multicast) lands at 0.93-1.0 of it.
        # Full points at 0.85 of the reference (a specialized, pipelined kernel); 0.6 of them from 0.7 (a
        # pipeline without specialization), 0.3 from 0.45 (wgmma fed by TMA without a pipeline).
        speed_threshold=0.85,
        speed_tiers=((0.7, 0.6), (0.45, 0.3)),
        **HOPPER,
        tile={"m": 256, "n": 256, "k": 64},
    ),
]
