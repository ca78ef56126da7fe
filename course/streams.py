"""The stream pipeline: chunked copy-in, kernel, copy-out over several CUDA streams, its timeline and bounds.

Chapter 03 teaches the pipeline, and the grader grades a student's chunk kernel in it (its driver,
`drivers.pipeline`, runs this module's `pipeline_report`): one engine serves both, so what the lesson
measures and what the grader scores are the same pipeline. Chapter-specific kernels and demonstrations
stay in `course.lessons.ch03`.

Spans are tuples ``(lane, label, start_ms, end_ms)``, the format `course.plots.timeline` draws. The
arithmetic (chunk bounds, ideal and serial times, span statistics) runs on a CPU; the rest needs a GPU.
Nothing here touches CUDA at import time.
"""
from __future__ import annotations

import contextlib

import numpy as np

from ._check import check
from ._timing import benchmark

__all__ = [
    "PIPELINE_N", "chunk_bounds", "ideal_pipeline_ms", "serial_pipeline_ms", "pipeline_schedule", "union_ms",
    "by_engine", "overlap_summary", "Timeline", "draw_inputs", "PipelineBuffers", "StreamClock", "run_pipeline",
    "checked_runs", "stage_times", "offset_process", "pipeline_report",
]

PIPELINE_N = 1 << 26
"""Floats a pipeline moves each way by default (256 MiB): the lesson's and the grader's size."""


# --- the arithmetic of a pipeline (CPU) -----------------------------------------------------------

