"""The developers' trace (autograder/trace.py): off unless AUTOGRADER_TRACE names a file; then GPU locks
append one JSON line per hold, and `summarise` totals lock holds by kind and children by phase and step."""
from __future__ import annotations

import json
import multiprocessing
import os
import time

import pytest

from autograder.gpulock import GpuLock
from autograder.trace import ENV, summarise, tracer

FORK = multiprocessing.get_context("fork")

pytestmark = pytest.mark.timeout(20)


def _lines(path) -> list:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def _reader(folder, entered, hold_s):
    with GpuLock(folder).shared():
        entered.set()
        time.sleep(hold_s)


@pytest.fixture
def folder(tmp_path):
    f = tmp_path / "lock"
    f.mkdir()
    return str(f)


def test_unset_or_empty_means_no_tracer_and_no_file(tmp_path, folder, monkeypatch):
    """With AUTOGRADER_TRACE unset or empty, is the tracer falsy, and does taking a GPU lock write no file?"""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for value in (None, ""):
        if value is None:
            monkeypatch.delenv(ENV, raising=False)
        else:
            monkeypatch.setenv(ENV, value)
        t = tracer()
        assert not t
        t.event("lock", kind="shared", wait=0.0, hold=0.0)
        lock = GpuLock(folder)
        assert not lock.trace
        before = sorted(os.listdir(folder))
        with lock.shared():
            pass
        with lock.exclusive():
            pass
        assert sorted(os.listdir(folder)) == before
    assert list(cwd.iterdir()) == []


def test_tracer_is_one_per_file_and_follows_the_variable(tmp_path, monkeypatch):
    """Does tracer() give the same tracer for the same file, a new one for a new file, and a falsy one once
    the variable is unset; and does each event land, as one JSON line, in its own file?"""
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    monkeypatch.setenv(ENV, str(a))
    ta = tracer()
    assert ta and tracer() is ta
    monkeypatch.setenv(ENV, str(b))
    tb = tracer()
    assert tb and tb is not ta
    ta.event("one", n=1)
    tb.event("two", n=2)
    monkeypatch.delenv(ENV)
    assert not tracer()
    [ea], [eb] = _lines(a), _lines(b)
    assert (ea["ev"], ea["n"], eb["ev"], eb["n"]) == ("one", 1, "two", 2)
    assert ea["pid"] == os.getpid() and abs(ea["t"] - time.time()) < 60


def test_lock_made_before_the_variable_is_set_does_not_trace(tmp_path, folder, monkeypatch):
    """A GpuLock opens its tracer when made: does one made before AUTOGRADER_TRACE was set write nothing?"""
    monkeypatch.delenv(ENV, raising=False)
    lock = GpuLock(folder)
    trace = tmp_path / "late.jsonl"
    monkeypatch.setenv(ENV, str(trace))
    with lock.exclusive():
        pass
    assert not trace.exists()


def test_lock_events_record_wait_and_hold_and_summarise_totals_them(tmp_path, folder, monkeypatch):
    """Does every lock acquisition, in this process and in a child, append a "lock" line with its wait and
    hold, and does `summarise` total count, wait and hold per kind?"""
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(ENV, str(trace))
    entered = FORK.Event()
    child = FORK.Process(target=_reader, args=(folder, entered, 0.3), daemon=True)
    child.start()
    try:
        assert entered.wait(10)
        lock = GpuLock(folder)  # made after the variable was set
        with lock.exclusive():  # waits for the child's shared hold to end
            time.sleep(0.1)
        for _ in range(2):
            with lock.shared():
                time.sleep(0.05)
        child.join(10)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
    events = _lines(trace)
    assert all(e["ev"] == "lock" for e in events)
    mine = [e for e in events if e["pid"] == os.getpid()]
    theirs = [e for e in events if e["pid"] == child.pid]
    assert [e["kind"] for e in mine] == ["exclusive", "shared", "shared"]
    assert [e["kind"] for e in theirs] == ["shared"]
    excl = mine[0]
    assert excl["wait"] >= 0.15, "the exclusive wait behind the child's 0.3 s shared hold was not recorded"
    assert excl["hold"] >= 0.09
    assert all(e["hold"] >= 0.04 and e["wait"] >= 0 for e in mine[1:])
    assert theirs[0]["hold"] >= 0.25

    s = summarise(trace)
    assert s["lock_count"] == {"exclusive": 1, "shared": 3}
    for kind in ("exclusive", "shared"):
        ours = [e for e in events if e["kind"] == kind]
        assert s["lock_hold_s"][kind] == pytest.approx(sum(e["hold"] for e in ours))
        assert s["lock_wait_s"][kind] == pytest.approx(sum(e["wait"] for e in ours))
    assert s["lock_hold_s"]["shared"] >= 0.25 + 2 * 0.04
    assert s["children"] == {} and s["steps"] == {}


