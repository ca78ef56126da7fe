"""Chapter 01 (first kernel): launch arithmetic, index maps, errors, FMA and timing demonstrations.

Everything that draws or counts runs on the CPU; the functions that touch a GPU say so and raise
`course.NoGPUError` without one.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = [
    "WARP", "VEC_ADD_SRC", "WAVE_ADD_SRC", "launch_summary", "thread_map_1d", "plot_thread_map_1d",
    "plot_index_map_2d", "wave_boundaries", "plot_staircase", "fma_inputs", "fma_expected",
    "ptx_float_ops", "sticky_error_demo", "print_steps", "host_vs_events", "ramp_up", "plot_ramp_up",
    "wave_runner", "WAVE_SLICE", "plot_wave_sweep",
]

WARP = 32

VEC_ADD_SRC = r'''extern "C" __global__ void vec_add(const float* __restrict__ x,
                                   const float* __restrict__ y,
                                   float* __restrict__ z, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)               // the last block usually sticks out past n
        z[i] = x[i] + y[i];
}
'''
"""The course's reference vector add: one element per thread (the lesson's first kernel; benchmarked)."""

WAVE_ADD_SRC = r'''extern "C" __global__ void wave_add(const float* __restrict__ x,
                                    const float* __restrict__ y,
                                    float* __restrict__ z, int per_block, int rounds)
{
    // every block owns the same slice size, so a block's run time does not depend on the grid size
    const size_t base = (size_t)blockIdx.x * per_block;
    for (int i = threadIdx.x; i < per_block; i += blockDim.x) {
        float v = x[base + i] + y[base + i];
        // dependent FMAs keep the SM's pipelines busy: the SM, not DRAM, is the bottleneck
        for (int r = 0; r < rounds; ++r)
            v = fmaf(v, 0.999f, 0.001f);
        z[base + i] = v;
    }
}
'''
"""Vector add with a fixed slice per block and optional extra arithmetic, for the wave staircase."""


# --- launch arithmetic (CPU) ---------------------------------------------------------------------

def launch_summary(n: int, block: int) -> dict:
    """What a one-element-per-thread launch over ``n`` items with ``block`` threads per block costs.

    Parameters
    ----------
    n : int
        Number of items (threads needed).
    block : int
        Threads per block.

    Returns
    -------
    dict
        ``grid`` (ceil-div), ``threads`` launched, ``idle`` threads (failing the bounds check),
        ``warps`` launched, ``last_block_active`` threads, ``last_warp_active`` lanes of the last
        warp that has any work, and ``partial_warps_per_block`` (1 when ``block`` is not a multiple
        of 32: that warp always runs with lanes switched off).

    Examples
    --------
    >>> s = launch_summary(1_000_003, 256)
    >>> s["grid"], s["idle"], s["last_warp_active"]
    (3907, 189, 3)
    """
    if n < 1:
        raise ValueError(f"`n` should be at least 1; got {n}")
    if block < 1:
        raise ValueError(f"`block` should be a positive number of threads; got {block}")
    grid = -(-n // block)
    warps_per_block = -(-block // WARP)
    last_block_active = n - (grid - 1) * block
    last_warp_active = last_block_active % WARP or WARP
    return {
        "n": n, "block": block, "grid": grid, "threads": grid * block, "idle": grid * block - n,
        "warps": grid * warps_per_block, "last_block_active": last_block_active,
        "last_warp_active": last_warp_active, "partial_warps_per_block": int(block % WARP != 0),
    }


def thread_map_1d(n: int, block: int, grid: int | None = None) -> dict:
    """Which thread handles each of ``n`` items under a grid-stride loop.

    With ``grid=None`` the grid covers ``n`` (ceil-div) and every thread does at most one item; a
    smaller grid makes threads loop, item ``i`` going to global thread ``i % (grid * block)``.

    Returns
    -------
    dict of NumPy arrays, one entry per item: ``block``, ``thread`` (in its block), ``warp`` (in its
    block), ``lane``, ``iteration`` (of the grid-stride loop).
    """
    if grid is None:
        grid = -(-n // block)
    if grid < 1 or block < 1:
        raise ValueError(f"`grid` and `block` should be positive; got grid={grid}, block={block}")
    i = np.arange(n)
    total = grid * block
    gtid = i % total
    tid = gtid % block
    return {"block": gtid // block, "thread": tid, "warp": tid // WARP, "lane": tid % WARP,
            "iteration": i // total}


def plot_thread_map_1d(n: int, block: int, grid: int | None = None, ax=None):
    """Draw items 0..n-1 as cells coloured by block, labelled with the thread index; rows are loop
    iterations of a grid-stride loop. Meant for small ``n`` (up to a few hundred)."""
    import matplotlib.pyplot as plt
    m = thread_map_1d(n, block, grid)
    total = (grid or -(-n // block)) * block
    rows = int(m["iteration"].max()) + 1
    if ax is None:
        _fig, ax = plt.subplots(figsize=(min(14, 0.28 * total + 1), 0.5 * rows + 1.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k in range(n):
        x, y = k % total, int(m["iteration"][k])
        ax.add_patch(plt.Rectangle((x, y), 1, 1, color=colors[int(m["block"][k]) % len(colors)], alpha=0.75))
        if total <= 64:
            ax.text(x + 0.5, y + 0.5, str(int(m["thread"][k])), ha="center", va="center", fontsize=7)
    # the launched threads of the last row that found no item
    last = n % total
    if last:
        for x in range(last, total):
            ax.add_patch(plt.Rectangle((x, rows - 1), 1, 1, fill=False, hatch="//", ec="gray"))
    ax.set_xlim(0, total)
    ax.set_ylim(rows, 0)
    ax.set_yticks([r + 0.5 for r in range(rows)], [f"pass {r}" for r in range(rows)])
    ax.set_xlabel("global thread index (colour: block; hatched: launched, no item)")
    g = grid or -(-n // block)
    ax.set_title(f"n={n}, block={block}, grid={g}: {g * block} threads, "
                 f"{rows} pass{'es' if rows > 1 else ''}", fontsize=10)
    return ax


def plot_index_map_2d(width: int, height: int, block=(16, 16), ax=None):
    """Draw a ``width`` x ``height`` image covered by a ceil-div grid of 2D blocks.

    Threads whose (x, y) falls outside the image are hatched: they exist and must skip the work,
    which is what the bounds check ``if (x < width && y < height)`` is for.
    """
    import matplotlib.pyplot as plt
    bx, by = block
    gx, gy = -(-width // bx), -(-height // by)
    if ax is None:
        _fig, ax = plt.subplots(figsize=(6, 6 * gy * by / max(1, gx * bx)))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j in range(gy):
        for i in range(gx):
            c = colors[(j * gx + i) % len(colors)]
            ax.add_patch(plt.Rectangle((i * bx, j * by), bx, by, color=c, alpha=0.35, ec="black", lw=1))
            ax.text(i * bx + bx / 2, j * by + by / 2, f"({i},{j})", ha="center", va="center", fontsize=8)
    ax.add_patch(plt.Rectangle((0, 0), width, height, fill=False, ec="black", lw=2.5))
    if gx * bx > width:
        ax.add_patch(plt.Rectangle((width, 0), gx * bx - width, gy * by, fill=False, hatch="//", ec="gray"))
    if gy * by > height:
        ax.add_patch(plt.Rectangle((0, height), width, gy * by - height, fill=False, hatch="//", ec="gray"))
    ax.set_xlim(0, gx * bx)
    ax.set_ylim(gy * by, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("x (column)")
    ax.set_ylabel("y (row)")
    idle = gx * bx * gy * by - width * height
    ax.set_title(f"{width}x{height} image, blocks {bx}x{by}, grid {gx}x{gy}: "
                 f"{idle} of {gx * bx * gy * by} threads fall outside", fontsize=10)
    return ax


def wave_boundaries(sm_count: int, blocks_per_sm: int, max_blocks: int) -> list:
    """Grid sizes at which a new wave starts: multiples of ``sm_count * blocks_per_sm`` up to ``max_blocks``."""
    per_wave = sm_count * max(1, blocks_per_sm)
    return list(range(per_wave, max_blocks + 1, per_wave))


WAVE_SLICE = 16384
"""Elements each block of `WAVE_ADD_SRC` adds in the staircase sweep (64 KiB per array per block)."""


def wave_runner(max_waves: float = 4.0, slice_elems: int = WAVE_SLICE):
    """A ``run(waves, block, rounds) -> microseconds`` for `course.widgets.sweep` over `WAVE_ADD_SRC`.

    ``waves`` is the grid size in units of the SM count (blocks = round(waves * SMs)), so recordings
    from GPUs with different SM counts replay on the same axis. Compiling and allocating happen on
    the first call, so building the sweep on a machine without a GPU touches nothing.
    """
    state = {}

    def run(waves, block, rounds):
        from .._env import device_info
        from .._launch import compile as compile_
        from .._timing import benchmark
        if not state:
            import cupy
            sms = device_info().sm_count
            n = int(max_waves * sms + 1) * slice_elems
            rng = cupy.random.default_rng(7)
            state.update(k=compile_(WAVE_ADD_SRC).kernel("wave_add"), sms=sms,
                         x=rng.standard_normal(n, dtype=cupy.float32),
                         y=rng.standard_normal(n, dtype=cupy.float32),
                         z=cupy.empty(n, dtype=cupy.float32))
        blocks = max(1, round(waves * state["sms"]))
        if blocks * slice_elems > state["x"].size:
            raise ValueError(f"{waves} waves is more than the {max_waves} this runner allocated for")
        k, x, y, z = state["k"], state["x"], state["y"], state["z"]
        r = benchmark(lambda: k(blocks, block, x, y, z, slice_elems, rounds), budget_s=0.3, min_samples=5,
                      name="wave_add")
        return 1e3 * r.median_ms
    return run


def plot_wave_sweep(sweep, *, block: int, ax=None):
    """Time against grid size (in waves of one block per SM) for each ``rounds`` of a wave sweep.

    Measures the slice first when a GPU is present; otherwise draws the recording the sweep replays.
    Returns the axes, or None when there is nothing to draw (no GPU and no recording).
    """
    import matplotlib.pyplot as plt
    curves = {r: sweep.curve(block=block, rounds=r) for r in sweep.params["rounds"]}
    if not any(v is not None for c in curves.values() for _, v in c):
        print("[no GPU] No recording of this sweep to draw; on a GPU this cell measures it.")
        return None
    if ax is None:
        _fig, ax = plt.subplots(figsize=(8, 4))
    for r, pts in curves.items():
        xs = [x for x, v in pts if v is not None]
        ys = [v for _, v in pts if v is not None]
        ax.plot(xs, ys, marker=".", label=("memory-bound (rounds=0)" if r == 0 else f"{r} FMAs per element"))
    top = max(x for pts in curves.values() for x, _ in pts)
    for w in range(1, int(top) + 1):
        ax.axvline(w, color="gray", ls=":", lw=1)
    ax.set_xlabel("grid size in blocks per SM (dotted: whole multiples of the SM count)")
    ax.set_ylabel("kernel time (us)")
    ax.set_yscale("log")
    where = "measured here" if sweep.live else f"recorded on {sweep.recorded_on}"
    ax.set_title(f"wave_add, block {block}: {where}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def plot_staircase(blocks, times_us, *, sm_count: int, blocks_per_sm: int = 1, label=None, ax=None):
    """Kernel time against the number of blocks, with a vertical line wherever a new wave starts."""
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(blocks, times_us, marker=".", label=label)
    for b in wave_boundaries(sm_count, blocks_per_sm, int(max(blocks))):
        ax.axvline(b, color="gray", ls=":", lw=1)
    ax.set_xlabel(f"blocks in the grid (dotted: multiples of {sm_count} SMs x {blocks_per_sm} blocks/SM)")
    ax.set_ylabel("kernel time (us)")
    ax.grid(True, alpha=0.3)
    if label:
        ax.legend(fontsize=8)
    return ax


# --- floating point (CPU) ------------------------------------------------------------------------

def fma_inputs(n: int, seed: int = 0):
    """float32 triples (a, b, c) with c = -round(a*b), where a fused multiply-add differs from a
    separate multiply and add: the separate version gives exactly 0, the fused one the rounding
    error of the product."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(1.0, 2.0, n).astype(np.float32)
    b = rng.uniform(1.0, 2.0, n).astype(np.float32)
    c = -(a * b)  # NumPy rounds the float32 product: this is -round(a*b)
    return a, b, c


