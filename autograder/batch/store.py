"""Finished gradings, one SQLite row each, committed as each arrives: a batch killed at any moment keeps
everything it finished, and a rerun grades only jobs whose kernel, spec version or GPU model changed."""
from __future__ import annotations

import datetime
import json
import sqlite3
from pathlib import Path

from ..report import Status

__all__ = ["ResultStore", "FINAL"]

# verdicts that stand; the others (no GPU, a grader error, a lost worker) are graded again next time
FINAL = ("passed", "correct, not timed", "slow", "flagged", "failed", "timed out", "crashed", "compile error",
         "skipped")
assert set(FINAL) <= set(Status.SEVERITY)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    student TEXT NOT NULL, assignment TEXT NOT NULL, exercise TEXT NOT NULL,
    content TEXT NOT NULL, spec TEXT NOT NULL, gpu TEXT NOT NULL,
    status TEXT NOT NULL, points REAL NOT NULL, max_points REAL NOT NULL, ratio REAL,
    final INTEGER NOT NULL, feedback TEXT NOT NULL, report TEXT NOT NULL,
    graded_at TEXT NOT NULL, duration_s REAL, worker TEXT,
    PRIMARY KEY (student, assignment, exercise, content, spec, gpu))
"""


class ResultStore:
    """The batch's results file (default ``grading/results.sqlite`` beside the submissions)."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # one writer (the batch's client); WAL so that a reader (the nbgrader plugin) never blocks it
        self.db = sqlite3.connect(str(self.path), timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(_SCHEMA)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def done(self, job, gpus=None) -> dict | None:
        """The standing result of ``job`` (same kernel and spec version; on one of ``gpus`` if given)."""
        q = ("SELECT * FROM results WHERE student=? AND assignment=? AND exercise=? AND content=? AND spec=? "
             "AND final=1")
        args = [job.student, job.assignment, job.exercise, job.content, job.spec]
        if gpus:
            q += f" AND gpu IN ({','.join('?' * len(gpus))})"
            args += list(gpus)
        row = self.db.execute(q + " ORDER BY graded_at DESC LIMIT 1", args).fetchone()
        return self._dict(row) if row else None

    def lookup(self, assignment: str, exercise: str, content: str, spec: str) -> dict | None:
        """The latest standing result for this exact kernel and spec version, whoever submitted it and on
        whichever GPU (the nbgrader plugin reads results of a batch graded elsewhere this way)."""
        row = self.db.execute(
            "SELECT * FROM results WHERE assignment=? AND exercise=? AND content=? AND spec=? AND final=1 "
            "ORDER BY graded_at DESC LIMIT 1", (assignment, exercise, content, spec)).fetchone()
        return self._dict(row) if row else None

    def put(self, job, report: dict, gpu: str, worker: str = "") -> dict:
        """Record one grading and commit it at once."""
        speed = report.get("speed") or {}
        row = {"student": job.student, "assignment": job.assignment, "exercise": job.exercise,
               "content": job.content, "spec": job.spec, "gpu": gpu or "none",
               "status": report.get("status", Status.ERROR), "points": float(report.get("points") or 0.0),
               "max_points": float(report.get("max_points") or 0.0),
               "ratio": speed.get("ratio") if isinstance(speed, dict) else None,
               "final": int(report.get("status") in FINAL), "feedback": report.get("_feedback", ""),
               "report": json.dumps({k: v for k, v in report.items() if k != "_feedback"}, default=str),
               "graded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
               "duration_s": report.get("duration_s"), "worker": worker}
        cols = ", ".join(row)
        self.db.execute(f"INSERT OR REPLACE INTO results ({cols}) VALUES ({', '.join('?' * len(row))})",
                        list(row.values()))
        self.db.commit()
        return row

    def latest(self, job) -> dict | None:
        """The standing result of ``job``, else its latest attempt (a grader error, no GPU), else None."""
        found = self.done(job)
        if found is None:
            row = self.db.execute(
                "SELECT * FROM results WHERE student=? AND assignment=? AND exercise=? AND content=? AND spec=? "
                "ORDER BY graded_at DESC LIMIT 1",
                (job.student, job.assignment, job.exercise, job.content, job.spec)).fetchone()
            found = self._dict(row) if row else None
        return found

    def current(self, jobs) -> list:
        """The result of each job that has one (for the report and the gradebook)."""
        return [r for r in (self.latest(j) for j in jobs) if r is not None]

    @staticmethod
    def _dict(row) -> dict:
        keys = ("student", "assignment", "exercise", "content", "spec", "gpu", "status", "points", "max_points",
                "ratio", "final", "feedback", "report", "graded_at", "duration_s", "worker")
        return dict(zip(keys, row))
