"""Chapter 02 (memory transfer): widen bytes on the GPU after a cheap transfer; gather rows zero-copy.

Both kernels are written for data that crossed (or is read across) the host link, but a kernel cannot
tell where its pointers point: the grader tests them on device memory. The lesson and the exercise
notebook run them on pinned and mapped host memory.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, Out, Points, Scalar, Uniform, cdiv

MAX_GRID = 2048          # the launches below are capped: kernels must loop (grid-stride)
TABLE_ROWS = 4099        # prime; fixed so that the row indices drawn for every case are valid


def _planar_ref(a):
    v = a["src"].reshape(a["pixels"], 3).astype(np.float64)
    dst = (v / 255.0 - a["mean"].astype(np.float64)) * a["inv_std"].astype(np.float64)
    return {"dst": dst.T.astype(np.float32)}


def _gather_ref(a):
    return {"out": a["table"][a["rows"]]}


EXERCISES = [
    Exercise(
        name="u8_to_planar",
        kernel="u8_to_planar",
        source_file="u8_to_planar.cu",
        description=("Interleaved RGB bytes (pixel p's channels at src[3p], src[3p+1], src[3p+2]) to planar "
                     "floats: dst[c * pixels + p] = (src[3p + c] / 255 - mean[c]) * inv_std[c]. Launched with "
                     "at most 2048 blocks of LAUNCH['block'] threads, so loop over pixels."),
        params=[
            In("src", np.uint8, ("pixels", 3)),
            Out("dst", np.float32, (3, "pixels")),
            In("mean", np.float32, 3, gen=Uniform(0.3, 0.6)),
            In("inv_std", np.float32, 3, gen=Uniform(3.0, 5.0)),
            Scalar("pixels", "int", "pixels"),
        ],
        sizes=[{"pixels": 1}, {"pixels": 33}, {"pixels": 1_000_003}, {"pixels": LARGER_THAN_L2}],
        launch=lambda s, cfg: (min(cdiv(s["pixels"], cfg["block"]), MAX_GRID), cfg["block"], 0),
        launch_defaults={"block": 256},
        reference=_planar_ref,
        points=Points(correctness=4, speed=2),
        speed_threshold=0.8,
        floor_bytes=lambda s: 15 * s["pixels"],  # 3 bytes read + 12 written per pixel
        tile={"pixels": 256},   # hidden sizes around the default block; any pixels >= 1 is allowed
    ),
    Exercise(
        name="gather_rows",
        kernel="gather_rows",
        source_file="gather_rows.cu",
        description=("out[r, j] = table[rows[r], j] for r < n_rows, j < dim, row-major. Launched with "
                     "min(n_rows, 8192) blocks of LAUNCH['block'] threads (a multiple of 32), so loop over "
                     "rows; index with 64-bit arithmetic."),
        params=[
            In("table", np.float32, (TABLE_ROWS, "dim")),
            In("rows", np.int32, "n_rows", gen=Uniform(0, TABLE_ROWS - 1)),
            Out("out", np.float32, ("n_rows", "dim")),
            Scalar("n_rows", "int", "n_rows"),
            Scalar("dim", "int", "dim"),
        ],
        sizes=[{"n_rows": 1, "dim": 1}, {"n_rows": 33, "dim": 100}, {"n_rows": 1009, "dim": 257},
               {"n_rows": LARGER_THAN_L2, "dim": 96}],
        launch=lambda s, cfg: (min(s["n_rows"], 8192), cfg["block"], 0),
        launch_defaults={"block": 128},
        reference=_gather_ref,
        tolerance="exact",  # a copy: every bit must arrive
        points=Points(correctness=4, speed=2),
        speed_threshold=0.8,
        # the table is small enough to stay in L2, so only the row indices and the output count
        floor_bytes=lambda s: s["n_rows"] * (4 * s["dim"] + 4),
        # hidden sizes: any n_rows (the row indices are drawn below TABLE_ROWS whatever n_rows is, the table
        # keeps its TABLE_ROWS rows) and any dim; dim around the 32 lanes that share a row, n_rows around
        # the 4 warps (rows) of a default block of 128
        tile={"n_rows": 4, "dim": 32},
    ),
]
