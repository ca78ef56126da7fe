"""Chapter 10 (cuBLAS): calling cuBLAS on row-major data, and the kernels around a library GEMM.

Library calls (`CallExercise`): the student writes cublasSgemm's arguments as data in a
`%%cublas --name NAME` cell; the grader reads the dict without running anything of the student's, and
its driver (drivers.cublas_calls.grade_case) makes the call on fresh row-major inputs whose rows are
padded (leading dimensions larger than the row length, so a size passed where a row pitch belongs gives
a wrong product), with the output poisoned and its padding checked untouched. A call that would read or
write outside the buffers is refused before it reaches the GPU.

- ``sgemm_rowmajor``: c = a @ b (the operand swap: cuBLAS computes c^T = b^T a^T).
- ``linear_rowmajor``: y = x @ w^T with w stored (n x k), a linear layer's weight (transa = "T").

Kernels:

- ``sgemm_bias_relu``: the fused-epilogue matmul, c = max(0, a @ b + bias[col]) written once from
  registers. Speed points against solutions/10_cublas/sgemm_bias_relu.cu (chapter 07's register-tiled
  SGEMM with the epilogue fused) at 4096 x 4096 x 1024: full points at 0.6, half at 0.35, the tiers of
  chapter 07's sgemm_regtile. What the fusion saves there, a separate pass over C (64 MiB read and
  written, ~45 us at 3 TB/s, against ~0.8 ms of FP32 FMA), is measured by the benchmark suite.

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

from autograder import LARGER_THAN_L2, CallExercise, Exercise, In, InOut, Out, Points, Scalar, Tolerance, cdiv

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


def gemm_launch(sizes, cfg):
    return (cdiv(sizes["n"], 128), cdiv(sizes["m"], 128)), 256, 0


def enough_outputs(s):
    """size_rule of sgemm_bias_relu's hidden cases: at least 8 outputs once k > 1, as chapter 07's SGEMMs (the
    tolerance's absolute term scales with the largest output, which a few cancelling sums leave near zero)."""
    return "" if s["m"] * s["n"] >= 8 or s["k"] == 1 else f"{s['m'] * s['n']} outputs of {s['k']}-term sums (< 8)"


def gemm_bias_relu_reference(v):
    prod = v["a"].astype(np.float64) @ v["b"].astype(np.float64) + v["bias"].astype(np.float64)[None, :]
    return {"c": np.maximum(prod, 0.0).astype(np.float32)}


def _ld_rule(*pairs):
    """size_rule: each leading dimension holds its row ((ld, row length) pairs), as the driver lays rows out."""
    def rule(s):
        bad = [f"{ld} = {s[ld]} < {row} = {s[row]}" for ld, row in pairs if s[ld] < s[row]]
        return "a row pitch below its row length: " + ", ".join(bad) if bad else ""
    return rule


def _call(name, sizes, description, lds):
    calls = "drivers.cublas_calls"
    (_, (ar, ac, lda)), (_, (br, bc, ldb)), (ldc, nc) = lds
    # hidden sizes: grade_case takes any positive m, n, k and any leading dimensions that hold their rows
    # (make_case lays each operand out as rows x ld, the output as m x ldc), so hidden cases are drawn like
    # a kernel's, with that rule; case_bytes is the driver's buffers, for the 64 MiB cap of a hidden case
    return CallExercise(name=name, checker=f"{calls}:check_call", driver=f"{calls}:grade_case",
                        solution_file=f"{name}.py", sizes=sizes, points=Points(correctness=5),
                        description=description, hidden_sizes=3,
                        size_rule=_ld_rule((lda, ac), (ldb, bc), (ldc, nc)),
                        case_bytes=lambda s: 4 * (s[ar] * s[lda] + s[br] * s[ldb] + s["m"] * s[ldc]))


# row pitches equal to the row length (tight) and larger (padded), m, n and k all different so that a
# swapped size shows; K up to 4099 and pitches that are no multiple of 4
SGEMM_CALL_SIZES = [
    {"m": 1, "n": 1, "k": 1, "lda": 1, "ldb": 1, "ldc": 1},
    {"m": 33, "n": 65, "k": 17, "lda": 17, "ldb": 65, "ldc": 65},
    {"m": 1000, "n": 37, "k": 1009, "lda": 1009, "ldb": 37, "ldc": 37},
    {"m": 37, "n": 1000, "k": 300, "lda": 304, "ldb": 1024, "ldc": 1001},
    {"m": 257, "n": 130, "k": 4099, "lda": 4100, "ldb": 136, "ldc": 131},
]
LINEAR_CALL_SIZES = [
    {"m": 1, "n": 1, "k": 1, "ldx": 1, "ldw": 1, "ldy": 1},
    {"m": 33, "n": 65, "k": 17, "ldx": 17, "ldw": 17, "ldy": 65},
    {"m": 1000, "n": 37, "k": 1009, "ldx": 1009, "ldw": 1009, "ldy": 37},
    {"m": 37, "n": 1000, "k": 300, "ldx": 304, "ldw": 301, "ldy": 1001},
    {"m": 257, "n": 130, "k": 4099, "ldx": 4100, "ldw": 4103, "ldy": 131},
]

EXERCISES = [
    _call("sgemm_rowmajor", SGEMM_CALL_SIZES,
          "cublasSgemm's arguments for the row-major c (m x n) = a (m x k) @ b (k x n), rows lda, ldb, ldc "
          "floats apart.",
          (("a", ("m", "k", "lda")), ("b", ("k", "n", "ldb")), ("ldc", "n"))),
    _call("linear_rowmajor", LINEAR_CALL_SIZES,
          "cublasSgemm's arguments for y (m x n) = x (m x k) @ w^T with w stored row-major (n x k), rows ldx, "
          "ldw, ldy floats apart.",
          (("x", ("m", "k", "ldx")), ("w", ("n", "k", "ldw")), ("ldy", "n"))),
    Exercise(
        name="sgemm_bias_relu",
        kernel="sgemm_bias_relu",
        source_file="sgemm_bias_relu.cu",
        description=("c = max(0, a @ b + bias[col]), row-major float matrices (m x k, k x n, m x n), any "
                     "sizes, the epilogue applied in registers. Block 256, grid (ceil(n / 128), "
                     "ceil(m / 128)): 128 x 128 outputs per block, as chapter 07's sgemm_regtile."),
        params=[
            In("a", np.float32, ("m", "k")),
            In("b", np.float32, ("k", "n")),
            In("bias", np.float32, "n"),
            Out("c", np.float32, ("m", "n")),
            Scalar("m", "int", "m"),
            Scalar("n", "int", "n"),
            Scalar("k", "int", "k"),
        ],
        sizes=[{"m": 1, "n": 1, "k": 1}, {"m": 33, "n": 65, "k": 17}, {"m": 1000, "n": 1037, "k": 1009},
               {"m": 257, "n": 130, "k": 4099}, {"m": LARGER_THAN_L2, "n": 257, "k": 72}],
        speed_size={"m": 4096, "n": 4096, "k": 1024},
        launch=gemm_launch,
        launch_defaults={},
        reference=gemm_bias_relu_reference,
        tolerance=Tolerance(rtol=1e-4),   # as chapter 07's SGEMM; max(0, .) only removes error
        points=Points(correctness=4, speed=6),
        speed_threshold=0.6,
        speed_tiers=((0.35, 0.5),),
        floor_flops=lambda s: 2 * s["m"] * s["n"] * s["k"],
        peak="fp32",             # FP32 FMAs on the CUDA cores, as chapter 07's sgemm_regtile
        timeout_s=30.0,
        # any m, n, k >= 1; hidden sizes around the 128 x 128 x 8 block tile (float4 paths need k % 4 == 0 for
        # a's rows, n % 4 == 0 for b's and c's: odd and tile +- 1 values test the scalar ones)
        tile={"m": 128, "n": 128, "k": 8},
        size_rule=enough_outputs,
    ),
    Exercise(
        name="bias_relu",
        kernel="bias_relu",
        source_file="bias_relu.cu",
        description=("c[i][j] = max(0, c[i][j] + bias[j]) in place on a row-major m x n matrix. Block (32, 8), "
                     "grid capped at (32, 4096): loop (over rows and columns, or over the flat array)."),
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
        # read c once, write it once: the copy ceiling. The reference walks c as a flat float4 array
        # (0.97-0.98 of copy at 16384 x 4099 on an H100). Measured against it there: a coalesced row-by-row
        # loop, one float a lane, 0.53; a loop whose lanes walk down columns (as in chapter 04) 0.10.
        # Full points at 0.45 (the coalesced loop passes with margin), half at 0.25, none for the walk
        speed_threshold=0.45,
        speed_tiers=((0.25, 0.5),),
        floor_bytes=lambda s: 8 * s["m"] * s["n"] + 4 * s["n"],
        # hidden sizes: any m, n >= 1, around the (32, 8) block's 8 rows and 128 columns a step; m * n % 4 != 0
        # leaves a tail after the reference's flat float4 walk, n % 4 != 0 quads that straddle rows
        tile={"m": 8, "n": 128},
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
        # hidden sizes around the 32 x 32 tile, with the cross-size contract lda >= rows (a column's rows fit
        # in its pitch), which ranges alone cannot say
        tile={"rows": 32, "cols": 32, "lda": 32},
        size_rule=lambda s: "" if s["lda"] >= s["rows"] else f"lda = {s['lda']} < rows = {s['rows']}",
    ),
]
