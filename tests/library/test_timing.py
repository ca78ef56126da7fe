"""The timing logic, driven by a fake clock so every run gives the same answer."""
import pytest

from course._timing import BenchResult, benchmark, interleaved, quartiles, should_stop


class FakeBackend:
    """Plays back scripted sample times; records the order of calls."""

    def __init__(self, times, step_s=0.01):
        self.times = {k: list(v) for k, v in times.items()} if isinstance(times, dict) else {None: list(times)}
        self.calls = []
        self.t = 0.0
        self.step_s = step_s
        self.current = None

    def __enter__(self):
        self.calls.append("enter")
        return self

    def __exit__(self, *a):
        self.calls.append("exit")

    def flush(self):
        self.calls.append("flush")

    def sync(self):
        self.calls.append("sync")

    def start(self):
        self.calls.append("start")

    def stop(self):
        self.t += self.step_s
        key = self.current if self.current in self.times else None
        seq = self.times[key]
        return seq.pop(0) if len(seq) > 1 else seq[0]

    def now(self):
        return self.t

    def sm_clock(self):
        return (1980, 1980)


def test_quartiles():
    """Are the quartiles those of linear interpolation, and is one sample its own median?"""
    assert quartiles([1, 2, 3, 4, 5]) == (2, 3, 4)
    assert quartiles([7.0]) == (7.0, 7.0, 7.0)
    with pytest.raises(ValueError):
        quartiles([])


def test_stop_needs_min_samples_even_when_quiet():
    """Does the rule keep sampling below min_samples even with zero noise?"""
    kw = dict(min_samples=10, max_samples=100, rel_noise=0.02, budget_s=1.0)
    assert should_stop([1.0] * 9, 0.0, **kw) == ""
    assert should_stop([1.0] * 10, 0.0, **kw) == "low_noise"


def test_stop_on_budget_and_max():
    """Does a noisy series stop at the time budget, and any series at max_samples?"""
    noisy = [1.0, 2.0] * 10
    kw = dict(min_samples=10, max_samples=100, rel_noise=0.02)
    assert should_stop(noisy, 0.5, budget_s=1.0, **kw) == ""
    assert should_stop(noisy, 1.5, budget_s=1.0, **kw) == "budget"
    assert should_stop(noisy * 5, 0.0, budget_s=99, **kw) == "max_samples"


def test_benchmark_warmup_flush_and_stats():
    """Are warm-up runs untimed, L2 flushed before every sample, and the median right?"""
    be = FakeBackend([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 5.0])
    runs = []
    r = benchmark(lambda: runs.append(1), warmup=3, _backend=be, name="k")
    assert r.n == 10 and r.stopped_by == "low_noise"
    assert len(runs) == 3 + 10
    assert be.calls.count("flush") == 10 and be.calls.count("start") == 10
    # every sample is preceded by its flush
    starts = [i for i, c in enumerate(be.calls) if c == "start"]
    assert all(be.calls[i - 1] == "flush" for i in starts)
    assert r.median_ms == 1.0 and r.sm_clock_mhz == 1980
    assert r.gbps(2e6) == pytest.approx(2.0)  # 2 MB in 1 ms = 2 GB/s
    assert r.tflops(3e9) == pytest.approx(3.0)


def test_benchmark_stops_on_budget_when_noisy():
    """Does a noisy kernel stop when the budget is spent rather than run to max_samples?"""
    be = FakeBackend([1.0, 3.0] * 200, step_s=0.1)
    r = benchmark(lambda: None, warmup=0, min_samples=10, max_samples=100, budget_s=2.0, _backend=be)
    assert r.stopped_by == "budget"
    assert 10 <= r.n <= 25


def test_interleaved_round_robin_and_on_sample():
    """Are the callables timed alternately, and does on_sample see every timed run?"""
    order, seen = [], []
    be = FakeBackend([2.0])
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    res = interleaved(fns, warmup=1, min_samples=3, max_samples=3, _backend=be,
                      on_sample=lambda n, i: seen.append((n, i)))
    assert order[:2] == ["a", "b"]  # warm-up
    assert order[2:] == ["a", "b"] * 3
    assert seen == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert set(res) == {"a", "b"} and res["a"].n == 3


def test_argument_errors_name_the_argument():
    """Do bad arguments raise errors that name them?"""
    with pytest.raises(ValueError, match="fns"):
        interleaved({}, _backend=FakeBackend([1.0]))
    with pytest.raises(TypeError, match="fns\\['x'\\]"):
        interleaved({"x": 3}, _backend=FakeBackend([1.0]))
    with pytest.raises(ValueError, match="min_samples"):
        benchmark(lambda: None, min_samples=5, max_samples=2, _backend=FakeBackend([1.0]))


def test_result_format():
    """Does the one-line summary carry time, bandwidth and clock?"""
    r = BenchResult("copy", [1.0, 1.0, 1.0], sm_clock_mhz=1755)
    s = r.format(nbytes=2e9)
    assert "copy" in s and "1.0000 ms" in s and "2000 GB/s" in s and "1755 MHz" in s
    assert r.to_dict()["samples_ms"] == [1.0, 1.0, 1.0]


@pytest.mark.gpu
def test_no_flush_sample_excludes_the_hosts_launch_overhead():
    """With the flush off, is the host's time to queue the work kept out of each sample (the spacer kernel
    keeps the GPU busy meanwhile), so 50 us of host work before an empty kernel's launch is not timed?"""
    import time
    import course
    k = course.compile('extern "C" __global__ void nothing() {}').kernel("nothing")

    def slow_host_then_launch():
        end = time.perf_counter() + 50e-6
        while time.perf_counter() < end:
            pass
        k(1, 1)
    r = course.benchmark(slow_host_then_launch, flush_l2=False, budget_s=0.5)
    assert r.median_ms < 0.03, r
