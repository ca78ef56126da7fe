"""Chapter 03 (streams): the chunk kernel of a copy-compute-copy pipeline, graded for correctness and overlap.

The grader checks the kernel on one chunk in the middle of the array: the output outside
[offset, offset + count) must stay exactly as it was (0), because in a pipeline those elements belong to
chunks whose copies are in flight on other streams.

Overlap: the student's LAUNCH also names "streams" and "chunks". The grader-owned pipeline driver
(drivers.pipeline.pipeline_report on course.streams: chunk c's H2D copy, kernel and D2H copy on stream c % streams, pinned
host buffers) runs the student's kernel over 256 MiB each way, every run on fresh inputs with its whole output
checked (on the GPU), and divides the pipeline's time by the same work without overlap (H2D + kernel + D2H
of the whole array, each timed alone, the kernel being the reference at its own block size, so nothing of
the student's can inflate it). The reference kernel goes through the same driver with its own LAUNCH (4
streams, 16 chunks).

``two_stage`` (a `CallExercise`: data only, nothing of the student's runs): the student writes a stream schedule
in a `%%streams --name two_stage` cell (course.schedule: the number of streams and chunks, each stage's stream,
which events are recorded after which stage and waited for before which stage). The grader-owned driver
(drivers.two_stage) runs its own kernels per chunk: h2d, produce (tmp from the chunk), consume (out[i] from
tmp[i] and tmp[i - 1], so a chunk's first value reads the previous chunk's last tmp), d2h. Correctness: the
order is checked deterministically (course.schedule.missing_dependencies over stream order and event waits),
and each case runs with the producer of the first unordered read held back 50 ms, so the race shows in the
output; an ordered schedule's output must be right. Overlap as process_chunk's, through the same thresholds.
"""
import numpy as np

from autograder import LARGER_THAN_L2, CallExercise, Exercise, In, Out, Pipeline, Points, Scalar, cdiv

MAX_GRID = 1024

# Overlap thresholds, from the link's physics and checked against the H100 sweep of the same pipeline
# (benchmarks/results/sweeps/03_streams_pipeline.json, 256 MiB each way, a kernel as cheap as this one):
# - pinned H2D and D2H each run at ~54 GB/s over PCIe gen5 x16 (benchmarks/results: 54.4 and 54.5 GB/s), on
#   separate copy engines, so both directions can run at once. 256 MiB takes h = d = ~4.9 ms each way and the
#   kernel k = ~0.2 ms: un-overlapped h + k + d = ~10 ms.
# - C equal chunks on >= 2 streams at best take h + k + d + (C - 1) max(h, k, d) per chunk, a ratio of about
#   (C + 1) / 2C when the kernel is cheap: 0.75 (C = 2), 0.625 (4), 0.56 (8), 0.53 (16), -> 0.5 (one copy
#   direction's time; it cannot go lower while both copies are needed).
# - measured (time / one stream, one chunk): one stream 1.00-1.15 whatever C; C = 2: 0.77; C = 4: 0.66;
#   C = 8: 0.61-0.63; C = 16..64: 0.58-0.60. The reference (4 streams, 16 chunks) measured 0.583, 1.12 x its
#   ideal bound.
# full_at = 0.64 lies between the 8-chunk (<= 0.63) and the 4-chunk (>= 0.657) pipelines: full points need both
# copy directions busy almost all the time, ~8 chunks or more; the reference has ~9% headroom.
# half_at = 0.85 lies between any real overlap (2 chunks on 2 streams: 0.77, 10% below) and none (1.0, 15%
# above), far outside the 3% re-measuring band (autograder.policy.PIPELINE_BAND) on both sides.
# One stream, or one chunk, gets no pipeline points: nothing overlaps.
FULL_AT, HALF_AT = 0.64, 0.85

# two_stage's overlap, on the same link: the copies are the same 256 MiB each way (h = d = ~4.9 ms) and the two
# kernels together cost what process_chunk's does twice over (~0.35 ms, 3% of the ~10.2 ms un-overlapped time),
# so the bound is the same (C + 1) / 2C when the kernels are cheap: ~0.53 for 16 chunks. Every overlapping
# schedule needs an event here: the previous chunk's produce must come before consume, so chunks on different
# streams must wait for it; all on one stream is right and overlaps nothing (1.0).
# Measured on the H100 (tests/autograder/test_two_stage_gpu.py, 2026-11-25): the reference (2 streams, 16 chunks,
# one event) 0.62 and 0.61, above process_chunk's 16-chunk pipelines (0.58-0.60) because consume of chunk c
# waits for produce of chunk c - 1 on the other stream; all on one stream 1.04. process_chunk's full_at (0.64)
# would leave the reference 3% of headroom, inside the re-measuring band (autograder.policy.PIPELINE_BAND), so
# two_stage's tiers are its own: full at 0.70 (the reference 12% below it; a pipeline of 4 or more chunks with
# both copy directions busy), half at 0.88 (any real overlap, e.g. 2 chunks on 2 streams, ~0.77; one stream
# 15% above it gets none).
TWO_STAGE_FULL_AT, TWO_STAGE_HALF_AT = 0.70, 0.88
TWO_STAGE_NBYTES = 256 << 20


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
                     "'streams' (1-16) and 'chunks' (1-256) for the graded pipeline run."),
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
        # hidden sizes (size steps only; the pipeline run keeps its nbytes): any n >= 1, offset n // 3 and
        # count as above, around the default block of 256
        tile={"n": 256},
        pipeline=Pipeline(points=4, full_at=FULL_AT, half_at=HALF_AT, max_streams=16, max_chunks=256,
                          nbytes=256 << 20, driver="drivers.pipeline:pipeline_report"),
    ),
    CallExercise(
        name="two_stage",
        checker="drivers.two_stage:check_schedule",
        driver="drivers.two_stage:grade_case",
        parser="course.schedule:parse_schedule_cell",
        magic="%%streams",
        grader_owned=True,   # the driver's kernels, buffers and copies: an exception there is the grader's
        solution_file="two_stage.py",
        description=("a stream schedule for h2d, produce, consume (reads the previous chunk's last tmp value) "
                     "and d2h per chunk: streams, chunks, each stage's stream, events recorded and waited for."),
        # cases: one chunk (n = 1: nothing crosses chunks), a prime, and a size whose chunks are a few MB,
        # each run with the producer of the first unordered read held back (drivers.two_stage.STALL_NS);
        # hidden ones around 1024 (chunks of uneven length, a last chunk shorter than the rest); the driver
        # holds d_in, tmp and out on the device and pinned input and output: 20 bytes an element
        sizes=[{"n": 1}, {"n": 4099}, {"n": 1_000_003}],
        tile={"n": 1024},
        case_bytes=lambda s: 20 * s["n"],
        points=Points(correctness=4),
        # the streams and chunks the schedule may ask for are the checker's (drivers.two_stage.LIMITS)
        pipeline=Pipeline(points=4, full_at=TWO_STAGE_FULL_AT, half_at=TWO_STAGE_HALF_AT, nbytes=TWO_STAGE_NBYTES,
                          driver="drivers.two_stage:pipeline_report"),
    ),
]
