r"""Grading results as objects: points, a status, and a reason a student can act on.

Formatting (`table`, `feedback`, `to_json`) is kept apart from the data, which stays plain so it
crosses the pipe from a grading child and round-trips through JSON.

Much of the text is the student's (kernel source in reasons, printf output, compile logs, file names), so
it is made `printable` when it is formatted for a terminal or a feedback page: a kernel that prints
``\x1b[2J`` must not clear the instructor's screen, retitle the window or overwrite a row with ``\r``.
The data keeps the text as received, so a disputed grade can be checked against what was really printed.
"""
from __future__ import annotations

import dataclasses
import json
import re

__all__ = ["Status", "SizeResult", "SpeedResult", "PipelineResult", "ExerciseReport", "Report", "EXIT_OK",
           "EXIT_USAGE", "EXIT_NEEDS_GPU", "printable"]

EXIT_OK, EXIT_USAGE, EXIT_NEEDS_GPU = 0, 2, 3

# Strings (OSC: window titles, hyperlinks; DCS, SOS, PM, APC) are dropped with their payload, as a terminal
# would not show it. The payload excludes ESC and the 8-bit introducers, so an unterminated string stops at
# the next one instead of rescanning to the end (linear time on megabytes of printf output); it excludes
# newlines and tabs too, which no real string holds, so no line of text can be hidden inside one.
_ESCAPES = re.compile(
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x90\x98\x9c-\x9f\n\t]*(?:\x07|\x1b\\|\x9c)"
    r"|(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]"   # CSI: clear screen, cursor moves, colours
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]")                          # the other ESC sequences (charsets, reset)
# C0 but newline and tab, DEL, C1, and the bidi overrides that make a terminal show text out of order
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text, *, one_line: bool = False) -> str:
    r"""``text`` without terminal escape sequences and control characters, newline and tab excepted.

    A lone ``\r`` goes too, so a line cannot be overwritten by what follows it. With ``one_line`` (a table
    cell, a file name) newlines and tabs are shown as ``\n`` and ``\t``, so text cannot fake rows.
    """
    text = _CONTROLS.sub("", _ESCAPES.sub("", text if isinstance(text, str) else str(text)))
    if one_line:
        text = text.replace("\n", "\\n").replace("\t", "\\t")
    return text


class Status:
    """Exercise and per-size statuses (plain strings, so JSON stays readable)."""

    PASSED = "passed"            # correct, and fast enough (or no speed points)
    UNTIMED = "correct, not timed"  # correct; speed not graded in this run (--no-speed)
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

    CORRECT = (PASSED, UNTIMED, SLOW, FLAGGED)
    # when sizes disagree, the exercise shows the most severe
    SEVERITY = (ERROR, NEEDS_GPU, COMPILE_ERROR, TIMED_OUT, CRASHED, FAILED, SKIPPED, FLAGGED, SLOW, UNTIMED, PASSED,
                NOT_RUN)


@dataclasses.dataclass
class SizeResult:
    sizes: dict
    status: str
    message: str = ""
    ref_ms: float | None = None
    hidden: bool = False      # drawn for this grading from its secret seed, not listed in the spec


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
    floor_kind: str = ""      # what bounds the floor: "copy" bandwidth, or the peak of a precision ("fp32")
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
    # autograder.versions.spec_version of the spec graded with (a frozen chapter's snapshot version): a
    # result can be told apart from one made before a spec change; '' in reports made before specs had one
    spec_version: str = ""

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
            hidden = sum(1 for s in self.sizes if s.hidden)
            out.append(f"Correct at all {len(self.sizes)} test sizes"
                       + (f" ({hidden} of them drawn at random for this grading)." if hidden else "."))
        if self.speed is not None:
            s = self.speed
            out.append(f"Speed: yours {s.student_ms:.4f} ms, reference {s.reference_ms:.4f} ms -> "
                       f"{s.ratio:.2f}x the reference speed (needed {s.threshold:.2f}x; "
                       f"{s.rounds} measurement round{'s' * (s.rounds != 1)}).")
        if self.pipeline is not None:
            out.append(self.pipeline.summary())
        for note in self.notes:
            out.append(f"Note: {note}")
        # escapes go before wrapping, which would count their characters as width
        text = "\n".join(_wrap(line) for line in printable("\n".join(out)).split("\n"))
        if self.printf:  # the student's own output stays as printed, bar what would drive the terminal
            text += "\n\nYour kernel printed (last part):\n" + printable(self.printf)
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
    ignored: list = dataclasses.field(default_factory=list)  # "file: why it was not graded", one a line

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
        # The record stays faithful (not `printable`): a regrade must see what the kernel really printed.
        # ensure_ascii writes ESC, C1 and every other control character as a \uXXXX escape, so the
        # JSON text itself drives no terminal it is printed on (`grade --json -`).
        return json.dumps({"device": self.device, "points": self.points, "max_points": self.max_points,
                           "submissions": subs, "exercises": [e.to_dict() for e in self.exercises],
                           "ignored": list(self.ignored)},
                          indent=indent, default=str, ensure_ascii=True)

    @classmethod
    def from_json(cls, text: str) -> "Report":
        d = json.loads(text)
        return cls([ExerciseReport.from_dict(e) for e in d["exercises"]], d.get("device", ""),
                   list(d.get("ignored", [])))

    def table(self, width: int = 60) -> str:
        """One line per submission and exercise; the reason's first line, cut to ``width``; then the files
        that were not graded, and why."""
        rows = [("submission", "exercise", "status", "points", "reason")]
        for e in self.exercises:
            first = printable((printable(e.reason).splitlines() or [""])[0], one_line=True)
            if len(first) > width:
                first = first[:width - 3] + "..."
            rows.append((printable(e.submission or "-", one_line=True), printable(e.exercise, one_line=True),
                         printable(e.status, one_line=True), f"{_fmt_pts(e.points)}/{_fmt_pts(e.max_points)}",
                         first))
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = []
        for i, r in enumerate(rows):
            lines.append("  ".join(r[j].ljust(widths[j]) for j in range(4)) + "  " + r[4])
            if i == 0:
                lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 6)
        lines.append(f"total {_fmt_pts(self.points)} / {_fmt_pts(self.max_points)} points"
                     + (f" on {printable(self.device, one_line=True)}" if self.device else ""))
        if self.ignored:
            lines.append(f"not graded ({len(self.ignored)} file{'s' * (len(self.ignored) != 1)}):")
            lines += ["  " + printable(line, one_line=True) for line in self.ignored]
        return "\n".join(lines)
