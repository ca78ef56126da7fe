"""course.timeline_trace: CUPTI activity records to the course's timeline spans, a fake CUPTI driving trace(),
record and replay, and the FeatureUnavailable path (CPU); a real trace of copies and a kernel (GPU)."""
from __future__ import annotations

import enum
import json
import sys
import types

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from repo_helpers import import_course  # noqa: E402

course = import_course()
from course import _env, plots, streams  # noqa: E402
from course import timeline_trace as tt  # noqa: E402

prof = sys.modules["course.profile"]

RECORDS = [  # two streams, copies overlapping a kernel: what chapter 03's pipeline produces, in CUPTI's terms
    {"kind": "memcpy", "name": "H2D", "stream": 13, "start_ns": 1_000_000, "end_ns": 1_400_000, "bytes": 1 << 22},
    {"kind": "kernel", "name": "process_chunk", "stream": 13, "start_ns": 1_400_000, "end_ns": 1_600_000,
     "bytes": 0},
    {"kind": "memcpy", "name": "H2D", "stream": 14, "start_ns": 1_400_000, "end_ns": 1_800_000, "bytes": 1 << 22},
    {"kind": "memcpy", "name": "D2H", "stream": 13, "start_ns": 1_600_000, "end_ns": 2_000_000, "bytes": 1 << 22},
]


def test_to_timeline_lanes_labels_and_times():
    """Are lanes numbered by first appearance, labels the event timeline's, times ms from the first start?"""
    spans = tt.to_timeline(list(reversed(RECORDS)))
    assert spans[0] == ("stream 1", "H2D", 0.0, pytest.approx(0.4))
    assert ("stream 1", "kernel", pytest.approx(0.4), pytest.approx(0.6)) in spans
    assert ("stream 2", "H2D", pytest.approx(0.4), pytest.approx(0.8)) in spans
    assert ("stream 1", "D2H", pytest.approx(0.6), pytest.approx(1.0)) in spans
    assert tt.to_timeline([]) == []


def test_spans_feed_the_streams_tools():
    """Do the spans go straight into course.streams' overlap statistics and course.plots.timeline?"""
    spans = tt.to_timeline(RECORDS)
    summary = streams.overlap_summary(spans)
    assert summary["busy_ms"]["H2D"] == pytest.approx(0.8)   # 0-0.4 and 0.4-0.8 on two streams
    ax = plots.timeline(spans)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stream 1", "stream 2"]


def test_missing_cupti_raises_feature_unavailable(monkeypatch):
    """Without cupti-python, is FeatureUnavailable raised with how to install it (no traceback from the import)?"""
    monkeypatch.setitem(sys.modules, "cupti", None)  # `from cupti import cupti` now raises ImportError
    with pytest.raises(course.FeatureUnavailable, match="pip install") as info:
        tt.trace(lambda: None)
    assert "cupti-python" in str(info.value) and info.value.__cause__ is None
    assert tt.available() is False


# --- a fake cupti.cupti: enough of the binding's activity API to drive trace() ----------------------------

class _Kind(enum.IntEnum):
    KERNEL = 3
    MEMCPY = 1
    CONCURRENT_KERNEL = 10
    RUNTIME = 5


class _CopyKind(enum.IntEnum):
    UNKNOWN = 0
    HTOD = 1
    DTOH = 2
    DTOD = 8


def fake_cupti(activities, *, refuse=False):
    state = {"enabled": set(), "callbacks": None, "flushed": 0}
    m = types.SimpleNamespace(ActivityKind=_Kind, ActivityMemcpyKind=_CopyKind, state=state)

    def enable(kind):
        if refuse:
            raise RuntimeError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")
        state["enabled"].add(kind)
    m.activity_enable = enable
    m.activity_disable = lambda kind: state["enabled"].discard(kind)
    m.activity_register_callbacks = lambda req, done: state.__setitem__("callbacks", (req, done))

    def flush(flag):
        state["flushed"] += 1
        req, done = state["callbacks"]
        assert req()[0] > 0
        done(activities)
    m.activity_flush_all = flush
    return m


def _act(kind, **kw):
    return types.SimpleNamespace(kind=kind, **kw)


