"""Chapter 03 (streams and events): a timeline recorder, the chunked copy-compute-copy pipeline, its
ideal bound, default-stream and dependency demonstrations, and CUDA graphs for many small launches.

Spans are tuples ``(lane, label, start_ms, end_ms)``, the format `course.plots.timeline` draws.
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

__all__ = [
    "SPIN_SRC", "Timeline", "ideal_pipeline_ms", "serial_pipeline_ms", "chunk_bounds", "union_ms",
    "overlap_summary", "by_engine", "run_pipeline", "stage_times", "PipelineBuffers", "spin_cycles",
    "default_stream_demo", "dependency_demo", "graph_vs_stream", "WORK_SRC", "chunk_process",
    "pipeline_runner", "PIPELINE_N", "check_work", "work_reference", "offset_process", "pipeline_report",
]

SPIN_SRC = r'''extern "C" __global__ void spin(float* out, long long cycles)
{
    // busy-waits a fixed number of SM cycles: a kernel of known length that needs almost no resources
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    if (threadIdx.x == 0) out[blockIdx.x] = 1.0f;
}

extern "C" __global__ void produce(float* x, int n, long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = (float)(i + 1);
}

extern "C" __global__ void consume(const float* x, float* y, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = 2.0f * x[i];
}

extern "C" __global__ void bump(float* x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
'''
"""Small kernels for the stream demonstrations."""


WORK_SRC = r'''extern "C" __global__ void chunk_work(const float* __restrict__ in, float* __restrict__ out,
                                   int count, int rounds)
{
    // in and out already point at this chunk; rounds dependent FMAs per element set the kernel's cost
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        float v = in[i];
        for (int r = 0; r < rounds; ++r)
            v = fmaf(v, 0.999f, 0.001f);
        out[i] = v;
    }
}
'''
"""The lesson's pipeline kernel: elementwise, with a knob for how much arithmetic each element costs."""

PIPELINE_N = 1 << 26
"""Floats the lesson's pipeline moves each way (256 MiB)."""


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


class PipelineBuffers:
    """Pinned host input and output and device input and output of ``n`` float32 values."""

    def __init__(self, n: int, seed: int = 0):
        import cupy
        import cupyx
        self.n = int(n)
        self.h_in = cupyx.empty_pinned(self.n, dtype=np.float32)
        self.h_in[:] = np.random.default_rng(seed).uniform(-2.0, 2.0, self.n).astype(np.float32)
        self.h_out = cupyx.empty_pinned(self.n, dtype=np.float32)
        self.h_out[:] = np.nan
        self.d_in = cupy.empty(self.n, dtype=cupy.float32)
        self.d_out = cupy.empty(self.n, dtype=cupy.float32)


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
    from cupy.cuda import runtime
    if n_streams < 1:
        raise ValueError(f"`n_streams` should be at least 1; got {n_streams}")
    streams = streams or [cupy.cuda.Stream(non_blocking=True) for _ in range(n_streams)]
    if len(streams) < n_streams:
        raise ValueError(f"{len(streams)} streams given for `n_streams`={n_streams}")
    item = bufs.h_in.itemsize
    ctl = cupy.cuda.Stream(non_blocking=True)
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    start.record(ctl)
    for s in streams[:n_streams]:
        s.wait_event(start)  # no stream begins before the clock starts
    null = contextlib.nullcontext()
    for c, (off, cnt) in enumerate(chunk_bounds(bufs.n, n_chunks)):
        k = c % n_streams
        s = streams[k]
        lane = f"stream {k}"
        nb = cnt * item
        with (timeline.span(s, lane, "H2D") if timeline else null):
            runtime.memcpyAsync(bufs.d_in.data.ptr + off * item, bufs.h_in.ctypes.data + off * item, nb,
                                runtime.memcpyHostToDevice, s.ptr)
        with (timeline.span(s, lane, "kernel") if timeline else null):
            process(bufs.d_in, bufs.d_out, off, cnt, s)
        with (timeline.span(s, lane, "D2H") if timeline else null):
            runtime.memcpyAsync(bufs.h_out.ctypes.data + off * item, bufs.d_out.data.ptr + off * item, nb,
                                runtime.memcpyDeviceToHost, s.ptr)
    for s in streams[:n_streams]:
        ev = cupy.cuda.Event()
        ev.record(s)
        ctl.wait_event(ev)
    stop.record(ctl)
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop)


