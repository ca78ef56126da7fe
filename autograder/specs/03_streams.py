"""Chapter 03 (streams): the chunk kernel of a copy-compute-copy pipeline.

The grader checks the kernel on one chunk in the middle of the array: the output outside
[offset, offset + count) must stay exactly as it was (0), because in a pipeline those elements belong to
chunks whose copies are in flight on other streams.

Overlap (not gradable with this spec format yet): the student's LAUNCH also names "streams" and
"chunks". A grader-owned pipeline driver (course.lessons.ch03.run_pipeline: chunk c's H2D copy, kernel and
D2H copy on stream c % streams, pinned host buffers) would run the student's kernel over 256 MiB each way,
check the output, and time it against the same kernel's unpipelined stages (H2D + kernel + D2H of the whole
array, measured alone); full overlap points at <= 0.65 of that serial time, half at <= 0.80.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, Out, Points, Scalar, cdiv

MAX_GRID = 1024


def _offset(n):
    return n // 3


def _count(n):
    return min(n - n // 3, cdiv(n, 2))


def _chunk_ref(a):
    n, off = a["n"], a["offset"]
    x = a["src"][off:off + a["count"]].astype(np.float64)
    dst = np.zeros(n, dtype=np.float32)
    dst[off:off + a["count"]] = x * (x * x - 0.5)
    return {"dst": dst}


EXERCISES = [
    Exercise(
        name="process_chunk",
        kernel="process_chunk",
        source_file="process_chunk.cu",
        description=("dst[i] = x * (x*x - 0.5) with x = src[i], for offset <= i < offset + count only; "
                     "launched with at most 1024 blocks of LAUNCH['block'] threads. LAUNCH also takes "
                     "'streams' and 'chunks' for the pipeline run."),
        params=[
            In("src", np.float32, "n"),
            Out("dst", np.float32, "n", fill=0),   # outside the chunk it must stay 0
            Scalar("offset", "int", "n // 3"),
            Scalar("count", "int", "min(n - n // 3, cdiv(n, 2))"),
        ],
        sizes=[{"n": 1}, {"n": 33}, {"n": 1_000_003}, {"n": LARGER_THAN_L2}],
        launch=lambda s, cfg: (max(1, min(cdiv(_count(s["n"]), cfg["block"]), MAX_GRID)), cfg["block"], 0),
        launch_defaults={"block": 256, "streams": 1, "chunks": 1},
        reference=_chunk_ref,
        points=Points(correctness=4, speed=0),
    ),
]