ACTIVITIES = [
    _act(_Kind.CONCURRENT_KERNEL, name="_Z5scalePfi", stream_id=7, start=2_000, end=5_000),
    _act(_Kind.MEMCPY, copy_kind=_CopyKind.HTOD, stream_id=7, start=1_000, end=2_000, bytes=4096),
    _act(_Kind.MEMCPY, copy_kind=_CopyKind.DTOH, stream_id=7, start=5_000, end=6_000, bytes=4096),
    _act(_Kind.RUNTIME, start=0, end=10),  # not asked for: left out
]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    def install(activities=ACTIVITIES, refuse=False):
        m = fake_cupti(activities, refuse=refuse)
        monkeypatch.setitem(sys.modules, "cupti", types.SimpleNamespace(cupti=m))
        monkeypatch.setitem(tt._state, "registered", False)
        monkeypatch.setattr(tt, "_sync", lambda: None)
        monkeypatch.setattr(_env, "device_info",
                            lambda: types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", driver="13.0"))
        monkeypatch.setattr(prof, "profiles_dir", lambda: tmp_path)
        return m
    return install


def test_trace_converts_and_orders_records(fake):
    """Does trace() enable kernels and copies, run fn, flush, and return copies and kernels in time order?"""
    m = fake()
    ran = []
    got = tt.trace(lambda: ran.append(1))
    assert ran == [1] and m.state["flushed"] == 1
    assert m.state["enabled"] == set()  # disabled again afterwards
    assert [r["name"] for r in got] == ["H2D", "_Z5scalePfi", "D2H"]
    assert got[0] == {"kind": "memcpy", "name": "H2D", "stream": 7, "start_ns": 1000, "end_ns": 2000, "bytes": 4096}
    assert got[1]["kind"] == "kernel" and got[1]["bytes"] == 0


def test_trace_records_and_replays(fake, tmp_path, monkeypatch):
    """On a recording run, is record= saved as trace-<name>-<gpu>.json, and recorded_trace() the same records
    with the GPU named? On a student's run, is nothing written?"""
    fake()
    path = tmp_path / "trace-03-pipeline-nvidia-h100-80gb-hbm3.json"
    monkeypatch.delenv("COURSE_RECORD_SWEEPS", raising=False)
    tt.trace(lambda: None, record="03-pipeline")
    assert not path.exists()
    monkeypatch.setenv("COURSE_RECORD_SWEEPS", "1")
    got = tt.trace(lambda: None, record="03-pipeline")
    data = json.loads(path.read_text())
    assert data["records"] == got
    back = tt.recorded_trace("03-pipeline")
    assert back["device"] == "NVIDIA H100 80GB HBM3" and back["records"] == got
    assert tt.recorded_trace("03-pipe") is None


def test_refused_tracing_is_feature_unavailable(fake):
    """When CUPTI refuses to enable tracing (driver too old, no permission), is it FeatureUnavailable, not a crash?"""
    fake(refuse=True)
    with pytest.raises(course.FeatureUnavailable, match="CUDA 13.0"):
        tt.trace(lambda: None)


def test_records_after_a_trace_are_dropped(fake):
    """Are records flushed after a trace ended kept out of the next trace's list?"""
    m = fake()
    first = tt.trace(lambda: None)
    kept = list(first)
    req, done = m.state["callbacks"]
    done(ACTIVITIES)  # a late buffer: nobody's
    assert first == kept
    m.state["callbacks"] = (req, lambda acts: None)  # the next flush delivers nothing
    assert tt.trace(lambda: None) == []


# --- GPU -------------------------------------------------------------------------------------------------

SCALE = r'''
extern "C" __global__ void scale_chunk(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2.0f;
}
'''


@pytest.mark.gpu
def test_trace_of_copies_and_a_kernel():
    """With CUPTI, does a trace of H2D, a kernel and D2H hold all three on one stream, in order, with the bytes?"""
    import cupy
    import numpy as np
    if not tt.available():
        pytest.skip("cupti-python is not installed here; " + tt.INSTALL_HINT)
    k = course.compile(SCALE).kernel("scale_chunk")
    n = 1 << 22
    host = np.ones(n, dtype=np.float32)
    dev = cupy.empty(n, dtype=cupy.float32)

    def work():
        dev.set(host)
        k(course.grid_for(n, 256), 256, dev, n)
        dev.get()
    try:
        recs = tt.trace(work)
    except course.FeatureUnavailable as e:
        pytest.fail(f"cupti-python is installed but tracing failed: {e}")
    kernels = [r for r in recs if r["kind"] == "kernel" and "scale_chunk" in r["name"]]
    h2d = [r for r in recs if r["kind"] == "memcpy" and r["name"] == "H2D"]
    d2h = [r for r in recs if r["kind"] == "memcpy" and r["name"] == "D2H"]
    assert len(kernels) == 1, recs
    # a pageable copy may arrive as several records; together they move the array once each way
    assert sum(r["bytes"] for r in h2d) == 4 * n and sum(r["bytes"] for r in d2h) == 4 * n, recs
    assert max(r["end_ns"] for r in h2d) <= kernels[0]["start_ns"] < kernels[0]["end_ns"]
    assert kernels[0]["end_ns"] <= min(r["start_ns"] for r in d2h)
    spans = tt.to_timeline(recs)
    assert {s[1] for s in spans} >= {"H2D", "kernel", "D2H"}