CHILD_LINES = [
    {"t": 100.0, "pid": 11, "ev": "child", "phase": "run", "exercise": "saxpy", "end": "done", "seconds": 2.0,
     "steps": {"startup": 0.5, "correctness": 1.25}},
    {"t": 100.5, "pid": 12, "ev": "lock", "kind": "shared", "wait": 0.25, "hold": 1.0},
    {"t": 101.0, "pid": 13, "ev": "child", "phase": "run", "exercise": "gemm", "end": "killed", "seconds": 3.0,
     "steps": {"startup": 0.25, "speed": 2.5}},
    {"t": 102.0, "pid": 14, "ev": "child", "phase": "compile", "exercise": "gemm", "end": "done", "seconds": 1.5,
     "steps": {}},
    {"t": 102.5, "pid": 15, "ev": "something-new", "detail": 1},
    {"t": 103.0, "pid": 16, "ev": "child", "phase": "compile", "exercise": "saxpy", "end": "died", "seconds": 0.5},
]


def _write(path, lines) -> None:
    path.write_text("".join(lines), encoding="utf-8")


def test_summarise_totals_children_by_phase_and_step(tmp_path):
    """Are child events counted and timed per phase, their steps per step name, and the span first to last?"""
    trace = tmp_path / "t.jsonl"
    _write(trace, [json.dumps(e) + "\n" for e in CHILD_LINES])
    s = summarise(trace)
    assert s["children"] == {"run": {"count": 2, "seconds": pytest.approx(5.0)},
                             "compile": {"count": 2, "seconds": pytest.approx(2.0)}}
    assert s["steps"] == {"startup": {"count": 2, "seconds": pytest.approx(0.75)},
                          "correctness": {"count": 1, "seconds": pytest.approx(1.25)},
                          "speed": {"count": 1, "seconds": pytest.approx(2.5)}}
    assert s["lock_count"] == {"shared": 1}
    assert s["lock_wait_s"] == {"shared": pytest.approx(0.25)}
    assert s["lock_hold_s"] == {"shared": pytest.approx(1.0)}
    assert s["span_s"] == pytest.approx(3.0)


def test_summarise_skips_garbage_lines(tmp_path):
    """Do blank, non-JSON and torn lines (a last line cut short included) leave the totals unchanged?"""
    good = [json.dumps(e) + "\n" for e in CHILD_LINES]
    torn = json.dumps(CHILD_LINES[0])[:25]
    noisy = ["\n", "not json at all\n", good[0], torn + "\n", *good[1:4], "{\"t\": 1\n", *good[4:], torn]
    clean, dirty = tmp_path / "clean.jsonl", tmp_path / "dirty.jsonl"
    _write(clean, good)
    _write(dirty, noisy)
    assert summarise(dirty) == summarise(clean)
    assert summarise(dirty)["children"]["run"]["count"] == 2


def test_summarise_of_an_empty_trace(tmp_path):
    """Does an empty trace give empty totals and a zero span?"""
    trace = tmp_path / "empty.jsonl"
    trace.write_text("", encoding="utf-8")
    assert summarise(trace) == {"children": {}, "steps": {}, "lock_wait_s": {}, "lock_hold_s": {},
                                "lock_count": {}, "span_s": 0.0}


def test_summarise_skips_json_that_is_not_an_event(tmp_path):
    """Do lines that parse as JSON but are no event (a number, null, a list, an object without "t") leave
    the totals unchanged?"""
    good = [json.dumps(e) + "\n" for e in CHILD_LINES]
    clean, dirty = tmp_path / "clean.jsonl", tmp_path / "dirty.jsonl"
    _write(clean, good)
    _write(dirty, ["42\n", "null\n", *good[:3], "[1, 2]\n", "{\"ev\": \"other\"}\n", *good[3:]])
    assert summarise(dirty) == summarise(clean)
