"""The in-child checking protocol (guards, poison, input checks, repeat runs, timed-run checks),
run on the CPU: NumPy stands in for CuPy and Python functions stand in for kernels.
"""
import time
from types import SimpleNamespace

import numpy as np
import pytest

import autograder.harness as H
from autograder import Exercise, In, Out, Points, Scalar, get_exercise

L2 = 1 << 20


class NumpyBackend:
    """The harness's device interface on the host; timing samples may be scripted."""

    xp = np

    def __init__(self, times=None, noisy_rounds=0):
        self.times = times  # {"student": ms, "reference": ms, "copy": ms} or None for real clocks
        self.noisy_rounds = noisy_rounds  # this many first rounds have +-30% noise (forces re-measuring)
        self.rounds = 0

    def sync(self):
        pass

    def host(self, a):
        return np.array(a, copy=True)

    def time_ms(self, fn):
        t = time.perf_counter()
        fn()
        return (time.perf_counter() - t) * 1e3

    def interleaved(self, fns, *, min_samples=10, on_sample=None, **kw):
        samples = {k: [] for k in fns}
        spread = 0.3 if self.rounds < self.noisy_rounds else 0.001
        self.rounds += 1
        for i in range(min_samples):
            for name, f in fns.items():
                ms = self.time_ms(f)
                samples[name].append(self.times[name] * (1 + spread * ((i % 3) - 1)) if self.times else ms)
                if on_sample:
                    on_sample(name, i)
        return {k: SimpleNamespace(samples_ms=v) for k, v in samples.items()}

    def copy_fn(self, dst, src):
        return lambda: np.copyto(dst, src)

    def free_cached(self):
        pass


@pytest.fixture
def backend(monkeypatch):
    be = NumpyBackend()
    monkeypatch.setattr(H, "BACKEND", be)
    return be


def make_ctx(ex, student, reference, cfg=None, arms=None):
    arms = [] if arms is None else arms
    ctx = H.Context(ex, "", cfg or dict(ex.launch_defaults), 1234, {"l2_bytes": L2}, lambda t, w: arms.append((t, w)))
    ctx.student, ctx.reference = student, reference
    return ctx


# -- saxpy kernels in Python -------------------------------------------------------------------

def saxpy_ok(grid, block, n, a, x, y, shared_mem=0):
    y[:n] = np.float32(a) * x[:n] + y[:n]


def saxpy_off_by_one(grid, block, n, a, x, y, shared_mem=0):
    saxpy_ok(grid, block, n, a, x, y)
    np.lib.stride_tricks.as_strided(y, shape=(n + 1,))[n] = 0.0  # writes y[n]: into the guard zone


def saxpy_negative_index(grid, block, n, a, x, y, shared_mem=0):
    saxpy_ok(grid, block, n, a, x, y)
    np.lib.stride_tricks.as_strided(y, shape=(2,), strides=(-4,))[1] = 1.0  # y[-1]


def saxpy_half(grid, block, n, a, x, y, shared_mem=0):
    h = np.float16
    y[:n] = (h(a) * x[:n].astype(h) + y[:n].astype(h)).astype(np.float32)


def saxpy_changes_input(grid, block, n, a, x, y, shared_mem=0):
    saxpy_ok(grid, block, n, a, x, y)
    x[0] = 0.0


