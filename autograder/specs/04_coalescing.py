"""Chapter 04 (coalescing): fix a kernel whose warps walk down columns of a row-major matrix.

The slow version (in the exercise notebook, not graded) maps threadIdx.x to rows: the 32 lanes of a
warp read 32 floats `cols` apart, 32 sectors per request. The fix maps threadIdx.x to columns. Both are
correct, so only the speed check can tell them apart: reaching the threshold is the proof of the fix.
Reference kernel: solutions/04_coalescing/row_scale.cu. Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, Out, Points, Scalar, Uniform, cdiv

BLOCK = (32, 8)
MAX_GRID = (32, 4096)    # grid-stride in both dimensions: the kernel must loop


def row_scale_launch(sizes, cfg):
    grid = (min(cdiv(sizes["cols"], 128), MAX_GRID[0]), min(cdiv(sizes["rows"], BLOCK[1]), MAX_GRID[1]))
    return grid, BLOCK, 0


def row_scale_reference(v):
    return {"out": v["inp"] * v["scale"][:, None]}


EXERCISES = [
    Exercise(
        name="row_scale",
        kernel="row_scale",
        source_file="row_scale.cu",
        description=("out[r][c] = in[r][c] * scale[r] on a row-major rows x cols matrix. Block (32, 8), grid "
                     "capped at (32, 4096): loop over rows and columns. Coalesced means x indexes columns."),
        params=[
            In("inp", np.float32, ("rows", "cols")),
            In("scale", np.float32, "rows", gen=Uniform(0.5, 2.0)),
            Out("out", np.float32, ("rows", "cols")),
            Scalar("rows", "int", "rows"),
            Scalar("cols", "int", "cols"),
        ],
        sizes=[{"rows": 1, "cols": 1}, {"rows": 1, "cols": 100_003}, {"rows": 1009, "cols": 37},
               {"rows": 37, "cols": 1009}, {"rows": 300, "cols": 4099}, {"rows": LARGER_THAN_L2, "cols": 4099}],
        launch=row_scale_launch,
        launch_defaults={},
        reference=row_scale_reference,
        tolerance="exact",  # one float multiply, the same rounding everywhere
        points=Points(correctness=4, speed=6),
        # the column walk moves 32 sectors per request where 4 would do; a coalesced loop, even one
        # float per thread, should clear 0.7 (tests/autograder/corpus/04_coalescing/row_scale/ holds both, graded on the GPU)
        speed_threshold=0.7,
        floor_bytes=lambda s: 8 * s["rows"] * s["cols"] + 4 * s["rows"],
        # hidden sizes around the block: 8 rows a block, 128 columns a block step (4 floats a lane, 32 apart)
        tile={"rows": 8, "cols": 128},
    ),
]
