"""Grading results as objects: points, a status, and a reason a student can act on.

Formatting (`table`, `feedback`, `to_json`) is kept apart from the data, which stays plain so it
crosses the pipe from a grading child and round-trips through JSON.
"""
from __future__ import annotations

import dataclasses
import json

__all__ = ["Status", "SizeResult", "SpeedResult", "PipelineResult", "ExerciseReport", "Report", "EXIT_OK",
           "EXIT_USAGE", "EXIT_NEEDS_GPU"]

EXIT_OK, EXIT_USAGE, EXIT_NEEDS_GPU = 0, 2, 3


class Status:
    """Exercise and per-size statuses (plain strings, so JSON stays readable)."""

    PASSED = "passed"            # correct, and fast enough (or no speed points)
    SLOW = "slow"                # correct, below the speed threshold
    FLAGGED = "flagged"          # correct, but timed faster than the hardware allows
    FAILED = "failed"            # wrong output, out-of-bounds write, changed input, refused launch ...
    TIMED_OUT = "timed out"
    CRASHED = "crashed"          # illegal address, launch failure, or the grading child died
    COMPILE_ERROR = "compile error"
    NEEDS_GPU = "needs a GPU"
    SKIPPED = "skipped"          # the GPU is older than the exercise needs
    NOT_RUN = "not run"          # a size after a timeout, or timing after a failure
    ERROR = "grader error"       # a bug in the grader or the spec; never the student's fault

    CORRECT = (PASSED, SLOW, FLAGGED)
    # when sizes disagree, the exercise shows the most severe
    SEVERITY = (ERROR, NEEDS_GPU, COMPILE_ERROR, TIMED_OUT, CRASHED, FAILED, SKIPPED, FLAGGED, SLOW, PASSED,
                NOT_RUN)


@dataclasses.dataclass
class SizeResult:
    sizes: dict
    status: str
    message: str = ""
    ref_ms: float | None = None


@dataclasses.dataclass
class SpeedResult:
    student_ms: float
    reference_ms: float
    student_iqr_ms: float
    reference_iqr_ms: float
    ratio: float              # reference time / student time (1.0 = as fast as the reference)
    threshold: float
    rounds: int               # measurements taken (re-measured inside the noise band)
    sizes: dict = dataclasses.field(default_factory=dict)
    floor_ms: float | None = None
    impossible: bool = False
    samples: int = 0
    note: str = ""


@dataclasses.dataclass
class PipelineResult:
    """The kernel in the grader's copy-compute-copy pipeline: its time over the un-overlapped time."""

    ratio: float              # total_ms / serial_ms (1.0 = no overlap; ~0.5 = both copy directions at once)
    total_ms: float           # the pipeline, best run
    serial_ms: float          # copy-in + kernel + copy-out of the whole array, each timed alone
    full_at: float
    half_at: float
    streams: int
    chunks: int
    block: int
    nbytes: int = 0           # moved each way
    ideal_ms: float | None = None      # h + k + d + (C - 1) max(h, k, d) from one chunk's stage times
    rounds: int = 1                    # measurements taken (re-measured near a tier boundary)
    settled: bool = True
    reference_ratio: float | None = None   # the reference kernel with its own streams and chunks, same child
    reference_streams: int | None = None
    reference_chunks: int | None = None
    spans: list = dataclasses.field(default_factory=list)  # [lane, label, start_ms, end_ms] of one run
    note: str = ""

    def summary(self) -> str:
        line = (f"Pipeline: {self.streams} stream{'s' * (self.streams != 1)}, {self.chunks} chunk"
                f"{'s' * (self.chunks != 1)}: {self.total_ms:.2f} ms vs {self.serial_ms:.2f} ms without overlap -> "
                f"{self.ratio:.2f} of the un-overlapped time (full points at <= {self.full_at:.3g}, half at <= "
                f"{self.half_at:.3g}; {self.rounds} measurement round{'s' * (self.rounds != 1)})")
        if self.reference_ratio is not None:
            line += (f"; the reference pipeline ({self.reference_streams} streams, {self.reference_chunks} chunks) "
                     f"took {self.reference_ratio:.2f}")
        return line + "."


def _wrap(line: str, width: int = 100) -> str:
    """Wrap prose at ``width`` (feedback pages show it in <pre>, which does not wrap); keep the
    indentation of numbered source and compiler-log lines, which are left as they are."""
    if len(line) <= width or line.startswith((" ", ">", "\t")) or "|" in line[:8]:
        return line
    import textwrap
    return "\n".join(textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False))


