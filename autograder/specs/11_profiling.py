"""Chapter 11 (profiling): two "profile, find the cause, fix" exercises. The exercise notebook hands out a
correct but slow starter for each; the student profiles it (course.profile, Kernel.resources, SASS), names
the cause, and writes the fast kernel. The grader cannot see the profile, only its consequences: speed, and
for the median the machine code.

row_means: the mean of each row of a row-major float matrix. The starter gives each row to one thread, so
the 32 lanes of a warp read 32 rows at once, 32 sectors per request (and under this launch 31 of every 32
threads have no row). The fix gives each row to a warp that reads it with neighbouring lanes on neighbouring
floats and adds the lanes' partial sums with shuffles. Inputs are small integers stored as floats: every
partial sum is then exact in float32, in any order, so only the final division rounds (rtol 1e-6 is about
8 ulp: `s / cols` and `s * (1.0f / cols)` both pass, a lost or doubled element of a row does not).

median3x3: the 3 x 3 median of a float image, clamped at the edges. The starter copies the nine values
into `float v[9]` and sorts it with an insertion sort whose indices depend on the data, so the array lives
in local memory (DRAM through L1, not registers): `.resources` shows its stack frame and the SASS its LDL and
STL. A median is one of the inputs, so the output must match bit for bit.
Reference kernels: solutions/11_profiling/. Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, Out, Points, Scalar, Tolerance, cdiv

MEDIAN_BLOCK = (32, 8)
MAX_GRID_Y = 65535       # CUDA's limit on gridDim.y


def small_integers(rng, shape, dtype):
    """Integers in [-4, 4] as floats: a row's sum stays an exact float32 integer (|sum| <= 4 x 100,003)."""
    return rng.integers(-4, 5, size=shape).astype(dtype)


