"""A system timeline from CUPTI activity records: what the GPU ran, on which stream, from when to when.

`trace(fn)` runs ``fn`` with CUPTI's activity tracing of kernels and memory copies on (through NVIDIA's
optional cupti-python binding), and returns one record per kernel or copy with GPU timestamps. Unlike CUDA
events (`course.streams.Timeline`), the timestamps are those of the work itself, not of the stream reaching
an event, so a copy queued behind a busy copy engine starts where its bytes start moving.
`to_timeline` turns records into the spans `course.plots.timeline` draws, lane per stream, the same labels as
chapter 03's event timeline (H2D, kernel, D2H), so the two can be drawn side by side.
"""
from __future__ import annotations

import datetime
import threading

from ._errors import FeatureUnavailable

__all__ = ["INSTALL_HINT", "trace", "to_timeline", "recorded_trace", "available"]

INSTALL_HINT = ("Install NVIDIA's CUPTI binding matching the driver's CUDA version (nvidia-smi shows it): "
                "`pip install 'cupti-python==13.0.*' 'nvidia-cuda-cupti==13.0.*'` for a CUDA 13 driver, or "
                "`pip install 'cupti-python==12.8.*'` for a CUDA 12 one (the course's extra: "
                "`pip install -e '.[cupti]'`). A CUPTI newer than the driver refuses to trace.")

# cupti.ActivityMemcpyKind names -> the labels chapter 03's event timeline uses
_COPY_LABELS = {"HTOD": "H2D", "DTOH": "D2H", "DTOD": "D2D", "HTOH": "H2H", "PTOP": "P2P"}

_lock = threading.Lock()
_state = {"registered": False, "sink": None}


def _load():
    """The cupti.cupti module, or FeatureUnavailable saying how to get it (the import also loads libcupti)."""
    try:
        from cupti import cupti
    except Exception as exc:  # ImportError, or libcupti failing to load inside the import
        raise FeatureUnavailable(f"CUPTI activity tracing is not available here ({type(exc).__name__}: {exc}). "
                                 f"{INSTALL_HINT}") from None
    return cupti


def available() -> bool:
    """True when cupti-python imports (tracing may still fail on a driver older than its CUPTI)."""
    try:
        _load()
    except FeatureUnavailable:
        return False
    return True


def _record(cupti, a):
    # Activity objects view CUPTI's buffer, which is reused after the callback returns: copy what we keep now.
    if a.kind in (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.KERNEL):
        return {"kind": "kernel", "name": str(a.name), "stream": int(a.stream_id), "start_ns": int(a.start),
                "end_ns": int(a.end), "bytes": 0}
    if a.kind == cupti.ActivityKind.MEMCPY:
        try:
            copy = cupti.ActivityMemcpyKind(a.copy_kind).name
        except ValueError:
            copy = "UNKNOWN"
        return {"kind": "memcpy", "name": _COPY_LABELS.get(copy, copy), "stream": int(a.stream_id),
                "start_ns": int(a.start), "end_ns": int(a.end), "bytes": int(a.bytes)}
    return None


def _register(cupti) -> None:
    """Register CUPTI's buffer callbacks once per process; each trace points them at its own list."""
    if _state["registered"]:
        return

    def requested():
        return 8 * 1024 * 1024, 0  # bytes per buffer; 0: as many records as fit

    def completed(activities):
        sink = _state["sink"]
        if sink is None:
            return  # records flushed after a trace ended belong to nobody
        for a in activities:
            r = _record(cupti, a)
            if r is not None:
                sink.append(r)
    cupti.activity_register_callbacks(requested, completed)
    _state["registered"] = True


def _sync():
    import cupy
    cupy.cuda.Device().synchronize()


def trace(fn, *, record: str | None = None) -> list:
    """Run ``fn()`` with CUPTI tracing kernels and memory copies; return their records, earliest first.

    Each record is ``{"kind": "kernel" | "memcpy", "name", "stream", "start_ns", "end_ns", "bytes"}``: a kernel's
    (mangled) name or a copy's direction ("H2D", "D2H", "D2D"), CUPTI's stream id, GPU timestamps in ns and the
    bytes a copy moved. With ``record="name"`` on a recording run (`recording_run`, course/profile.py) the trace is
    saved as benchmarks/results/profiles/trace-<name>-<gpu>.json for `recorded_trace`.

    Raises
    ------
    FeatureUnavailable
        When cupti-python or its libcupti is missing or refuses this driver, with how to install it.
    NoGPUError
        Without a GPU.
    """
    cupti = _load()
    from ._env import device_info
    info = device_info()
    kinds = (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY)
    records: list = []
    with _lock:
        _sync()  # work enqueued before the trace is not part of it
        enabled = []
        try:
            _register(cupti)
            for k in kinds:
                cupti.activity_enable(k)
                enabled.append(k)
        except Exception as exc:  # cupti.cuptiError: e.g. CUPTI_ERROR_NOT_INITIALIZED on too old a driver
            for k in enabled:
                cupti.activity_disable(k)
            raise FeatureUnavailable(f"CUPTI could not start tracing on this driver (CUDA {info.driver}): "
                                     f"{type(exc).__name__}: {exc}. {INSTALL_HINT}") from None
        _state["sink"] = records
        try:
            fn()
            _sync()
        finally:
            try:
                cupti.activity_flush_all(1)  # 1: forced, so records of finished work arrive now
            finally:
                _state["sink"] = None
                for k in kinds:
                    cupti.activity_disable(k)
    records.sort(key=lambda r: (r["start_ns"], r["end_ns"]))
    from .profile import recording_run
    if record and recording_run():
        _save(record, records, info.name)
    return records


def to_timeline(records) -> list:
    """Spans ``(lane, label, start_ms, end_ms)`` for `course.plots.timeline` (and `course.streams`' statistics).

    Lanes are "stream 1", "stream 2", ... in the order each stream first ran something; labels are "kernel" or a
    copy's direction (the labels of chapter 03's event timeline); times are ms from the first record's start.
    """
    records = sorted(records, key=lambda r: (r["start_ns"], r["end_ns"]))
    if not records:
        return []
    t0 = records[0]["start_ns"]
    lanes: dict = {}
    spans = []
    for r in records:
        lane = lanes.setdefault(r["stream"], f"stream {len(lanes) + 1}")
        label = "kernel" if r["kind"] == "kernel" else r["name"]
        spans.append((lane, label, (r["start_ns"] - t0) / 1e6, (r["end_ns"] - t0) / 1e6))
    return spans


def _save(name: str, records: list, device: str) -> None:
    from .profile import save_recording
    save_recording(name, {"date": datetime.date.today().isoformat(), "records": records}, device,
                   file_stem=f"trace-{name}")


def recorded_trace(name: str):
    """The trace recorded as ``name`` (an H100's first, else any GPU's): ``{"name", "device", "date",
    "records"}``, or None when none is recorded."""
    from .profile import load_recording
    return load_recording(name, file_stem=f"trace-{name}", accept=lambda d: isinstance(d.get("records"), list))