def saxpy_wrong_for_large_n(grid, block, n, a, x, y, shared_mem=0):
    saxpy_ok(grid, block, n, a, x, y)
    if n > 100_000:
        y[n // 2] += 1.0


def counter_kernel(limit):
    calls = [0]

    def k(grid, block, n, a, x, y, shared_mem=0):
        calls[0] += 1
        if calls[0] > limit:
            y[:n] = 0.0  # "fast": skips the work once it believes it is being timed
        else:
            saxpy_ok(grid, block, n, a, x, y)
    return k


def alternating_kernel():
    calls = [0]

    def k(grid, block, n, a, x, y, shared_mem=0):
        calls[0] += 1
        saxpy_ok(grid, block, n, a, x, y)
        if calls[0] % 2 == 0 and n > 2:
            y[n - 1] = y[n - 1] + np.float32(1e-3)  # a "race": the second run differs
    return k


SAXPY = get_exercise("01_first_kernel", "saxpy")


def run_all_sizes(ex, student, reference=saxpy_ok):
    ctx = make_ctx(ex, student, reference)
    return [H.correctness_step(ctx, i) for i in range(len(ex.sizes))]


def test_reference_passes_every_size(backend):
    """Does a correct kernel pass at all sizes, with the L2 case resolved from the device's L2?"""
    res = run_all_sizes(SAXPY, saxpy_ok)
    assert [r["status"] for r in res] == ["passed"] * 5
    assert res[-1]["sizes"]["n"] * 8 >= 2 * L2


def test_off_by_one_write_is_caught_by_the_guard_zone(backend):
    """Is a write of y[n] reported as out of bounds, naming the element?"""
    r = run_all_sizes(SAXPY, saxpy_off_by_one)[2]  # n = 33
    assert r["status"] == "failed"
    assert "out of bounds" in r["message"] and "y[33]" in r["message"] and "past the end" in r["message"]


def test_write_before_start_is_caught(backend):
    r = run_all_sizes(SAXPY, saxpy_negative_index)[0]
    assert r["status"] == "failed" and "y[-1]" in r["message"] and "before the start" in r["message"]


def test_half_precision_fails_tolerance(backend):
    """Is a kernel computing in half precision rejected by saxpy's rtol?"""
    r = run_all_sizes(SAXPY, saxpy_half)[3]
    assert r["status"] == "failed" and "values wrong" in r["message"]


def test_changed_input_is_reported(backend):
    r = run_all_sizes(SAXPY, saxpy_changes_input)[1]
    assert r["status"] == "failed" and "changed its input x" in r["message"]


def test_wrong_for_one_size_only(backend):
    res = run_all_sizes(SAXPY, saxpy_wrong_for_large_n)
    assert [r["status"] for r in res] == ["passed"] * 3 + ["failed"] * 2
    assert "at [500001]" in res[3]["message"]


def test_second_run_differs_is_a_race(backend):
    """Are outputs that differ between two runs on the same inputs rejected as a race?"""
    r = run_all_sizes(SAXPY, alternating_kernel())[2]
    assert r["status"] == "failed" and "differ between two runs" in r["message"]


def test_timeout_is_armed_from_reference_time(backend):
    arms = []
    ctx = make_ctx(SAXPY, saxpy_ok, saxpy_ok, arms=arms)
    H.correctness_step(ctx, 0)
    kernel_arms = [a for a in arms if a[1]]
    assert kernel_arms and all(t >= 10.0 for t, _ in kernel_arms)  # max(10 s, 50 x reference)
    assert "n=1" in kernel_arms[0][1]


def test_launch_errors_are_classified(backend):
    import course

    def refused(*a, **k):
        raise course.LaunchError("saxpy: a block of 2048 threads is more than this kernel can run")

    def illegal(*a, **k):
        raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")

    r = H.correctness_step(make_ctx(SAXPY, refused, saxpy_ok), 0)
    assert r["status"] == "failed" and "could not launch" in r["message"] and not r["fatal"]
    r = H.correctness_step(make_ctx(SAXPY, illegal, saxpy_ok), 0)
    assert r["status"] == "crashed" and r["fatal"] and "illegal memory access" in r["message"]


# -- a float Out exercise: poison detection ------------------------------------------------------

def _scale_launch(sizes, cfg):
    return (sizes["n"] + 255) // 256, 256, 0


SCALE = Exercise(name="scale", kernel="scale", source_file="-", chapter="test",
                 params=[Scalar("n", "int", "n"), In("x", "float32", "n"), Out("y", "float32", "n")],
                 sizes=[{"n": 1}, {"n": 37}], launch=_scale_launch, launch_defaults={},
                 reference=lambda v: {"y": 2 * v["x"]}, points=Points(1, 0))


def scale_ok(grid, block, n, x, y, shared_mem=0):
    y[:n] = 2 * x[:n]


def scale_half_written(grid, block, n, x, y, shared_mem=0):
    y[: n // 2] = 2 * x[: n // 2]


def scale_reads_output(grid, block, n, x, y, shared_mem=0):
    y[:n] += 2 * x[:n]  # y is output-only: starts as NaN


def test_unwritten_outputs_are_named(backend):
    r = H.correctness_step(make_ctx(SCALE, scale_half_written, scale_ok), 1)
    assert r["status"] == "failed" and "never written" in r["message"] and "first y[18]" in r["message"]


def test_reading_poisoned_output_gives_nan_explained(backend):
    r = H.correctness_step(make_ctx(SCALE, scale_reads_output, scale_ok), 1)
    assert r["status"] == "failed"
    # x86 keeps the poison's NaN payload through `+=`, a GPU returns a canonical NaN: either way it says so
    assert "output-only" in r["message"] and "NaN" in r["message"]


def test_poison_bits_differ_between_runs():
    for dt in ("float32", "float64", "float16", "uint8", "int32"):
        a, b = H.poison_bits(dt, 0), H.poison_bits(dt, 1)
        assert a != b
    f = np.array([H.poison_bits("float32", 0)], dtype=np.uint32).view(np.float32)
    assert np.isnan(f).all()


# -- timing ----------------------------------------------------------------------------------

def test_timing_reports_ratio_and_floor(monkeypatch):
    be = NumpyBackend(times={"student": 2.0, "reference": 1.0, "copy": 0.9})
    monkeypatch.setattr(H, "BACKEND", be)
    r = H.timing_step(make_ctx(SAXPY, saxpy_ok, saxpy_ok))
    assert r["status"] == "ok", r
    s = r["speed"]
    assert s["ratio"] == pytest.approx(0.5, rel=0.01) and s["rounds"] == 1
    assert s["floor_ms"] == pytest.approx(0.9, rel=0.01) and not s["impossible"]


def test_timing_flags_impossible_speed(monkeypatch):
    be = NumpyBackend(times={"student": 0.1, "reference": 1.0, "copy": 0.9})
    monkeypatch.setattr(H, "BACKEND", be)
    r = H.timing_step(make_ctx(SAXPY, saxpy_ok, saxpy_ok))
    assert r["speed"]["impossible"]


def test_kernel_changing_behaviour_during_timing_is_caught(backend):
    """Is a kernel that is right for its first launches, then skips work, caught during timing?"""
    k = counter_kernel(limit=8)
    r = H.timing_step(make_ctx(SAXPY, k, saxpy_ok))
    assert r["status"] == "failed" and "while being timed" in r["message"]


def test_inout_buffers_are_restored_between_timed_runs(backend):
    """Would in-place y = a*x + y accumulate across timed runs? It must not: each run sees fresh y."""
    r = H.timing_step(make_ctx(SAXPY, saxpy_ok, saxpy_ok))
    assert r["status"] == "ok"


def test_timed_runs_rotate_input_sets(backend, monkeypatch):
    seen = []

    def spy(grid, block, n, a, x, y, shared_mem=0):
        seen.append(id(x))
        saxpy_ok(grid, block, n, a, x, y)
    H.timing_step(make_ctx(SAXPY, spy, saxpy_ok))
    assert len(set(seen)) == H.TIMING_SETS


def test_remeasured_rounds_still_check_the_right_input_set(monkeypatch):
    """In a second timing round the sample index restarts but the input rotation does not: a correct
    kernel must still pass (each timed output is compared with the expected output of its own input set)."""
    be = NumpyBackend(times={"student": 1.0 / 0.81, "reference": 1.0, "copy": 0.5}, noisy_rounds=2)
    monkeypatch.setattr(H, "BACKEND", be)
    r = H.timing_step(make_ctx(SAXPY, saxpy_ok, saxpy_ok))
    assert r["status"] == "ok", r
    assert r["speed"]["rounds"] >= 2  # it did re-measure


# -- a 2D exercise with exact integer output -------------------------------------------------------

GRAY = get_exercise("01_first_kernel", "rgb_to_gray")


def gray_ok(grid, block, rgb, gray, width, height, shared_mem=0):
    c = rgb.astype(np.uint32)
    gray[...] = ((77 * c[..., 0] + 150 * c[..., 1] + 29 * c[..., 2] + 128) >> 8).astype(np.uint8)


def gray_float(grid, block, rgb, gray, width, height, shared_mem=0):
    c = rgb.astype(np.float32)
    gray[...] = (0.299 * c[..., 0] + 0.587 * c[..., 1] + 0.114 * c[..., 2]).astype(np.uint8)


def gray_whole_blocks(grid, block, rgb, gray, width, height, shared_mem=0):
    gray_ok(grid, block, rgb, gray, width, height)
    gx, gy = grid
    bx, by = block
    n = gx * bx * gy * by  # no bounds test: every thread of every block writes
    flat = np.lib.stride_tricks.as_strided(gray.reshape(-1), shape=(min(n, gray.size + 4096),))
    flat[gray.size:] = 0


def test_gray_reference_exact_at_all_sizes(backend):
    ctx = make_ctx(GRAY, gray_ok, gray_ok)
    assert [H.correctness_step(ctx, i)["status"] for i in range(4)] == ["passed"] * 4


def test_gray_float_formula_is_not_exact(backend):
    r = H.correctness_step(make_ctx(GRAY, gray_float, gray_ok), 2)
    assert r["status"] == "failed" and "values wrong" in r["message"] and "[" in r["message"]


def test_gray_missing_bounds_check_writes_past_the_end(backend):
    r = H.correctness_step(make_ctx(GRAY, gray_whole_blocks, gray_ok), 1)  # 37 x 1001
    assert r["status"] == "failed" and "past the end of gray" in r["message"]
