"""`interleaved(..., around_sample=...)`: the context manager (the batch grader's GPU lock) is held around
each timed sample (flush, start event, the call, the wait for the stop event) and around nothing else;
driven by a fake backend that logs every call, so no GPU is needed."""
import contextlib

import pytest

from course._timing import interleaved

# "a" is quiet (stops on low noise at min_samples); "b" is noisy (runs to max_samples)
TIMES = {"a": [1.0], "b": [1.0, 2.0, 4.0]}
MIN, MAX = 4, 9


class LoggingBackend:
    """Logs flush/start/stop/sync into a shared log; plays back sample times per callable."""

    def __init__(self, log):
        self.log, self.t, self.last = log, 0.0, None
        self.played = {k: 0 for k in TIMES}

    def __enter__(self):
        self.log.append("backend enter")
        return self

    def __exit__(self, *exc):
        self.log.append("backend exit")

    def flush(self):
        self.log.append("flush")

    def sync(self):
        self.log.append("sync")

    def start(self):
        self.log.append("start")

    def stop(self):
        self.log.append("stop")
        seq = TIMES[self.last]
        i = self.played[self.last]
        self.played[self.last] += 1
        return seq[i % len(seq)]

    def now(self):
        self.t += 0.001  # far from the budget: only noise and max_samples stop
        return self.t

    def sm_clock(self):
        return None


def _logged_lock(log):
    """The around_sample factory: a context manager that logs entering and leaving (and with what)."""
    @contextlib.contextmanager
    def lock():
        log.append("lock in")
        try:
            yield
        except BaseException as exc:
            log.append(f"lock out ({type(exc).__name__})")
            raise
        log.append("lock out")
    return lock


def _run(around: bool, log: list, fail_on=None):
    """Time "a" and "b"; returns (results, on_sample calls). `fail_on` = (name, index): that sample raises."""
    seen = []
    be = LoggingBackend(log)

    def fn(name):
        def call():
            log.append(f"fn {name}")
            be.last = name
            if fail_on == (name, be.played[name]):
                raise RuntimeError("launch failed")
        return call

    def on_sample(name, i):
        log.append(f"on_sample {name} {i}")
        seen.append((name, i))

    res = interleaved({"a": fn("a"), "b": fn("b")}, warmup=2, min_samples=MIN, max_samples=MAX,
                      rel_noise=0.02, budget_s=2.0, on_sample=on_sample,
                      around_sample=_logged_lock(log) if around else None, _backend=be)
    return res, seen


def test_around_sample_wraps_each_timed_sample_and_nothing_else():
    """Is the context manager entered once per sample, around exactly flush, start, the call and stop, with
    warm-up, sync and on_sample outside it?"""
    log = []
    res, seen = _run(True, log)
    assert (res["a"].n, res["a"].stopped_by) == (MIN, "low_noise")
    assert (res["b"].n, res["b"].stopped_by) == (MAX, "max_samples")
    assert log.count("lock in") == log.count("lock out") == res["a"].n + res["b"].n == len(seen)
    sync = log.index("sync")
    assert log[:sync] == ["backend enter"] + ["fn a", "fn b"] * 2  # warm-up: no lock
    expected = []
    for name, i in seen:
        expected += ["lock in", "flush", "start", f"fn {name}", "stop", "lock out", f"on_sample {name} {i}"]
    assert log[sync + 1:] == expected + ["backend exit"]
    assert seen[:2 * MIN] == [(n, i) for i in range(MIN) for n in "ab"]  # round robin while both run


def test_without_around_sample_the_calls_are_the_same():
    """Does passing around_sample change nothing but the lock entries themselves?"""
    with_lock, without = [], []
    _, seen_with = _run(True, with_lock)
    _, seen_without = _run(False, without)
    assert "lock in" not in without
    assert [e for e in with_lock if not e.startswith("lock")] == without
    assert seen_with == seen_without


def test_a_failing_call_leaves_the_context_manager():
    """When a timed call raises, is the context manager exited with that exception, and on_sample skipped?"""
    log = []
    with pytest.raises(RuntimeError, match="launch failed"):
        _run(True, log, fail_on=("b", 2))
    tail = log[log.index("on_sample b 1") + 1:]
    assert tail == ["lock in", "flush", "start", "fn a", "stop", "lock out", "on_sample a 2",
                    "lock in", "flush", "start", "fn b", "lock out (RuntimeError)", "backend exit"]
