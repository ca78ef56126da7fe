"""Chapter 06 (building blocks): a two-stage sum, a full-array scan and a 256-bin histogram.

The sum and the scan each run in a single launch (the grader launches one kernel per exercise): the
sum's second stage is done by the last block to finish, the scan is a single pass with decoupled
look-back. Both keep their cross-block state in __device__ globals that every launch leaves clean.
Inputs of the sum and the scan are small integers stored as floats: every partial sum is then exact in
float32, whatever the order of the adds, so the results are compared bit for bit and a single lost
element fails. Reference kernels: solutions/06_building_blocks/. Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, Out, Points, Scalar, Uniform, cdiv

MAX_BLOCKS = 1024        # reduce_sum: g_partials holds one float per block
SCAN_TILE = 4096         # scan_inclusive: 256 threads x 16 floats per block


def small_integers(rng, shape, dtype):
    """Integers in [-4, 4] as floats: partial sums stay exact integers far below 2^24."""
    return rng.integers(-4, 5, size=shape).astype(dtype)


def _block(cfg):
    block = cfg["block"]
    if not isinstance(block, int) or block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"block should be a multiple of 32 from 32 to 1024; got {block!r}")
    return block


def reduce_launch(sizes, cfg):
    block = _block(cfg)
    return min(cdiv(sizes["n"], block * 16), MAX_BLOCKS), block, 0


def scan_launch(sizes, cfg):
    return cdiv(sizes["n"], cfg["tile"]), _block(cfg), 0


def histogram_launch(sizes, cfg):
    block = _block(cfg)
    return min(cdiv(sizes["n"], block * 16), cfg["max_blocks"]), block, 0


def reduce_reference(v):
    return {"out": np.array([v["x"].astype(np.float64).sum()])}


def scan_reference(v):
    return {"y": np.cumsum(v["x"].astype(np.float64))}


def histogram_reference(v):
    return {"hist": np.bincount(v["data"], minlength=256)[:256]}


SIZES = [{"n": 1}, {"n": 33}, {"n": 4097}, {"n": 1_000_003}, {"n": LARGER_THAN_L2}]

EXERCISES = [
    Exercise(
        name="reduce_sum",
        kernel="reduce_sum",
        source_file="reduce_sum.cu",
        description=("*out = x[0] + ... + x[n-1] in one launch of at most 1024 blocks (grid-stride): each block "
                     "writes a partial, the last block to finish adds the partials and writes *out."),
        params=[In("x", np.float32, "n", gen=small_integers), Out("out", np.float32, 1), Scalar("n", "int", "n")],
        sizes=SIZES,
        launch=reduce_launch,
        launch_defaults={"block": 256},
        reference=reduce_reference,
        tolerance="exact",
        points=Points(correctness=6, speed=4),
        speed_threshold=0.8,
        speed_tiers=((0.5, 0.5),),
        floor_bytes=lambda s: 4 * s["n"],
        # hidden sizes around a block's launch share (256 threads x 16); n % 4 != 0 tests the float4 tail
        tile={"n": 4096},
        techniques=("vector_loads_128",),   # the exercise asks for float4 loads: speed points need them
    ),
    Exercise(
        name="scan_inclusive",
        kernel="scan_inclusive",
        source_file="scan_inclusive.cu",
        description=("y[i] = x[0] + ... + x[i] in one launch of ceil(n / tile) blocks (LAUNCH 'tile', default "
                     "4096 = 256 threads x 16): a single pass with decoupled look-back."),
        params=[In("x", np.float32, "n", gen=small_integers), Out("y", np.float32, "n"), Scalar("n", "int", "n")],
        sizes=SIZES,
        launch=scan_launch,
        launch_defaults={"block": 256, "tile": SCAN_TILE},
        reference=scan_reference,
        tolerance="exact",
        points=Points(correctness=6, speed=4),
        speed_threshold=0.7,
        speed_tiers=((0.4, 0.5),),
        floor_bytes=lambda s: 8 * s["n"],
        timeout_s=20,
        tile={"n": SCAN_TILE},   # hidden sizes around the scan tile (a partial last tile, float4 tails)
        techniques=("vector_loads_128",),   # the exercise asks for neighbouring float4 loads
    ),
    Exercise(
        name="histogram256",
        kernel="histogram256",
        source_file="histogram256.cu",
        description=("hist[b] += count of data[i] == b for 256 bins, data in [0, 256); hist arrives zeroed. "
                     "Grid capped at 512 blocks of 512 threads: privatize per block in shared memory."),
        params=[In("data", np.int32, "n", gen=Uniform(0, 255)), Out("hist", np.uint32, 256, fill=0),
                Scalar("n", "int", "n")],
        sizes=SIZES,
        launch=histogram_launch,
        launch_defaults={"block": 512, "max_blocks": 512},
        reference=histogram_reference,
        points=Points(correctness=6, speed=4),
        speed_threshold=0.8,
        speed_tiers=((0.5, 0.5),),
        floor_bytes=lambda s: 4 * s["n"],
        tile={"n": 512 * 16},    # hidden sizes around a default block's share (512 threads x 16)
    ),
]