def fma_expected(a, b, c) -> dict:
    """The two correctly rounded answers for a*b+c in float32.

    ``separate`` = round(round(a*b) + c), what NumPy and a CPU without FMA compute.
    ``fused`` = round(a*b + c): a float32 product has at most 48 significant bits, so float64
    holds it exactly, and here the sum is exact too; one rounding to float32 gives what ``fmaf``
    returns, bit for bit.
    """
    a, b, c = (np.asarray(v, dtype=np.float32) for v in (a, b, c))
    separate = (a * b) + c
    fused = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)
    return {"separate": separate, "fused": fused}


_FLOAT_OP = re.compile(r"^\s*(fma|mul|add|sub)(?:\.rn|\.rz|\.rm|\.rp)?(?:\.ftz)?(?:\.sat)?\.f32\b", re.M)


def ptx_float_ops(ptx: str) -> dict:
    """Count single-precision fma / mul / add / sub instructions in PTX text."""
    counts = {"fma": 0, "mul": 0, "add": 0, "sub": 0}
    for m in _FLOAT_OP.finditer(ptx):
        counts[m.group(1)] += 1
    return counts


# --- the sticky error, in a child process ---------------------------------------------------------

_OOB_SRC = r'''extern "C" __global__ void write_far(float* p, long long offset)
{
    // far outside any allocation: an illegal address, caught by the GPU's memory protection
    p[offset + threadIdx.x] = 1.0f;
}
extern "C" __global__ void fill(float* p, float v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}
'''


