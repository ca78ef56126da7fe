"""Chapter 16 (several GPUs): one step of a ring all-reduce, graded as a kernel and timed as a ring against NCCL.

ring_step(mine, left, n, rank, world, step): GPU `rank` of `world` works on chunk c = (rank - step - 1) mod world
of its n floats, reading the same chunk of its left neighbour's buffer through peer access: it adds it in the
first world - 1 steps (reduce-scatter) and copies it in the last world - 1 (all-gather). Chunks hold
ceil(n / world) rounded up to a multiple of 4 elements (course.multi_gpu.ring_chunk), so each starts 16-byte
aligned and the last ones may be short or empty.

Correctness, one step at a time on one GPU (`left` is then a second buffer there): every size case draws a
rank in [0, world) and a step in [0, 2 (world - 1)) from the grading's secret seed, so across the public and
hidden cases both phases and every kind of chunk (full, short, empty) come up. world = 1 is part of the
contract (the kernel's formula, not a special case): step 0, chunk 0 = the whole array, copied. A step is one float addition or
copy per element, so its output must match bit for bit.

Speed (autograder/ring.py, ring_timing.py): on a machine with two or more GPUs the whole ring all-reduce of
256 MiB per GPU runs on its first two with the student's kernel on each, timed interleaved with NCCL's all-reduce
of the same bytes; the ratio is NCCL's time over the student ring's, i.e. its share of NCCL's bus bandwidth.
The first two rings use integer-valued data and must give the exact sum; every timed run has fresh floats and
is checked against the float64 sum. With one GPU the exercise is skipped (its points are left out of the total)
and the notebook's self-check runs the whole ring on one GPU instead.
Reference kernel: solutions/16_multi_gpu/. Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, InOut, Points, Ring, Scalar, cdiv
from course.multi_gpu import ring_chunk_bounds


def _rank(sizes, rng):
    return int(rng.integers(sizes["world"]))


def _step(sizes, rng):
    return int(rng.integers(max(1, 2 * (sizes["world"] - 1))))


def ring_launch(sizes, cfg):
    """A chunk's float4s over `block`-thread blocks, at most `blocks` of them (a grid-stride loop does the rest)."""
    block, blocks = cfg["block"], cfg["blocks"]
    if not isinstance(block, int) or block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"block should be a multiple of 32 from 32 to 1024; got {block!r}")
    if not isinstance(blocks, int) or not 1 <= blocks <= 65535:
        raise ValueError(f"blocks should be an int from 1 to 65535; got {blocks!r}")
    return max(1, min(cdiv(cdiv(sizes["n"], sizes["world"]), 4 * block), blocks)), block, 0


def step_reference(v):
    n, world, rank, step = int(v["n"]), int(v["world"]), int(v["rank"]), int(v["step"])
    mine = v["mine"].copy()
    lo, hi = ring_chunk_bounds(n, world, (rank - step - 1) % world)
    if step < world - 1:
        mine[lo:hi] = mine[lo:hi] + v["left"][lo:hi]   # float32 + float32: one rounding, as on the GPU
    else:
        mine[lo:hi] = v["left"][lo:hi]
    return {"mine": mine}


EXERCISES = [
    Exercise(
        name="ring_step",
        kernel="ring_step",
        source_file="ring_step.cu",
        description=("One step of a ring all-reduce on GPU rank of world: chunk c = (rank - step - 1) mod world "
                     "(chunks of ceil(n / world) rounded up to a multiple of 4 floats; the last may be short or "
                     "empty); mine[c] += left[c] for step < world - 1, else mine[c] = left[c]. left is the left "
                     "neighbour's buffer (a peer pointer). Grid: min(ceil(ceil(n / world) / (4 block)), blocks) "
                     "blocks of `block` threads (defaults 512 and 1024). Timed as the whole ring against NCCL on "
                     "two or more GPUs."),
        params=[InOut("mine", np.float32, "n"), In("left", np.float32, "n"), Scalar("n", "int", "n"),
                Scalar("rank", "int", _rank), Scalar("world", "int", "world"), Scalar("step", "int", _step)],
        sizes=[{"n": 1, "world": 1}, {"n": 33, "world": 3}, {"n": 4097, "world": 2}, {"n": 1_000_003, "world": 8},
               {"n": 100_000, "world": 4}, {"n": 65_536, "world": 2}, {"n": LARGER_THAN_L2, "world": 2}],
        launch=ring_launch,
        launch_defaults={"block": 512, "blocks": 1024},
        reference=step_reference,
        tolerance="exact",
        points=Points(correctness=6, speed=4),
        ring=Ring(gpus=2, nbytes=256 << 20),
        # Calibration (speed = NCCL's time / the student ring's, i.e. the share of NCCL's bus bandwidth, 256 MiB
        # per GPU, NVLink multicast off): to be set from the two-H200 run of the reference ring and the corpus.
        speed_threshold=0.6,
        speed_tiers=((0.3, 0.5),),
        floor_bytes=lambda s: 12 * s["n"],   # one step: mine read and written, left read (not timed alone)
        # hidden sizes around a chunk of a default launch's block (512 threads x 4 floats), and rings of 1 to 8
        # GPUs drawn around 8 (odd and even counts, chunks that do and do not divide n)
        tile={"n": 4 * 512, "world": 8},
        size_range={"world": (1, 8)},
    ),
]
