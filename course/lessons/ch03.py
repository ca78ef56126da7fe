"""Chapter 03 (streams and events): default-stream and dependency demonstrations, CUDA graphs for many
small launches, and the lesson's ``chunk_work`` kernel in the pipeline (its adapter, check and sweep runner).

The stream-pipeline engine itself (`Timeline`, `run_pipeline`, `stage_times`, the ideal bound...) lives in
`course.streams`, shared with the grader's driver. The kernels are the notebook's ``%%cuda`` cells: the
demonstrations take them compiled, and the sweep's runner takes the cell (`course.lesson_cell`) and
compiles it on its first call, so it can be built on a machine without a GPU.
"""
from __future__ import annotations

import re
import time

import numpy as np

from course import check, device_info, sm_clock_mhz
from course.plots import timeline
from course.results import recorded_rows
from course.streams import PIPELINE_N, PipelineBuffers, Timeline, pipeline_schedule, run_pipeline

__all__ = [
    "spin_cycles", "default_stream_demo", "dependency_demo", "graph_vs_stream", "chunk_process",
    "pipeline_runner", "check_work", "work_reference", "recorded_pipeline", "plot_recorded_pipeline",
]


# --- demonstrations (GPU) ------------------------------------------------------------------------

def spin_cycles(ms: float) -> int:
    """SM cycles that a spinning kernel needs to last about ``ms`` at this GPU's maximum SM clock."""
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


def pipeline_runner(cell, n: int = PIPELINE_N, repeats: int = 3):
    """A ``run(chunks, streams, rounds) -> ms`` (best of ``repeats``) for `course.widgets.sweep`.

    ``cell`` is the notebook's ``chunk_work`` cell (``course.lesson_cell("03_streams", "chunk_work")``):
    it is compiled, and the pinned buffers allocated, on the first call only.
    """
    state = {}

    def run(chunks, streams, rounds):
        import cupy
        if not state:
            state.update(k=cell.kernel("chunk_work"), bufs=PipelineBuffers(n),
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
    rng = np.random.default_rng(seed)
    idx = np.unique(np.concatenate([[0, bufs.n - 1], rng.integers(0, bufs.n, sample)]))
    # float32 rounding of each step is damped by the 0.999 factor: errors stay near 1e-7 * 1000
    return check(bufs.h_out[idx], work_reference(bufs.h_in[idx], rounds).astype(np.float32),
                 rtol=1e-3, atol=1e-4, name="pipeline output (sampled)")


# --- the recorded pipeline, drawn without a GPU ----------------------------------------------------

def recorded_pipeline() -> dict | None:
    """The benchmark suite's pipeline run (benchmarks/results): chunks, streams, stage times per chunk
    (ms, from the row's note), its total and the one-stream total; None where nothing is recorded."""
    rows, gpu, _ = recorded_rows("03_streams")
    ref = next((r for r in rows if r["name"].startswith("reference pipeline")), None)
    one = next((r for r in rows if r["name"] == "same pipeline on one stream"), None)
    m = ref and re.search(r"(\d+) chunks on (\d+) streams", ref["name"])
    if not (m and one):
        return None
    stages = {k: float(v) for k, v in re.findall(r"(H2D|kernel|D2H) ([\d.]+)", ref["note"])}
    return {"gpu": gpu, "chunks": int(m.group(1)), "streams": int(m.group(2)), "stages": stages,
            "total_ms": ref["value"], "one_stream_ms": one["value"]}


def plot_recorded_pipeline():
    """Timelines of the recorded pipeline on one stream and on its streams, modeled from the recorded stage
    times (`course.streams.pipeline_schedule`), each titled with the model's total and the recorded one."""
    import matplotlib.pyplot as plt
    rec = recorded_pipeline()
    if rec is None:
        print("No recorded pipeline of 03_streams yet; `python -m benchmarks --only 03_streams` on a GPU records it.")
        return None
    st = rec["stages"]
    fig, axes = plt.subplots(2, 1, figsize=(12, 5.5), sharex=True)
    for ax, streams, recorded in ((axes[0], 1, rec["one_stream_ms"]), (axes[1], rec["streams"], rec["total_ms"])):
        spans = pipeline_schedule(st["H2D"], st["kernel"], st["D2H"], rec["chunks"], streams)
        timeline(spans, ax=ax, title=f"{rec['chunks']} chunks, {streams} stream(s): modeled {spans[-1][3]:.2f} ms, "
                                     f"recorded {recorded:.2f} ms on {rec['gpu']}")
    fig.tight_layout()
    return axes