def chunk_bounds(n: int, n_chunks: int) -> list:
    """(offset, count) of each chunk when ``n`` items are cut into ``n_chunks`` nearly equal pieces.

    Chunks have ceil(n / n_chunks) items except the last, which is shorter; when n_chunks > n some
    trailing chunks would be empty and are left out.
    """
    if n < 1 or n_chunks < 1:
        raise ValueError(f"`n` and `n_chunks` should be positive; got n={n}, n_chunks={n_chunks}")
    size = -(-n // n_chunks)
    return [(off, min(size, n - off)) for off in range(0, n, size)]


def ideal_pipeline_ms(h2d_ms: float, kernel_ms: float, d2h_ms: float, n_chunks: int,
                      both_ms: float | None = None) -> float:
    """The shortest possible time of ``n_chunks`` equal chunks flowing through three engines.

    The first chunk pays every stage; after that one chunk leaves every ``max`` stage time, because
    the slowest engine is busy without a gap at best: h + k + d + (C - 1) * max(h, k, d).

    ``both_ms``, a chunk's H2D and another chunk's D2H measured running at once, adds the link to the
    engines: in the steady state every step moves one chunk each way concurrently, and a host that is not
    fully duplex (both directions together slower than each alone) cannot take a step faster than that.
    """
    if n_chunks < 1:
        raise ValueError(f"`n_chunks` should be at least 1; got {n_chunks}")
    step = max(h2d_ms, kernel_ms, d2h_ms, both_ms or 0.0)
    return h2d_ms + kernel_ms + d2h_ms + (n_chunks - 1) * step


def serial_pipeline_ms(h2d_ms: float, kernel_ms: float, d2h_ms: float, n_chunks: int) -> float:
    """The time with no overlap at all: every stage of every chunk one after another."""
    return n_chunks * (h2d_ms + kernel_ms + d2h_ms)


def pipeline_schedule(h2d_ms: float, kernel_ms: float, d2h_ms: float, n_chunks: int, n_streams: int) -> list:
    """Spans of a modeled pipeline run: the timeline drawn from stage times where none was recorded.

    Chunk c goes to stream c % n_streams and is issued H2D, kernel, D2H, as `run_pipeline` issues it. Each
    stage waits for the previous work of its stream, and each engine (H2D copies, the SMs, D2H copies)
    takes its work one piece at a time in issue order. The stage times are per chunk and fixed: the model
    knows nothing of a link that slows when both directions run, of launch costs, or of kernels sharing SMs.
    """
    if n_chunks < 1 or n_streams < 1:
        raise ValueError(f"`n_chunks` and `n_streams` should be at least 1; got {n_chunks} and {n_streams}")
    engine_free = {"H2D": 0.0, "kernel": 0.0, "D2H": 0.0}
    stream_free = [0.0] * n_streams
    spans = []
    for c in range(n_chunks):
        k = c % n_streams
        t = stream_free[k]
        for label, ms in (("H2D", h2d_ms), ("kernel", kernel_ms), ("D2H", d2h_ms)):
            start = max(t, engine_free[label])
            t = engine_free[label] = start + ms
            spans.append((f"stream {k}", label, start, t))
        stream_free[k] = t
    return spans


def union_ms(intervals) -> float:
    """Total length covered by a set of (start, end) intervals, overlaps counted once."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def by_engine(spans) -> list:
    """Regroup spans by what they are (H2D, kernel, D2H) instead of by stream: one row per engine."""
    return [(label, label, t0, t1) for _lane, label, t0, t1 in spans]


def overlap_summary(spans, total_ms: float | None = None) -> dict:
    """How much of the work overlapped.

    Returns
    -------
    dict
        ``total_ms`` (first start to last end, unless given), ``work_ms`` (sum of all span lengths,
        the time one stream would need), ``busy_ms`` per label (union of its spans: how long that
        engine was busy), and ``overlap`` = work_ms / total_ms (1.0: nothing overlapped).
    """
    spans = list(spans)
    if not spans:
        raise ValueError("`spans` is empty: record some work first")
    if total_ms is None:
        total_ms = max(s[3] for s in spans) - min(s[2] for s in spans)
    work = sum(s[3] - s[2] for s in spans)
    busy = {}
    for label in dict.fromkeys(s[1] for s in spans):
        busy[label] = union_ms([(s[2], s[3]) for s in spans if s[1] == label])
    return {"total_ms": total_ms, "work_ms": work, "busy_ms": busy,
            "overlap": work / total_ms if total_ms > 0 else float("nan")}


# --- recording a timeline (GPU) ------------------------------------------------------------------

class Timeline:
    """Records CUDA events around work on any number of streams and returns spans for a Gantt chart.

    A span's start is when its stream reached the start event: for a copy that waits for a busy copy
    engine, the bar begins at the queueing, not at the first byte moved.

    Examples
    --------
    >>> tl = Timeline()                                   # doctest: +SKIP
    >>> with tl.span(s1, "stream 1", "kernel"):           # doctest: +SKIP
    ...     k(grid, block, x, n, stream=s1)
    >>> course.plots.timeline(tl.spans())                 # doctest: +SKIP
    """

    def __init__(self):
        import cupy
        self._cupy = cupy
        cupy.cuda.Device().synchronize()
        self._origin = cupy.cuda.Event()
        # recorded on an idle device, it completes at once: t = 0 precedes everything enqueued after
        self._origin.record(cupy.cuda.Stream.null)
        self._open = []

    @contextlib.contextmanager
    def span(self, stream, lane: str, label: str):
        """Record events on ``stream`` before and after the work enqueued inside the block."""
        start, end = self._cupy.cuda.Event(), self._cupy.cuda.Event()
        start.record(stream)
        yield
        end.record(stream)
        self._open.append((lane, label, start, end))

    def spans(self) -> list:
        """Wait for the recorded work; return [(lane, label, start_ms, end_ms)] from the origin."""
        et = self._cupy.cuda.get_elapsed_time
        out = []
        for lane, label, s, e in self._open:
            e.synchronize()
            out.append((lane, label, max(0.0, et(self._origin, s)), max(0.0, et(self._origin, e))))
        return out


def draw_inputs(seed: int, n: int):
    """``n`` float32 values in [-2, 2) drawn on the GPU from ``seed``: the same values for the same seed."""
    import cupy
    return cupy.random.RandomState(int(seed) % (1 << 63)).uniform(-2.0, 2.0, int(n), dtype=cupy.float32)


class PipelineBuffers:
    """Pinned host input and output and device input and output of ``n`` float32 values.

    Inputs are drawn on the GPU (`draw_inputs`) and copied into the pinned input: drawing 64 M values with
    NumPy takes seconds a run, the GPU a millisecond. `check` draws them again from the seed rather than
    reading back a buffer a kernel could have written.
    """

    def __init__(self, n: int, seed: int = 0):
        import cupy
        import cupyx
        self.n = int(n)
        self.h_in = cupyx.empty_pinned(self.n, dtype=np.float32)
        self.h_out = cupyx.empty_pinned(self.n, dtype=np.float32)
        self.d_in = cupy.empty(self.n, dtype=cupy.float32)
        self.d_out = cupy.empty(self.n, dtype=cupy.float32)
        self.fill(seed)

    def fill(self, seed: int) -> None:
        """New inputs drawn from ``seed``, NaN in the device input and in both outputs: a value a kernel never
        wrote, a copy never brought back, or a read before its copy-in shows, even where an earlier run left
        the right one."""
        import cupy
        self.seed = int(seed)
        draw_inputs(self.seed, self.n).get(out=self.h_in)
        self.d_in.fill(np.nan)     # a read outside the chunk copied in so far finds NaN, not the last run's input
        self.d_out.fill(np.nan)
        cupy.cuda.runtime.deviceSynchronize()
        self.h_out[:] = np.nan

    def check(self, expected, *, name: str = "pipeline output"):
        """`course.check` of the host output against ``expected(x)`` over this fill's inputs on float64,
        computed on the GPU (``expected`` uses array operators or `cupy` functions only)."""
        import cupy
        x = draw_inputs(self.seed, self.n).astype(cupy.float64)
        want = cupy.asarray(expected(x)).astype(cupy.float32)
        del x
        return check(cupy.asarray(self.h_out), want, name=name)

    def h2d(self, off: int, cnt: int, stream) -> None:
        """Enqueue the copy of ``cnt`` inputs from ``off`` into ``d_in`` on ``stream``."""
        from cupy.cuda import runtime
        item = self.h_in.itemsize
        runtime.memcpyAsync(self.d_in.data.ptr + off * item, self.h_in.ctypes.data + off * item, cnt * item,
                            runtime.memcpyHostToDevice, stream.ptr)

    def d2h(self, off: int, cnt: int, stream) -> None:
        """Enqueue the copy of ``cnt`` outputs from ``off`` of ``d_out`` back to the host on ``stream``."""
        from cupy.cuda import runtime
        item = self.h_out.itemsize
        runtime.memcpyAsync(self.h_out.ctypes.data + off * item, self.d_out.data.ptr + off * item, cnt * item,
                            runtime.memcpyDeviceToHost, stream.ptr)


class StreamClock:
    """The ms from a start that every stream waits for to a stop after all of them: made before the work is
    issued on ``streams``, `stop` after. Events on one control stream, so the time covers every stream."""

    def __init__(self, streams):
        import cupy
        self._cupy = cupy
        self._streams = list(streams)
        self._ctl = cupy.cuda.Stream(non_blocking=True)
        self._start, self._stop = cupy.cuda.Event(), cupy.cuda.Event()
        self._start.record(self._ctl)
        for s in self._streams:
            s.wait_event(self._start)  # no stream begins before the clock starts

    def stop(self) -> float:
        """Join every stream on the control stream, wait for the stop, and return the elapsed ms."""
        for s in self._streams:
            self._ctl.wait_event(s.record())
        self._stop.record(self._ctl)
        self._stop.synchronize()
        return self._cupy.cuda.get_elapsed_time(self._start, self._stop)


def run_pipeline(process, bufs: PipelineBuffers, *, n_streams: int, n_chunks: int, streams=None,
                 timeline: Timeline | None = None) -> float:
    """Chunked copy-in, kernel, copy-out; chunk c goes to stream c % n_streams. Returns the total ms.

    Parameters
    ----------
    process : callable
        ``process(d_in, d_out, offset, count, stream)`` enqueues the kernel for one chunk.
    bufs : PipelineBuffers
        Pinned host buffers are required: from pageable memory the copies would not overlap.
    streams : list of cupy.cuda.Stream, optional
        Reused across calls when given (creating streams costs more than a small chunk).
    timeline : Timeline, optional
        When given, every copy and kernel is recorded as a span in lane "stream k".
    """
    import cupy
    if n_streams < 1:
        raise ValueError(f"`n_streams` should be at least 1; got {n_streams}")
    streams = streams or [cupy.cuda.Stream(non_blocking=True) for _ in range(n_streams)]
    if len(streams) < n_streams:
        raise ValueError(f"{len(streams)} streams given for `n_streams`={n_streams}")
    clock = StreamClock(streams[:n_streams])
    null = contextlib.nullcontext()
    for c, (off, cnt) in enumerate(chunk_bounds(bufs.n, n_chunks)):
        k = c % n_streams
        s = streams[k]
        lane = f"stream {k}"
        with (timeline.span(s, lane, "H2D") if timeline else null):
            bufs.h2d(off, cnt, s)
        with (timeline.span(s, lane, "kernel") if timeline else null):
            process(bufs.d_in, bufs.d_out, off, cnt, s)
        with (timeline.span(s, lane, "D2H") if timeline else null):
            bufs.d2h(off, cnt, s)
    return clock.stop()


def stage_times(process, bufs: PipelineBuffers, chunk: int, *, budget_s: float = 1.0, duplex: bool = False) -> dict:
    """Median ms of each stage for one chunk of ``chunk`` items, each measured alone; with ``duplex``,
    also ``both``: a chunk's H2D and a chunk's D2H issued at once on two streams."""
    import cupy

    def h2d():
        bufs.h2d(0, chunk, cupy.cuda.get_current_stream())

    def kern():
        process(bufs.d_in, bufs.d_out, 0, chunk, cupy.cuda.get_current_stream())

    def d2h():
        bufs.d2h(0, chunk, cupy.cuda.get_current_stream())
    out = {"h2d": benchmark(h2d, flush_l2=False, budget_s=budget_s, name="H2D").median_ms,
           "kernel": benchmark(kern, budget_s=budget_s, name="kernel").median_ms,
           "d2h": benchmark(d2h, flush_l2=False, budget_s=budget_s, name="D2H").median_ms}
    if duplex:
        side = cupy.cuda.Stream(non_blocking=True)

        def both():
            main = cupy.cuda.get_current_stream()
            side.wait_event(main.record())   # the timed region starts on `main`: fork from it
            bufs.h2d(0, chunk, main)
            bufs.d2h(0, chunk, side)
            main.wait_event(side.record())   # and join, so the end event waits for both copies
        out["both"] = benchmark(both, flush_l2=False, budget_s=budget_s, name="H2D + D2H").median_ms
    return out


def offset_process(kernel, *, block: int = 256, max_grid: int = 1024):
    """Adapt a chunk kernel ``k(src, dst, offset, count)`` (full arrays plus the chunk's offset, the form
    of chapter 03's exercise) to `run_pipeline`'s ``process``: at most ``max_grid`` blocks per chunk, so
    the kernel must loop over its chunk."""
    def process(d_in, d_out, off, cnt, stream):
        kernel(max(1, min(-(-cnt // block), max_grid)), block, d_in, d_out, off, cnt, stream=stream)
    return process


def checked_runs(run, bufs: PipelineBuffers, expected, *, seed: int, repeats: int,
                 name: str = "pipeline output") -> tuple:
    """``run()`` (returns its ms) once to warm up on the buffers' inputs, then ``repeats`` times, each on fresh
    inputs (``bufs.fill(seed + 1)``, ...); every run's output checked with ``bufs.check(expected)``. Returns
    (the timed runs' ms, the last `CheckResult`): the first wrong output stops it, so a wrong result is never
    timed further."""
    run()
    res = bufs.check(expected, name=name)
    times = []
    for r in range(1, repeats + 1):
        if not res:
            break
        bufs.fill(seed + r)
        times.append(run())
        res = bufs.check(expected, name=name)
    return times, res


def pipeline_report(kernel, *, expected, streams: int, chunks: int, block: int = 256, n: int = PIPELINE_N,
                    seed: int = 0, repeats: int = 3, max_grid: int = 1024, serial_kernel=None,
                    serial_block: int | None = None, stage_budget_s: float = 0.5) -> dict:
    """Run a chunk kernel ``k(src, dst, offset, count)`` through the pipeline; judge correctness and overlap.

    ``expected(x)`` is what the kernel computes elementwise, on float64 input (for chapter 03's exercise,
    ``x * (x*x - 0.5)``), written with operators so that it runs on CuPy arrays; every run's whole output is
    checked against it, and every run after the first gets fresh inputs. The pipeline's time is compared
    with the same work done without overlap: one copy in, one kernel over everything, one copy out, each
    timed alone (``serial_ms``). Copy-bound work can approach half of that, since both directions of the
    link run at once. Launches follow `offset_process` (``block`` threads, at most ``max_grid`` blocks).

    ``serial_kernel`` (default: ``kernel``) is the kernel timed over the whole array for ``serial_ms``, launched
    with ``serial_block`` threads (default: ``block``). The grader passes its reference and the reference's
    own block there: a kernel slowed down only when it sees the whole array, or a block size that slows the
    reference down, would otherwise make the student's pipeline look well overlapped.

    Returns
    -------
    dict
        ``correct`` (bool) and ``message`` from `course.check`; ``total_ms`` (best of ``repeats``),
        ``serial_ms``, ``ratio`` = total / serial, ``ideal_ms`` from one chunk's stage times, and the
        ``spans`` of a recorded run for `course.plots.timeline`.
    """
    import cupy
    bufs = PipelineBuffers(n, seed=seed)
    proc = offset_process(kernel, block=block, max_grid=max_grid)
    pool = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]
    totals, res = checked_runs(lambda: run_pipeline(proc, bufs, n_streams=streams, n_chunks=chunks, streams=pool),
                               bufs, expected, seed=seed, repeats=repeats)
    if not res:
        return {"correct": False, "message": res.message}
    tl = Timeline()
    run_pipeline(proc, bufs, n_streams=streams, n_chunks=chunks, streams=pool, timeline=tl)
    serial_proc = proc if serial_kernel is None else offset_process(
        serial_kernel, block=serial_block or block, max_grid=max_grid)
    whole = stage_times(serial_proc, bufs, n, budget_s=stage_budget_s)
    serial = whole["h2d"] + whole["kernel"] + whole["d2h"]
    first = chunk_bounds(n, chunks)[0][1]
    st = stage_times(proc, bufs, first, budget_s=stage_budget_s)
    total = min(totals)
    return {"correct": True, "message": res.message, "total_ms": total, "serial_ms": serial,
            "ratio": total / serial, "ideal_ms": ideal_pipeline_ms(st["h2d"], st["kernel"], st["d2h"], chunks),
            "spans": tl.spans()}
