"""Where a batch's time goes: with ``AUTOGRADER_TRACE=FILE`` set, grading children and GPU locks append one
JSON line per event to FILE (a child's steps as its supervisor sees them; each GPU-lock wait and hold).

For the grader's developers (benchmarks/class_batch.py --trace summarises a batch); off unless the variable
is set. The file is opened before a child confines itself, and lines are appended with one ``write`` each,
which O_APPEND keeps whole across processes.
"""
from __future__ import annotations

import json
import os
import time

__all__ = ["ENV", "Tracer", "tracer", "summarise"]

ENV = "AUTOGRADER_TRACE"


class Tracer:
    def __init__(self, path: str | None):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if path else None

    def __bool__(self) -> bool:
        return self.fd is not None

    def event(self, ev: str, **fields) -> None:
        if self.fd is None:
            return
        line = json.dumps({"t": round(time.time(), 4), "pid": os.getpid(), "ev": ev, **fields}) + "\n"
        try:
            os.write(self.fd, line.encode())
        except OSError:
            pass


_TRACERS: dict = {}


def tracer() -> Tracer:
    """This process's tracer for the file ``AUTOGRADER_TRACE`` names now (a no-op one when unset)."""
    path = os.environ.get(ENV) or None
    if path not in _TRACERS:
        _TRACERS[path] = Tracer(path)
    return _TRACERS[path]


def summarise(path) -> dict:
    """Totals from a trace file: children by phase, lock waits and holds by kind (seconds)."""
    out = {"children": {}, "steps": {}, "lock_wait_s": {}, "lock_hold_s": {}, "lock_count": {}}
    starts = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if not isinstance(e, dict) or "t" not in e:
                continue  # JSON, but not an event of ours
            ev = e.get("ev")
            if ev == "lock":
                k = e["kind"]
                out["lock_wait_s"][k] = out["lock_wait_s"].get(k, 0.0) + e["wait"]
                out["lock_hold_s"][k] = out["lock_hold_s"].get(k, 0.0) + e["hold"]
                out["lock_count"][k] = out["lock_count"].get(k, 0) + 1
            elif ev == "child":
                c = out["children"].setdefault(e["phase"], {"count": 0, "seconds": 0.0})
                c["count"] += 1
                c["seconds"] += e["seconds"]
                for step, secs in (e.get("steps") or {}).items():
                    s = out["steps"].setdefault(step, {"count": 0, "seconds": 0.0})
                    s["count"] += 1
                    s["seconds"] += secs
            starts.setdefault("first", e["t"])
            starts["last"] = e["t"]
    out["span_s"] = starts.get("last", 0.0) - starts.get("first", 0.0)
    return out
