"""The grader's driver for chapter 03's ``two_stage``: a student's stream schedule (data, `course.schedule`) run
with the grader's own kernels, buffers and copies.

Per chunk: ``h2d`` copies the chunk of the pinned input into ``d_in``; ``produce`` writes
``tmp = x * (x*x - 0.5)`` (chapter 03's reference ``process_chunk``, compiled from its solutions file);
``consume`` writes ``out[i] = tmp[i] + 0.5 * tmp[i - 1]`` (``tmp[-1]`` taken as 0), so the first value of a
chunk reads the previous chunk's last ``tmp``; ``d2h`` copies the chunk of ``out`` back. Buffers, copies,
launches and the clock are `course.streams`' (the pipeline's engine). Each array is whole (one slot per
element), so the only hazards are a read before its write.

Order, deterministically: `course.schedule.missing_dependencies` finds every read the schedule does not order
after its write (stream order and event waits, a pure function of the data). A correctness case then runs
the schedule with the producer of the first unordered read held back (a one-thread `stall` kernel spinning
`STALL_NS` on its stream just before it), so that the reader, which nothing orders after it, runs first and
reads poisoned (NaN) data: the output shows the race. The verdict rests on the analysis, so a run that comes
out right by luck is still a failure; a schedule with no unordered read runs unstalled and its output must
be right. Overlap: `pipeline_report` times the schedule over ``nbytes`` each way against the same work without
overlap, with fresh inputs and the output checked on every timed run.
"""
from __future__ import annotations

import contextlib

import numpy as np

import course
from course import schedule as sched
from course.streams import (PipelineBuffers, StreamClock, Timeline, checked_runs, chunk_bounds, ideal_pipeline_ms,
                            offset_process)
from drivers.pipeline import MAX_GRID, process_chunk_reference

__all__ = ["SOURCE", "BLOCK", "MAX_GRID", "STALL_NS", "LIMITS", "check_schedule", "expected", "case_verdict",
           "order_message", "before_confinement", "grade_case", "run_schedule", "pipeline_report"]

SOURCE = r"""
extern "C" __global__ void consume(const float* __restrict__ tmp, float* __restrict__ out, int offset, int count)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        const int j = offset + i;
        out[j] = tmp[j] + 0.5f * (j > 0 ? tmp[j - 1] : 0.0f);
    }
}

extern "C" __global__ void stall(long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < (unsigned long long)ns);
}
"""
"""The driver's own kernels. ``produce`` is chapter 03's reference ``process_chunk`` (one home per kernel:
solutions/03_streams/process_chunk.cu), compiled with these."""
PRODUCE = ("03_streams", "process_chunk")
BLOCK = 256
# holding a producer back 50 ms: the correctness cases move at most a few MB per chunk (under a millisecond
# on PCIe gen3), so a reader that nothing orders after the producer has run long before the producer writes
STALL_NS = 50_000_000
LIMITS = {"max_streams": sched.MAX_STREAMS, "max_chunks": sched.MAX_CHUNKS}
_LABELS = {"h2d": "H2D", "produce": "produce", "consume": "consume", "d2h": "D2H"}
_STATE = {}


def check_schedule(name: str, schedule) -> str:
    """The parent's check (no GPU): '' when the schedule is well formed, else what is wrong."""
    return sched.check_schedule(schedule, **LIMITS)


def expected(x):
    """What the two stages compute from the input (a NumPy or CuPy array), on float64 (float32 rounding is
    within `course.check`'s tolerance)."""
    t = process_chunk_reference(x.astype(np.float64))
    out = t.copy()
    out[1:] += 0.5 * t[:-1]
    return out


def case_verdict(schedule: dict, n: int) -> tuple:
    """(missing dependencies, the stage instance to hold back or None) for ``n`` elements: pure Python."""
    n_chunks = len(chunk_bounds(n, schedule["chunks"]))
    missing = sched.missing_dependencies(schedule, n_chunks)
    if not missing:
        return missing, None
    m = missing[0]
    return missing, (m.dep.producer, m.producer_chunk)


def order_message(missing: list) -> str:
    """The verdict's first part for a schedule that leaves reads unordered: each one, and its fix."""
    return ("the schedule leaves a read unordered after its write. "
            + "\n".join(sched.dependency_message(m) for m in missing))


def before_confinement() -> None:
    """Compile the kernels now: the grading child calls this before it closes the file system, so that no
    compiler file has to be read once it is closed."""
    _kernels()


def _source() -> str:
    """The reference ``process_chunk`` (the produce stage) and the driver's own kernels, one program."""
    produce = course.solution_source(*PRODUCE)
    if produce is None:
        raise RuntimeError(f"drivers.two_stage compiles its produce kernel from solutions/{PRODUCE[0]}/"
                           f"{PRODUCE[1]}.cu, which this copy of the course lacks: grade from a full checkout.")
    return produce + "\n" + SOURCE


def _kernels() -> dict:
    """``produce`` and ``consume`` as `offset_process` launchers (``BLOCK`` threads, at most ``MAX_GRID``
    blocks a chunk), and the ``stall`` kernel."""
    if "kernels" not in _STATE:
        k = course.compile(_source(), name="two_stage.cu").kernels
        _STATE["kernels"] = {"produce": offset_process(k[PRODUCE[1]], block=BLOCK, max_grid=MAX_GRID),
                             "consume": offset_process(k["consume"], block=BLOCK, max_grid=MAX_GRID),
                             "stall": k["stall"]}
    return _STATE["kernels"]