def stage_times(process, bufs: PipelineBuffers, chunk: int, *, budget_s: float = 1.0, duplex: bool = False) -> dict:
    """Median ms of each stage for one chunk of ``chunk`` items, each measured alone; with ``duplex``,
    also ``both``: a chunk's H2D and a chunk's D2H issued at once on two streams."""
    import cupy
    from cupy.cuda import runtime
    from .._timing import benchmark
    nb = chunk * bufs.h_in.itemsize

    def h2d():
        runtime.memcpyAsync(bufs.d_in.data.ptr, bufs.h_in.ctypes.data, nb, runtime.memcpyHostToDevice,
                            cupy.cuda.get_current_stream().ptr)

    def kern():
        process(bufs.d_in, bufs.d_out, 0, chunk, cupy.cuda.get_current_stream())

    def d2h():
        runtime.memcpyAsync(bufs.h_out.ctypes.data, bufs.d_out.data.ptr, nb, runtime.memcpyDeviceToHost,
                            cupy.cuda.get_current_stream().ptr)
    out = {"h2d": benchmark(h2d, flush_l2=False, budget_s=budget_s, name="H2D").median_ms,
           "kernel": benchmark(kern, budget_s=budget_s, name="kernel").median_ms,
           "d2h": benchmark(d2h, flush_l2=False, budget_s=budget_s, name="D2H").median_ms}
    if duplex:
        side = cupy.cuda.Stream(non_blocking=True)

        def both():
            main = cupy.cuda.get_current_stream()
            side.wait_event(main.record())   # the timed region starts on `main`: fork from it
            runtime.memcpyAsync(bufs.d_in.data.ptr, bufs.h_in.ctypes.data, nb, runtime.memcpyHostToDevice, main.ptr)
            runtime.memcpyAsync(bufs.h_out.ctypes.data, bufs.d_out.data.ptr, nb, runtime.memcpyDeviceToHost,
                                side.ptr)
            main.wait_event(side.record())   # and join, so the end event waits for both copies
        out["both"] = benchmark(both, flush_l2=False, budget_s=budget_s, name="H2D + D2H").median_ms
    return out


# --- demonstrations (GPU) ------------------------------------------------------------------------

def spin_cycles(ms: float) -> int:
    """SM cycles that a spinning kernel needs to last about ``ms`` at this GPU's maximum SM clock."""
    from .._nvml import sm_clock_mhz
    clk = sm_clock_mhz()
    mhz = clk[1] if clk else None
    if not mhz:
        try:
            import cupy
            mhz = cupy.cuda.Device().attributes["ClockRate"] / 1e3  # kHz -> MHz
        except Exception:
            mhz = 1500.0
    return int(ms * 1e3 * mhz)


def default_stream_demo(spin, *, non_blocking: bool, ms: float = 2.0) -> list:
    """Spin kernels on stream A, then the legacy default stream, then stream B; return the spans.

    With ``non_blocking=False`` (streams created the classic way) the default-stream kernel waits for
    A and B waits for it: three kernels in a row. With non-blocking streams all three run together.
    """
    import cupy
    out = cupy.zeros(8, dtype=cupy.float32)
    cycles = spin_cycles(ms)
    a = cupy.cuda.Stream(non_blocking=non_blocking)
    b = cupy.cuda.Stream(non_blocking=non_blocking)
    null = cupy.cuda.Stream.null
    spin(1, 32, out, cycles, stream=a)  # warm-up outside the recording
    cupy.cuda.Device().synchronize()
    tl = Timeline()
    for lane, s in (("stream A", a), ("default stream", null), ("stream B", b)):
        with tl.span(s, lane, "spin"):
            spin(1, 32, out, cycles, stream=s)
    return tl.spans()