def row_means_launch(sizes, cfg):
    """One warp per row: ceil(rows / (block / 32)) blocks of `block` threads."""
    block = cfg["block"]
    if not isinstance(block, int) or block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"block should be a multiple of 32 from 32 to 1024; got {block!r}")
    return cdiv(sizes["rows"], block // 32), block, 0


def row_means_reference(v):
    sums = v["inp"].astype(np.float64).sum(axis=1)      # exact: integers far below 2^53
    return {"means": (sums / int(v["cols"])).astype(np.float32)}


def median_launch(sizes, cfg):
    grid = (cdiv(sizes["width"], MEDIAN_BLOCK[0]), cdiv(sizes["height"], MEDIAN_BLOCK[1]))
    if grid[1] > MAX_GRID_Y:
        raise ValueError(f"height {sizes['height']} needs {grid[1]} blocks in y, more than CUDA's {MAX_GRID_Y}")
    return grid, MEDIAN_BLOCK, 0


def median_reference(v, chunk_rows=1024):
    """np.partition's fifth smallest of the nine clamped neighbours, a band of rows at a time (nine shifted
    copies of a whole image larger than L2 would take gigabytes)."""
    img = v["inp"]
    h, w = img.shape
    padded = np.pad(img, 1, mode="edge")
    out = np.empty_like(img)
    for y0 in range(0, h, chunk_rows):
        y1 = min(h, y0 + chunk_rows)
        stack = np.stack([padded[y0 + dy:y1 + dy, dx:dx + w] for dy in range(3) for dx in range(3)])
        out[y0:y1] = np.partition(stack, 4, axis=0)[4]
    return {"out": out}


EXERCISES = [
    Exercise(
        name="row_means",
        kernel="row_means",
        source_file="row_means.cu",
        description=("means[r] = (inp[r][0] + ... + inp[r][cols-1]) / cols for a row-major rows x cols float "
                     "matrix (any rows and cols, so rows need not start 16-byte aligned). Blocks of `block` "
                     "threads (default 256, a multiple of 32), grid ceil(rows / (block / 32)): a warp per row. "
                     "Inputs are integers in [-4, 4] stored as floats."),
        params=[
            In("inp", np.float32, ("rows", "cols"), gen=small_integers),
            Out("means", np.float32, "rows"),
            Scalar("rows", "int", "rows"),
            Scalar("cols", "int", "cols"),
        ],
        # 1 x 100,003: one long row (a warp walks it alone); 1009 x 37 and 37 x 1009: odd widths, so every
        # row but the first starts off a 16-byte boundary; 300 x 4099: a row longer than a warp's float4 step
        sizes=[{"rows": 1, "cols": 1}, {"rows": 1, "cols": 100_003}, {"rows": 1009, "cols": 37},
               {"rows": 37, "cols": 1009}, {"rows": 300, "cols": 4099}, {"rows": LARGER_THAN_L2, "cols": 1024}],
        launch=row_means_launch,
        launch_defaults={"block": 256},
        reference=row_means_reference,
        tolerance=Tolerance(rtol=1e-6, atol=0.0),
        points=Points(correctness=4, speed=6),
        # Calibration, measured on an H200 (2026-11-28; tests/autograder/test_corpus_gpu.py -k 11_profiling -s
        # prints the ratios) at the default speed size, 8 x L2 with 1,024 columns (DRAM-bound for any coalesced
        # kernel): the starter (a thread per row; corpus starter.cu) at 0.18 of the reference, 32 sectors per
        # request; a warp per row with scalar loads (corpus scalar_warp.cu) at 1.00: once the loads are
        # coalesced the float4 loads add nothing,
        # which is why vector_loads_128 is not a technique check here (it would withhold the points of a kernel
        # the profile calls fixed). 0.8 leaves the reference its 20% of room; half the points from 0.5 for a
        # coalesced kernel that loses time elsewhere (a block-wide shared-memory tree per row, too few loads
        # in flight). The starter stays far below 0.5 x 0.95.
        speed_threshold=0.8,
        speed_tiers=((0.5, 0.5),),
        floor_bytes=lambda s: 4 * s["rows"] * s["cols"] + 4 * s["rows"],
        # hidden sizes around 8 rows a block (a warp each) and a warp's float4 step (32 lanes x 4 floats)
        tile={"rows": 8, "cols": 128},
    ),
    Exercise(
        name="median3x3",
        kernel="median3x3",
        source_file="median3x3.cu",
        description=("out[y][x] = median of inp's 3 x 3 neighbourhood of (y, x), neighbours outside the image "
                     "clamped to the nearest edge pixel; row-major height x width floats. Block (32, 8), grid "
                     "(ceil(width / 32), ceil(height / 8)): one output per thread. The kernel must not use "
                     "local memory (no LDL/STL in its SASS, no spills)."),
        params=[
            In("inp", np.float32, ("height", "width")),
            Out("out", np.float32, ("height", "width")),
            Scalar("height", "int", "height"),
            Scalar("width", "int", "width"),
        ],
        # one row and one column: the clamp folds the missing neighbours onto the image; 37 x 1009 and
        # 33 x 2047: partial blocks at the right and bottom edges
        sizes=[{"height": 1, "width": 1}, {"height": 1, "width": 1000}, {"height": 1009, "width": 1},
               {"height": 37, "width": 1009}, {"height": 33, "width": 2047},
               {"height": LARGER_THAN_L2, "width": 1024}],
        launch=median_launch,
        launch_defaults={},
        reference=median_reference,
        tolerance="exact",   # a median of nine is one of the nine: every bit must arrive
        points=Points(correctness=5, speed=5),
        # The exercise is the local-memory fix, so it is a required technique: the starter's local array
        # (corpus starter.cu) fails the exercise however its time compares; a kernel in registers is then
        # graded on output and speed. Calibration, measured on an H200 (2026-11-28): at 8 x L2 (1,024 columns,
        # about 50,000 rows) a register kernel with the longer network (a fully unrolled bubble sort of nine:
        # 36 compare-exchanges; corpus bubble_unrolled.cu) ran at 0.72 of the reference's 19-exchange network:
        # half the speed points. 0.8 leaves the reference its room and asks for more than unrolling; half the
        # points from 0.5.
        required_techniques=("no_local_memory",),
        speed_threshold=0.8,
        speed_tiers=((0.5, 0.5),),
        floor_bytes=lambda s: 8 * s["height"] * s["width"],
        tile={"height": MEDIAN_BLOCK[1], "width": MEDIAN_BLOCK[0]},   # hidden sizes around the block
    ),
]
