"""Chapter 10 (cuBLAS): the two kernels that sit around a library GEMM on row-major data.

The grader runs CUDA sources only, so the library calls themselves are taught and measured in the
lesson; what is graded is the student's part of the contract:

- ``bias_relu``: the epilogue a matmul needs when the library does not fuse it, c = max(0, c + bias[col])
  in place over a row-major m x n matrix. Memory-bound: graded against the reference at the copy rate.
  The lesson then beats it with cuBLASLt's fused RELU_BIAS epilogue.
- ``colmajor_index``: turning a column-major result with a leading dimension (what cuBLAS writes when
  called without the operand swap, possibly into a padded allocation) into the row-major matrix the rest
  of the program expects. Graded mostly on getting ``r + c * lda`` right on non-square shapes with
  lda > rows; the speed points ask for a tiled (coalesced) copy, as chapter 05's transpose.

Reference kernels: solutions/10_cublas/. Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, InOut, Out, Points, Scalar, cdiv

BLOCK = (32, 8)
MAX_GRID = (32, 4096)    # bias_relu: grid-stride in both dimensions, the kernel must loop
# (a (64, 256) cap, fewer and longer-lived blocks, measured slower on an H100: 0.70 vs 0.74 of copy)


def bias_relu_launch(sizes, cfg):
    grid = (min(cdiv(sizes["n"], 128), MAX_GRID[0]), min(cdiv(sizes["m"], BLOCK[1]), MAX_GRID[1]))
    return grid, BLOCK, 0


def bias_relu_reference(v):
    return {"c": np.maximum(v["c"] + v["bias"][None, :], np.float32(0))}


def colmajor_launch(sizes, cfg):
    return (cdiv(sizes["cols"], 32), cdiv(sizes["rows"], 32)), BLOCK, 0


def colmajor_reference(v):
    # a column-major rows x cols matrix with leading dimension lda is, byte for byte, the C-order
    # (cols, lda) array `a`, of which the first `rows` entries of every row are the matrix
    return {"out": np.ascontiguousarray(v["a"][:, :v["rows"]].T)}


EXERCISES = [
    Exercise(
        name="bias_relu",
        kernel="bias_relu",
        source_file="bias_relu.cu",
        description=("c[i][j] = max(0, c[i][j] + bias[j]) in place on a row-major m x n matrix. Block (32, 8), "
                     "grid capped at (32, 4096): loop over rows and columns; x should index columns."),
        params=[
            InOut("c", np.float32, ("m", "n")),
            In("bias", np.float32, "n"),
            Scalar("m", "int", "m"),
            Scalar("n", "int", "n"),
        ],
        sizes=[{"m": 1, "n": 1}, {"m": 1, "n": 100_003}, {"m": 1009, "n": 37}, {"m": 37, "n": 1009},
               {"m": 300, "n": 4099}, {"m": LARGER_THAN_L2, "n": 4099}],
        launch=bias_relu_launch,
        launch_defaults={},
        reference=bias_relu_reference,
        tolerance="exact",   # one add and one max: the same rounding everywhere
        points=Points(correctness=4, speed=6),
        # read c once, write it once: the copy ceiling; 0.7 leaves room for a one-float-per-thread loop
        # that is coalesced, and fails a loop whose lanes walk down columns (as in chapter 04)
        speed_threshold=0.7,
        floor_bytes=lambda s: 8 * s["m"] * s["n"] + 4 * s["n"],
    ),
    Exercise(
        name="colmajor_index",
        kernel="colmajor_index",
        source_file="colmajor_index.cu",
        description=("out[r * cols + c] = a[r + c * lda]: the row-major copy of a column-major rows x cols "
                     "matrix with leading dimension lda >= rows. Block (32, 8), grid (ceil(cols / 32), "
                     "ceil(rows / 32)): one 32 x 32 tile a block."),
        params=[
            In("a", np.float32, ("cols", "lda")),      # column-major, leading dimension lda = C-order (cols, lda)
            Out("out", np.float32, ("rows", "cols")),
            Scalar("rows", "int", "rows"),
            Scalar("cols", "int", "cols"),
            Scalar("lda", "int", "lda"),
        ],
        sizes=[{"rows": 1, "cols": 1, "lda": 1}, {"rows": 1, "cols": 1009, "lda": 7},
               {"rows": 1009, "cols": 1, "lda": 1009}, {"rows": 37, "cols": 1009, "lda": 40},
               {"rows": 1009, "cols": 37, "lda": 1024}, {"rows": 300, "cols": 4099, "lda": 300},
               {"rows": 4099, "cols": LARGER_THAN_L2, "lda": 4100}],
        launch=colmajor_launch,
        launch_defaults={},
        reference=colmajor_reference,
        tolerance="exact",   # a copy
        points=Points(correctness=7, speed=3),
        # the indexing is the point here (chapter 05 grades the transpose's speed in earnest): a direct
        # one-element-per-thread copy is correct with one side uncoalesced, the tiled reference keeps both
        # sides coalesced. Full speed points at 0.6, half at 0.35; the big L2 of recent GPUs softens the
        # strided side (to confirm on a GPU: grade the exercise notebook's direct kernel, see the report)
        speed_threshold=0.6,
        speed_tiers=((0.35, 0.5),),
        floor_bytes=lambda s: 8 * s["rows"] * s["cols"],
    ),
]