def _child_steps() -> None:
    """Runs in the child: each step prints one JSON line {step, ok, detail}."""
    def report(step, ok, detail):
        print(json.dumps({"step": step, "ok": ok, "detail": detail}), flush=True)

    def err(exc):
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

    import cupy
    import course
    mod = course.compile(_OOB_SRC)
    x = cupy.zeros(1024, dtype=cupy.float32)
    mod.fill(4, 256, x, 2.0, 1024)
    cupy.cuda.Device().synchronize()
    report("a correct kernel, then synchronize", True, f"x[0] = {float(x[0])}")
    try:
        mod.write_far(1, 32, x, 1 << 40)
        report("launch a kernel that writes 4 TiB past its array", True,
               "the launch call returned normally: the kernel has not even run yet")
    except Exception as exc:
        report("launch a kernel that writes 4 TiB past its array", False, err(exc))
    t = time.perf_counter()
    _ = sum(range(100_000))  # the host goes on with its own work meanwhile
    report("host work after the launch", True, f"{1e3 * (time.perf_counter() - t):.1f} ms of Python ran fine")
    try:
        cupy.cuda.Device().synchronize()
        report("synchronize", True, "no error (unexpected)")
    except Exception as exc:
        report("synchronize", False, err(exc) + "  <- the kernel's fault surfaces here")
    try:
        y = cupy.zeros(16, dtype=cupy.float32)
        mod.fill(1, 32, y, 3.0, 16)
        cupy.cuda.Device().synchronize()
        report("allocate a new array and run a correct kernel", True, "worked (unexpected)")
    except Exception as exc:
        report("allocate a new array and run a correct kernel", False, err(exc) + "  <- sticky")
    try:
        cupy.cuda.Device().synchronize()
        report("synchronize again", True, "no error (unexpected)")
    except Exception as exc:
        report("synchronize again", False, err(exc) + "  <- the context stays broken")