@dataclasses.dataclass
class ExerciseReport:
    chapter: str
    exercise: str
    status: str
    points: float
    max_points: float
    reason: str = ""
    submission: str = ""
    sizes: list = dataclasses.field(default_factory=list)
    speed: SpeedResult | None = None
    pipeline: PipelineResult | None = None
    compile_log: str = ""
    printf: str = ""
    notes: list = dataclasses.field(default_factory=list)
    counted_max_points: float | None = None  # max points that count towards the total (skips: 0)
    device: str = ""
    duration_s: float = 0.0

    def __post_init__(self):
        if self.counted_max_points is None:
            self.counted_max_points = self.max_points

    def feedback(self) -> str:
        """What a student reads: headline, then the reason, then details."""
        head = (f"{self.exercise}: {self.status} - {_fmt_pts(self.points)} / {_fmt_pts(self.max_points)} points")
        out = [head]
        if self.reason:
            out += ["", self.reason]
        failing = [s for s in self.sizes if s.status not in (Status.PASSED, Status.NOT_RUN)]
        if self.sizes and not failing and self.status in Status.CORRECT:
            out.append(f"Correct at all {len(self.sizes)} test sizes.")
        if self.speed is not None:
            s = self.speed
            out.append(f"Speed: yours {s.student_ms:.4f} ms, reference {s.reference_ms:.4f} ms -> "
                       f"{s.ratio:.2f}x the reference speed (needed {s.threshold:.2f}x; "
                       f"{s.rounds} measurement round{'s' * (s.rounds != 1)}).")
        if self.pipeline is not None:
            out.append(self.pipeline.summary())
        for note in self.notes:
            out.append(f"Note: {note}")
        text = "\n".join(_wrap(line) for line in "\n".join(out).split("\n"))
        if self.printf:  # the student's own output stays as printed
            text += "\n\nYour kernel printed (last part):\n" + self.printf
        return text

    def __str__(self) -> str:
        return self.feedback()

    def __repr__(self) -> str:
        return (f"<ExerciseReport {self.chapter}/{self.exercise} {self.status} "
                f"{_fmt_pts(self.points)}/{_fmt_pts(self.max_points)}>")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ExerciseReport":
        d = dict(d)
        d["sizes"] = [SizeResult(**s) for s in d.get("sizes", [])]
        d["speed"] = SpeedResult(**d["speed"]) if d.get("speed") else None
        d["pipeline"] = PipelineResult(**d["pipeline"]) if d.get("pipeline") else None
        return cls(**d)


def _fmt_pts(p: float) -> str:
    return f"{p:g}"


@dataclasses.dataclass
class Report:
    """Results of one grading run: any number of submissions and exercises."""

    exercises: list = dataclasses.field(default_factory=list)
    device: str = ""

    @property
    def points(self) -> float:
        return sum(e.points for e in self.exercises)

    @property
    def max_points(self) -> float:
        return sum(e.counted_max_points for e in self.exercises)

    @property
    def needs_gpu(self) -> bool:
        return bool(self.exercises) and all(e.status == Status.NEEDS_GPU for e in self.exercises)

    @property
    def exit_code(self) -> int:
        return EXIT_NEEDS_GPU if any(e.status == Status.NEEDS_GPU for e in self.exercises) else EXIT_OK

    def by_submission(self) -> dict:
        out = {}
        for e in self.exercises:
            out.setdefault(e.submission, []).append(e)
        return out

    def to_json(self, indent: int = 2) -> str:
        subs = {k: {"points": sum(e.points for e in v), "max_points": sum(e.counted_max_points for e in v)}
                for k, v in self.by_submission().items()}
        return json.dumps({"device": self.device, "points": self.points, "max_points": self.max_points,
                           "submissions": subs, "exercises": [e.to_dict() for e in self.exercises]},
                          indent=indent, default=str)

    @classmethod
    def from_json(cls, text: str) -> "Report":
        d = json.loads(text)
        return cls([ExerciseReport.from_dict(e) for e in d["exercises"]], d.get("device", ""))

    def table(self, width: int = 60) -> str:
        """One line per submission and exercise; the reason's first line, cut to ``width``."""
        rows = [("submission", "exercise", "status", "points", "reason")]
        for e in self.exercises:
            first = (e.reason.splitlines() or [""])[0]
            if len(first) > width:
                first = first[:width - 3] + "..."
            rows.append((e.submission or "-", e.exercise, e.status,
                         f"{_fmt_pts(e.points)}/{_fmt_pts(e.max_points)}", first))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = []
        for i, r in enumerate(rows):
            lines.append("  ".join(r[j].ljust(widths[j]) for j in range(4)) + "  " + r[4])
            if i == 0:
                lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
        lines.append(f"total {_fmt_pts(self.points)} / {_fmt_pts(self.max_points)} points"
                     + (f" on {self.device}" if self.device else ""))
        return "\n".join(lines)