def dependency_demo(produce, consume, *, wait: bool, n: int = 1 << 20, ms: float = 2.0):
    """Producer on stream A, consumer on stream B, with or without B waiting on an event from A.

    Returns
    -------
    (spans, correct)
        ``correct`` is whether the consumer saw the producer's data.
    """
    import cupy
    x = cupy.zeros(n, dtype=cupy.float32)
    y = cupy.zeros(n, dtype=cupy.float32)
    a, b = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    produce(1, 32, x, 32, 0, stream=a)  # warm-up: load both kernels before recording
    consume(1, 32, x, y, 32, stream=b)
    cupy.cuda.Device().synchronize()
    x.fill(0)
    cupy.cuda.Device().synchronize()
    grid = min(1024, -(-n // 256))
    tl = Timeline()
    with tl.span(a, "stream A", "produce"):
        # one block: the producer leaves the other SMs free, so an unsynchronized consumer runs at once
        produce(1, 256, x, n, spin_cycles(ms), stream=a)
    ready = cupy.cuda.Event()
    ready.record(a)
    if wait:
        b.wait_event(ready)  # enqueued on B: the host does not block
    with tl.span(b, "stream B", "consume"):
        consume(grid, 256, x, y, n, stream=b)
    spans = tl.spans()
    expect = 2.0 * (cupy.arange(n, dtype=cupy.float32) + 1)
    return spans, bool((y == expect).all())


def graph_vs_stream(bump, *, launches: int = 1000, n: int = 1024, repeats: int = 5) -> dict:
    """``launches`` tiny kernels, launched one by one versus replayed from a captured CUDA graph.

    Returns microseconds per kernel, host wall clock from the first launch to the end of the work:
    ``stream_us``, ``graph_us``; ``capture_ms`` is the one-off cost of capturing and instantiating.
    Both paths must leave x == 2 * launches (checked).
    """
    import cupy
    x = cupy.zeros(n, dtype=cupy.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    grid = -(-n // 256)
    # the raw CuPy function with arguments converted once: what remains is CUDA's launch cost plus
    # CuPy's, not the course's argument checking
    fn, args = bump._fn, bump.convert_args((x, n))

    def direct():
        for _ in range(launches):
            fn((grid,), (256,), args, stream=s)

    direct()
    s.synchronize()
    t0 = time.perf_counter()
    s.begin_capture()
    direct()
    graph = s.end_capture()
    graph.upload(s)
    s.synchronize()
    capture_ms = 1e3 * (time.perf_counter() - t0)
    x.fill(0)
    cupy.cuda.Device().synchronize()
    st, gr = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        direct()
        s.synchronize()
        st.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        graph.launch(s)
        s.synchronize()
        gr.append(time.perf_counter() - t0)
    ok = bool((x == 2 * repeats * launches).all())
    if not ok:
        raise AssertionError("the graph and the direct launches did not add up to the same result")
    return {"stream_us": 1e6 * float(np.median(st)) / launches,
            "graph_us": 1e6 * float(np.median(gr)) / launches, "capture_ms": capture_ms}


def chunk_process(kernel, rounds: int, *, block: int = 256, max_grid: int | None = None):
    """Adapt ``chunk_work`` to `run_pipeline`'s ``process(d_in, d_out, offset, count, stream)``.

    The chunk is passed as array views starting at ``offset``: CuPy slices carry the offset pointer.
    """
    def process(d_in, d_out, off, cnt, stream):
        grid = -(-cnt // block) if max_grid is None else min(max_grid, -(-cnt // block))
        kernel(grid, block, d_in[off:off + cnt], d_out[off:off + cnt], cnt, rounds, stream=stream)
    return process


def pipeline_runner(n: int = PIPELINE_N, repeats: int = 3):
    """A ``run(chunks, streams, rounds) -> ms`` (best of ``repeats``) for `course.widgets.sweep`.

    Compiles `WORK_SRC` and allocates the pinned buffers on the first call only.
    """
    state = {}

    def run(chunks, streams, rounds):
        import cupy
        from .._env import device_info
        from .._launch import compile as compile_
        if not state:
            state.update(k=compile_(WORK_SRC).kernel("chunk_work"), bufs=PipelineBuffers(n),
                         streams=[cupy.cuda.Stream(non_blocking=True) for _ in range(8)],
                         grid=device_info().sm_count * 16)
        if streams > len(state["streams"]):
            state["streams"] += [cupy.cuda.Stream(non_blocking=True)
                                 for _ in range(streams - len(state["streams"]))]
        proc = chunk_process(state["k"], int(rounds), max_grid=state["grid"])
        return min(run_pipeline(proc, state["bufs"], n_streams=int(streams), n_chunks=int(chunks),
                                streams=state["streams"]) for _ in range(repeats))
    return run


def work_reference(x, rounds: int):
    """What ``chunk_work`` computes, in float64: ``rounds`` times v = 0.999 v + 0.001."""
    v = np.asarray(x, dtype=np.float64)
    for _ in range(int(rounds)):
        v = v * 0.999 + 0.001
    return v


def check_work(bufs: PipelineBuffers, rounds: int, *, sample: int = 4096, seed: int = 0):
    """`course.check` of a pipeline's output against `work_reference` at ``sample`` random positions
    (the first and last element always among them, so both ends of the chunking are covered)."""
    from .._check import check
    rng = np.random.default_rng(seed)
    idx = np.unique(np.concatenate([[0, bufs.n - 1], rng.integers(0, bufs.n, sample)]))
    # float32 rounding of each step is damped by the 0.999 factor: errors stay near 1e-7 * 1000
    return check(bufs.h_out[idx], work_reference(bufs.h_in[idx], rounds).astype(np.float32),
                 rtol=1e-3, atol=1e-4, name="pipeline output (sampled)")


def offset_process(kernel, *, block: int = 256, max_grid: int = 1024):
    """Adapt a chunk kernel ``k(src, dst, offset, count)`` (the exercise's form, full arrays plus the
    chunk's offset) to `run_pipeline`'s ``process``; launched as the grader does, at most ``max_grid`` blocks."""
    def process(d_in, d_out, off, cnt, stream):
        kernel(max(1, min(-(-cnt // block), max_grid)), block, d_in, d_out, off, cnt, stream=stream)
    return process


def pipeline_report(kernel, *, streams: int, chunks: int, block: int = 256, n: int = PIPELINE_N,
                    seed: int = 0, repeats: int = 3) -> dict:
    """Run the exercise's chunk kernel through the pipeline and judge correctness and overlap.

    The kernel computes dst = x * (x*x - 0.5) on its chunk. The pipeline's time is compared with the
    same work done without overlap: one copy in, one kernel over everything, one copy out, each timed
    alone (``serial_ms``). Copy-bound work can approach half of that, since both directions of the link
    run at once.

    Returns
    -------
    dict
        ``correct`` (bool) and ``message`` from `course.check`; ``total_ms`` (best of ``repeats``),
        ``serial_ms``, ``ratio`` = total / serial, ``ideal_ms`` from one chunk's stage times, and the
        ``spans`` of a recorded run for `course.plots.timeline`.
    """
    import cupy
    from .._check import check
    bufs = PipelineBuffers(n, seed=seed)
    proc = offset_process(kernel, block=block)
    pool = [cupy.cuda.Stream(non_blocking=True) for _ in range(streams)]
    run_pipeline(proc, bufs, n_streams=streams, n_chunks=chunks, streams=pool)
    x = bufs.h_in.astype(np.float64)
    res = check(bufs.h_out, (x * (x * x - 0.5)).astype(np.float32), name="pipeline output")
    bufs.h_out[:] = np.nan
    total = min(run_pipeline(proc, bufs, n_streams=streams, n_chunks=chunks, streams=pool)
                for _ in range(repeats))
    tl = Timeline()
    run_pipeline(proc, bufs, n_streams=streams, n_chunks=chunks, streams=pool, timeline=tl)
    whole = stage_times(proc, bufs, n)
    serial = whole["h2d"] + whole["kernel"] + whole["d2h"]
    first = chunk_bounds(n, chunks)[0][1]
    st = stage_times(proc, bufs, first)
    return {"correct": bool(res), "message": res.message, "total_ms": total, "serial_ms": serial,
            "ratio": total / serial, "ideal_ms": ideal_pipeline_ms(st["h2d"], st["kernel"], st["d2h"], chunks),
            "spans": tl.spans()}