def sticky_error_demo(timeout: float = 180.0) -> list:
    """Trigger an illegal-address fault in a child process and report what each later call saw.

    The fault corrupts the child's CUDA context for good (a *sticky* error: every later call fails
    with it), which is why it runs in a child: the notebook's own context is untouched.

    Returns
    -------
    list of dict
        One per step: ``step``, ``ok`` (bool) and ``detail``.
    """
    from .._env import device_info
    device_info()  # raises NoGPUError without a GPU, before spawning anything
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", "from course.lessons.ch01 import _child_steps; _child_steps()"],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=root)
    steps = []
    for line in proc.stdout.splitlines():
        try:
            steps.append(json.loads(line))
        except ValueError:
            continue
    if not steps:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        steps.append({"step": "start the child", "ok": False,
                      "detail": f"exit code {proc.returncode}: " + " / ".join(tail)})
    return steps


def print_steps(steps) -> None:
    """One line per step of `sticky_error_demo`."""
    for s in steps:
        print(f"{'ok  ' if s['ok'] else 'FAIL'}  {s['step']:<50} {s['detail']}")


# --- timing (GPU) ---------------------------------------------------------------------------------

def host_vs_events(launch, repeats: int = 20) -> dict:
    """Time ``launch()`` three ways and return the medians in microseconds.

    ``host_no_sync``: the host clock around the launch call alone (it returns before the kernel runs);
    ``host_sync``: the host clock around launch + synchronize (adds launch and wake-up latency);
    ``events``: CUDA events recorded on the stream around the launch (the GPU's own timestamps).
    """
    import cupy
    stream = cupy.cuda.get_current_stream()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    launch()
    stream.synchronize()
    out = {"host_no_sync": [], "host_sync": [], "events": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        launch()
        out["host_no_sync"].append(time.perf_counter() - t0)
        stream.synchronize()

        t0 = time.perf_counter()
        launch()
        stream.synchronize()
        out["host_sync"].append(time.perf_counter() - t0)

        start.record(stream)
        launch()
        stop.record(stream)
        stop.synchronize()
        out["events"].append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3)
    return {k: 1e6 * float(np.median(v)) for k, v in out.items()}


