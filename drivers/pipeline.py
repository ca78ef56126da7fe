"""The grader's driver for chapter 03's stream pipeline: `course.streams.pipeline_report` with the exercise's
function and the grader's launch rule fixed, so a spec can name it as ``drivers.pipeline:pipeline_report``.

The grader's harness calls it in its run child with the student's (or the reference's) compiled
``process_chunk`` and LAUNCH values; the exercise notebook runs the same `course.streams.pipeline_report`.
"""
from __future__ import annotations

import course.streams

__all__ = ["MAX_GRID", "process_chunk_reference", "pipeline_report"]

MAX_GRID = 1024
"""Blocks per chunk launch at most (autograder/specs/03_streams.py launches its size steps the same way)."""


def process_chunk_reference(x):
    """What ``process_chunk`` computes elementwise, on float64: x * (x*x - 0.5) (operators only, so that it
    runs on NumPy and CuPy arrays alike)."""
    return x * (x * x - 0.5)


def pipeline_report(kernel, *, streams: int, chunks: int, block: int = 256, n: int = course.streams.PIPELINE_N,
                    seed: int = 0, repeats: int = 3, reference=None, reference_block: int | None = None) -> dict:
    """The student's chunk kernel in the pipeline over ``n`` floats each way, the time without overlap taken
    with ``reference`` (the grader's compiled reference kernel, launched with ``reference_block`` threads; the
    kernel itself at ``block`` when None); see `course.streams.pipeline_report` for the keys of the returned
    dict."""
    return course.streams.pipeline_report(kernel, expected=process_chunk_reference, streams=streams,
                                          chunks=chunks, block=block, n=n, seed=seed, repeats=repeats,
                                          max_grid=MAX_GRID, serial_kernel=reference, serial_block=reference_block)
