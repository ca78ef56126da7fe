"""Student text (kernel source, printf output, compile logs, file names) in what the grader prints: no
escape sequence or control character of theirs may reach the instructor's terminal or a feedback page."""
import json
import random
import re
import time

import pytest

from autograder.report import ExerciseReport, Report, SizeResult, Status, printable

# what a terminal acts on instead of showing: C0 but newline and tab, DEL, C1, bidi overrides
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

TRICKS = {
    "clear screen": ("before\x1b[2Jafter", "beforeafter"),
    "window title (OSC, BEL)": ("a\x1b]0;pwned\x07b", "ab"),
    "hyperlink (OSC, ST)": ("\x1b]8;;http://evil\x1b\\click\x1b]8;;\x1b\\", "click"),
    "8-bit CSI": ("x\x9b2Jy", "xy"),
    "8-bit OSC": ("x\x9d0;pwned\x9cy", "xy"),
    "colour": ("\x1b[1;31mred\x1b[0m", "red"),
    "carriage return overwrite": ("0/100 points\r100/100 points", "0/100 points100/100 points"),
    "NUL": ("a\x00b", "ab"),
    "backspaces": ("100\x08\x08\x080", "1000"),
    "charset switch": ("\x1b(0lqk\x1b(B", "lqk"),
    "unterminated OSC": ("a\x1b]0;title", "a0;title"),
    "bidi override": ("alice\u202egpj.exe", "alicegpj.exe"),
    "newline and tab stay": ("line 1\n\tline 2", "line 1\n\tline 2"),
}


@pytest.mark.parametrize("name", sorted(TRICKS))
def test_printable_removes_what_drives_a_terminal(name):
    """Does printable drop escape sequences and control characters, and keep newlines, tabs and the text?"""
    text, shown = TRICKS[name]
    assert printable(text) == shown


def test_printable_one_line_cannot_fake_rows():
    """Does printable(..., one_line=True) show newlines and tabs as \\n and \\t, so a name stays one line?"""
    assert printable("alice\nbob  saxpy  passed\t10/10", one_line=True) == "alice\\nbob  saxpy  passed\\t10/10"


def test_printable_leaves_nothing_unsafe_in_random_text():
    """Whatever mix of escapes, control characters and text comes in, is the result free of them?"""
    rng = random.Random(1)
    alphabet = ["\x1b", "[", "]", "\\", "\x07", "\x9b", "\x9c", "\x9d", "\x90", "P", "0", ";", "2J", "m", "\r",
                "\n", "\t", "\x00", "\x7f", "\u202e", "a", "é", "μs", " "]
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(40)))
        out = printable(text)
        assert not UNSAFE.search(out), (text, out)
        assert out.count("\n") == text.count("\n") and out.count("\t") == text.count("\t")


def test_printable_is_fast_on_hostile_megabytes():
    """Do megabytes of unterminated escape strings take linear time, not a rescan per introducer?"""
    text = "\x1b]" * 500_000 + "\x9d" * 500_000 + "x" * 1_000_000
    t0 = time.monotonic()
    out = printable(text)
    assert time.monotonic() - t0 < 5
    assert not UNSAFE.search(out)


def _hostile_report():
    payload = "\x1b[2J\x1b]0;pwned\x07\x9b2J\x00"
    e = ExerciseReport(chapter="01_first_kernel", exercise="saxpy", status=Status.FAILED, points=0.0,
                       max_points=10.0, submission=f"mallory{payload}\nalice/01_first_kernel  saxpy  passed",
                       reason=f"wrong at n=1000: y[3] = 7{payload}\r10/10 points",
                       sizes=[SizeResult({"n": 1000}, Status.FAILED, f"off{payload}")],
                       compile_log=f"warning{payload}", printf=f"hello{payload}\rgoodbye\n",
                       notes=[f"2 cells are tagged kernel:saxpy{payload}"])
    return Report([e], device=f"Fake GPU{payload}", ignored=[f"x{payload}.ipynb: cannot tell its chapter"])


def test_table_shows_no_student_escape_and_no_fake_row():
    """Does the table keep student text on its row, free of escapes, for names, reasons and ignored files?"""
    text = _hostile_report().table()
    assert not UNSAFE.search(text.replace("\n", "").replace("\t", "")) and "\t" not in text
    lines = text.split("\n")
    assert len(lines) == 6, text  # header, rule, one row, total, "not graded", one ignored file
    assert lines[2].startswith("mallory\\nalice/01_first_kernel  saxpy  passed  saxpy")
    assert "pwned" not in text and "7" in lines[2]
    assert lines[4] == "not graded (1 file):" and lines[5] == "  x.ipynb: cannot tell its chapter"


def test_feedback_shows_no_student_escape():
    """Does the feedback a student or an instructor reads carry the kernel's printf and the reason without
    any escape, carriage return or NUL, keeping the words?"""
    text = _hostile_report().exercises[0].feedback()
    assert not UNSAFE.search(text), repr(text)
    assert "hellogoodbye" in text and "7" in text and "Note: 2 cells are tagged kernel:saxpy" in text


def test_json_is_faithful_and_inert_on_a_terminal():
    """Does the JSON report keep the student's text exactly (it round-trips), while its text holds no raw
    ESC, C1 or other control character (all written as \\u escapes)?"""
    report = _hostile_report()
    text = report.to_json()
    assert not UNSAFE.search(text.replace("\n", ""))
    back = Report.from_json(text)
    assert back == report and back.exercises[0].printf == report.exercises[0].printf
    assert json.loads(text)["ignored"] == report.ignored