def ramp_up(launch, *, idle_s: float = 3.0, launches: int = 60) -> dict:
    """Time ``launches`` back-to-back runs of ``launch()`` after ``idle_s`` seconds of GPU idleness.

    Each run is timed with events and followed by an SM clock reading from NVML (None where NVML is
    missing), so the first runs show the clock still climbing from its idle level.

    Returns
    -------
    dict
        ``ms``: list of run times; ``mhz``: list of SM clocks; ``max_mhz``: the maximum SM clock.
    """
    import cupy
    from .._nvml import sm_clock_mhz
    stream = cupy.cuda.get_current_stream()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    launch()
    stream.synchronize()
    time.sleep(idle_s)
    ms, mhz, top = [], [], None
    for _ in range(launches):
        start.record(stream)
        launch()
        stop.record(stream)
        stop.synchronize()
        ms.append(cupy.cuda.get_elapsed_time(start, stop))
        clk = sm_clock_mhz()
        mhz.append(clk[0] if clk else None)
        top = clk[1] if clk else top
    return {"ms": ms, "mhz": mhz, "max_mhz": top}


def plot_ramp_up(result: dict, ax=None):
    """Run time per launch and the SM clock after it (right axis), from `ramp_up`."""
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(result["ms"], marker=".", color="C0")
    ax.set_xlabel("launch number after idling")
    ax.set_ylabel("kernel time (ms)", color="C0")
    ax.set_ylim(bottom=0)
    if any(m is not None for m in result["mhz"]):
        ax2 = ax.twinx()
        ax2.plot([m if m is not None else math.nan for m in result["mhz"]], color="C1", marker=".")
        ax2.set_ylabel("SM clock (MHz)", color="C1")
        if result.get("max_mhz"):
            ax2.axhline(result["max_mhz"], color="C1", ls=":", lw=1)
        ax2.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    return ax