class _Buffers(PipelineBuffers):
    """`course.streams.PipelineBuffers` (pinned input and output, device input and output) and the device
    ``tmp`` between the two kernels: ``n`` float32 each, grader-owned, made fresh from ``seed``."""

    def __init__(self, n: int, seed: int = 0):
        import cupy
        self.tmp = cupy.empty(int(n), dtype=cupy.float32)   # before the first fill, which poisons it
        super().__init__(n, seed=seed)

    def fill(self, seed: int) -> None:
        """`PipelineBuffers.fill` (new inputs; NaN in the device input and both outputs) and NaN in ``tmp``: every
        buffer a stage writes starts poisoned, so a read before its write shows."""
        self.tmp.fill(np.nan)
        super().fill(seed)


def _issue(stage: str, bufs: _Buffers, off: int, cnt: int, stream) -> None:
    if stage == "h2d":
        bufs.h2d(off, cnt, stream)
    elif stage == "produce":
        _kernels()["produce"](bufs.d_in, bufs.tmp, off, cnt, stream)
    elif stage == "consume":
        _kernels()["consume"](bufs.tmp, bufs.d_out, off, cnt, stream)
    else:
        bufs.d2h(off, cnt, stream)


def run_schedule(schedule: dict, bufs: _Buffers, *, hold=None, timeline: Timeline | None = None) -> float:
    """Issue the schedule's plan over ``bufs``; the ms from a start event every stream waits for to a stop
    event after all of them. ``hold`` = (stage, chunk): a `stall` of `STALL_NS` before that stage instance."""
    import cupy
    bounds = chunk_bounds(bufs.n, schedule["chunks"])
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in range(schedule["streams"])]
    events = {}
    clock = StreamClock(streams)
    null = contextlib.nullcontext()
    for kind, s, what, c in sched.plan(schedule, len(bounds)):
        st = streams[s]
        if kind == "wait":
            st.wait_event(events[(what, c)])
        elif kind == "record":
            ev = events[(what, c)] = cupy.cuda.Event(disable_timing=True)
            ev.record(st)
        else:
            if hold == (what, c):
                _kernels()["stall"](1, 1, STALL_NS, stream=st)
            off, cnt = bounds[c]
            with (timeline.span(st, f"stream {s}", _LABELS[what]) if timeline else null):
                _issue(what, bufs, off, cnt, st)
    return clock.stop()


def _check(bufs: _Buffers) -> course.CheckResult:
    return bufs.check(expected, name="out")


def grade_case(name: str, schedule: dict, sizes: dict, seed: int) -> dict:
    """One correctness case: the schedule over ``sizes["n"]`` fresh values, a producer held back where the
    schedule leaves a read unordered. ``{"status": "passed" | "failed" | "grader error", "message": str}``."""
    n = int(sizes["n"])
    missing, hold = case_verdict(schedule, n)
    bufs = _Buffers(n, seed)
    run_schedule(schedule, bufs, hold=hold)
    res = _check(bufs)
    if missing:
        seen = (f"In this run {hold[0]} of chunk {hold[1]} was held back {STALL_NS / 1e6:g} ms, and the output "
                f"shows the race: {res.message}" if not res else
                f"In this run, with {hold[0]} of chunk {hold[1]} held back {STALL_NS / 1e6:g} ms, the output happened "
                "to come out right, but nothing guarantees it.")
        return {"status": "failed", "message": f"{order_message(missing)}\n{seen}"}
    if not res:
        return {"status": "grader error", "message": (
            f"the schedule orders every read after its write, yet the output is wrong ({res.message}): the "
            "driver drivers.two_stage or course.schedule is broken")}
    return {"status": "passed", "message": ""}


def _stage_ms(stage: str, bufs: _Buffers) -> float:
    import cupy

    def fn():
        _issue(stage, bufs, 0, bufs.n, cupy.cuda.get_current_stream())
    return course.benchmark(fn, flush_l2=stage in ("produce", "consume"), budget_s=0.5, name=stage).median_ms


def pipeline_report(name: str, schedule: dict, *, seed: int, nbytes: int, repeats: int = 3) -> dict:
    """The schedule over ``nbytes`` each way: ``correct`` and ``message`` (every run's output checked, fresh
    inputs each run), ``total_ms`` (best of ``repeats``), ``serial_ms`` (the four stages over the whole array,
    each timed alone), ``ratio``, ``ideal_ms`` (from those stage times split into the schedule's chunks) and
    the ``spans`` of one more run."""
    n = int(nbytes) // 4
    _, hold = case_verdict(schedule, n)
    if hold is not None:   # the parent ran the correctness cases first; never time a racy schedule
        return {"correct": False, "message": order_message(sched.missing_dependencies(
            schedule, len(chunk_bounds(n, schedule["chunks"]))))}
    bufs = _Buffers(n, seed)
    times, res = checked_runs(lambda: run_schedule(schedule, bufs), bufs, expected, seed=seed, repeats=repeats,
                              name="out")
    if not res:
        return {"correct": False, "message": res.message}
    tl = Timeline()
    run_schedule(schedule, bufs, timeline=tl)
    st = {stage: _stage_ms(stage, bufs) for stage in sched.STAGES}
    serial = sum(st.values())
    total = min(times)
    c = len(chunk_bounds(n, schedule["chunks"]))
    ideal = ideal_pipeline_ms(st["h2d"] / c, (st["produce"] + st["consume"]) / c, st["d2h"] / c, c)
    return {"correct": True, "message": "", "total_ms": total, "serial_ms": serial, "ratio": total / serial,
            "ideal_ms": ideal, "spans": tl.spans(), "streams": schedule["streams"], "chunks": c}
