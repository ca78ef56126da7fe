"""`interleaved(..., around_pass=...)`: the context manager (the grader's GPU lock) is held around each
round-robin pass (a sample of each running callable, each followed by its on_sample) and around nothing
else, and only the time inside the holds counts against the time budget; driven by a fake backend that
logs every call, so no GPU is needed."""
import contextlib
import time

import pytest

from course._timing import interleaved

# "a" is quiet (stops on low noise at min_samples); "b" is noisy (runs to max_samples)
TIMES = {"a": [1.0], "b": [1.0, 2.0, 4.0]}
MIN, MAX = 4, 9
NOISY = {"a": [1.0, 2.0, 4.0], "b": [4.0, 1.0, 2.0]}  # never quiet enough to stop early


class LoggingBackend:
    """Logs flush/start/stop/sync into a shared log; plays back sample times per callable. Its clock is
    virtual: each sample takes ``sample_s``; `sleep` (a lock wait) moves it on too."""

    def __init__(self, log, sample_s=0.001, times=None):
        self.log, self.t, self.last, self.sample_s = log, 0.0, None, sample_s
        self.times = times or TIMES
        self.played = {k: 0 for k in self.times}

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
        self.t += self.sample_s
        seq = self.times[self.last]
        i = self.played[self.last]
        self.played[self.last] += 1
        return seq[i % len(seq)]

    def sleep(self, seconds):
        self.t += seconds

    def now(self):
        return self.t

    def sm_clock(self):
        return None


def _logged_lock(log, wait=lambda: None):
    """The around_pass factory: a context manager that logs entering and leaving (and with what), after
    ``wait()`` (the time another grading keeps the GPU)."""
    @contextlib.contextmanager
    def lock():
        wait()
        log.append("lock in")
        try:
            yield
        except BaseException as exc:
            log.append(f"lock out ({type(exc).__name__})")
            raise
        log.append("lock out")
    return lock


def _fns(be, log, fail_on=None):
    def fn(name):
        def call():
            log.append(f"fn {name}")
            be.last = name
            if fail_on == (name, be.played[name]):
                raise RuntimeError("launch failed")
        return call
    return {"a": fn("a"), "b": fn("b")}


def _run(around: bool, log: list, fail_on=None):
    """Time "a" and "b"; returns (results, on_sample calls). `fail_on` = (name, index): that sample raises."""
    seen = []
    be = LoggingBackend(log)

    def on_sample(name, i):
        log.append(f"on_sample {name} {i}")
        seen.append((name, i))

    res = interleaved(_fns(be, log, fail_on), warmup=2, min_samples=MIN, max_samples=MAX, rel_noise=0.02,
                      budget_s=2.0, on_sample=on_sample, around_pass=_logged_lock(log) if around else None,
                      _backend=be)
    return res, seen


def test_around_pass_wraps_each_pass_and_nothing_else():
    """Is the context manager entered once per round-robin pass, around the samples of every callable still
    running (flush, start, the call, stop, on_sample), with warm-up and the first sync outside it?"""
    log = []
    res, seen = _run(True, log)
    assert (res["a"].n, res["a"].stopped_by) == (MIN, "low_noise")
    assert (res["b"].n, res["b"].stopped_by) == (MAX, "max_samples")
    assert log.count("lock in") == log.count("lock out") == MAX  # one pass per sample of the longest runner
    sync = log.index("sync")
    assert log[:sync] == ["backend enter"] + ["fn a", "fn b"] * 2  # warm-up: no lock
    expected, i = [], 0
    while i < len(seen):  # the passes: both callables while "a" runs, then "b" alone
        names = "ab" if seen[i][1] < MIN else "b"
        expected.append("lock in")
        for name, index in seen[i:i + len(names)]:
            expected += ["flush", "start", f"fn {name}", "stop", f"on_sample {name} {index}"]
        expected.append("lock out")
        i += len(names)
    assert log[sync + 1:] == expected + ["backend exit"]
    assert seen[:2 * MIN] == [(n, i) for i in range(MIN) for n in "ab"]  # round robin while both run


def test_without_around_pass_the_calls_are_the_same():
    """Does passing around_pass change nothing but the lock entries themselves?"""
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
    assert tail == ["lock out", "lock in", "flush", "start", "fn a", "stop", "on_sample a 2",
                    "flush", "start", "fn b", "lock out (RuntimeError)", "backend exit"]


def test_waiting_for_the_lock_spends_no_budget():
    """With a lock that makes every pass wait 0.5 s (virtual clock) and 0.125 s of timing inside each hold,
    do noisy rounds run until the time inside the holds reaches the 1 s budget (8 passes), rather than stop
    at the minimum sample count because the waits used the budget up?"""
    log = []
    be = LoggingBackend(log, sample_s=0.0625, times=NOISY)  # two samples a pass: 0.125 s inside each hold
    res = interleaved(_fns(be, log), warmup=0, min_samples=3, max_samples=50, rel_noise=0.0, budget_s=1.0,
                      around_pass=_logged_lock(log, wait=lambda: be.sleep(0.5)), _backend=be)
    assert log.count("lock in") == 8
    assert [(r.n, r.stopped_by) for r in res.values()] == [(8, "budget")] * 2


def test_a_hook_that_really_sleeps_spends_no_budget():
    """With the real clock and a lock hook that sleeps 20 ms before each pass (samples take no time), do
    noisy rounds run to max_samples instead of stopping once 0.2 s of waiting has passed?"""
    log = []
    be = LoggingBackend(log, sample_s=0.0, times=NOISY)
    be.now = time.perf_counter
    res = interleaved(_fns(be, log), warmup=0, min_samples=2, max_samples=30, rel_noise=0.0, budget_s=0.2,
                      around_pass=_logged_lock(log, wait=lambda: time.sleep(0.02)), _backend=be)
    assert [(r.n, r.stopped_by) for r in res.values()] == [(30, "max_samples")] * 2


def test_long_lock_waits_stop_the_round_once_the_minimum_is_taken():
    """With a lock that keeps every pass waiting 3 s (virtual clock) and a 1 s budget, do noisy rounds stop
    once the waits pass ten budgets (the samples taken then decide), but never before min_samples, even when
    the very first waits already pass that?"""
    for min_samples, passes in ((3, 4), (6, 6)):
        log = []
        be = LoggingBackend(log, sample_s=0.001, times=NOISY)
        res = interleaved(_fns(be, log), warmup=0, min_samples=min_samples, max_samples=50, rel_noise=0.0,
                          budget_s=1.0, around_pass=_logged_lock(log, wait=lambda: be.sleep(3.0)), _backend=be)
        # 4 waits of 3 s = 12 s >= 10 s stops at 4 passes; with min_samples 6 the minimum comes first
        assert log.count("lock in") == passes, (min_samples, log.count("lock in"))
        assert [(r.n, r.stopped_by) for r in res.values()] == [(passes, "waited")] * 2
