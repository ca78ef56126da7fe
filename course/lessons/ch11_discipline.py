"""Chapter 11, measurement discipline: the gallery of bad benchmarks, first-launch cost, the occupancy sweep.

Each gallery entry measures one wrong way and the right way on the same work in the same run, so the
benchmark suite records both and a machine without a GPU replays them. Kernels are chapter 04's lesson cells.
"""
from __future__ import annotations

import time

__all__ = ["GALLERY", "gallery", "first_launch_cost", "OCC_KERNELS", "OCC_CONFIGS", "occupancy_point",
           "occupancy_table", "occupancy_sweep"]

N_SMALL = 1 << 21         # 8 MiB in, 8 MiB out: both fit the H100's 50 MiB L2 at once
N_TINY = 1 << 20          # a kernel of a few microseconds, where one sample means little
N_OCC = 1 << 26           # 256 MiB per array for the occupancy points
N_LARGE = 1 << 28         # chapter 04's 1 GiB per array
COPY_BYTES = 256 << 20


def _scale(n: int) -> dict:
    """Chapter 04's float4 grid-stride scale on fresh ``n`` floats: ``run`` (a launch), ``bytes`` (useful: read
    and write each float once), the kernel, its arrays and its grid (one wave, from the occupancy API)."""
    import cupy
    import course
    k = course.lesson_cell("04_coalescing", "scale_vec4_grid").kernel("scale_vec4_grid")
    x = cupy.random.default_rng(n).random(n, dtype=cupy.float32)
    y, grid = cupy.empty_like(x), course.device_info().sm_count * k.occupancy(256)
    return {"run": lambda: k(grid, 256, x, y, 2.0, n // 4), "bytes": 8 * n, "x": x, "y": y, "grid": grid}


def _host_timer_no_sync():
    import course
    run = _scale(N_LARGE)["run"]
    course.benchmark(run, budget_s=0.2)   # warm: what is left to see is the missing sync alone
    t0 = time.perf_counter()
    run()
    wrong = 1e3 * (time.perf_counter() - t0)
    return wrong, course.benchmark(run).median_ms


def first_launch_cost(n: int = N_LARGE) -> dict:
    """ms of a fresh NVRTC compile (no cache), of loading the module, of the first launch (host timer with a
    sync), their total, and the event-timed median of warm launches of the same kernel."""
    import cupy
    import course
    s = _scale(n)                         # the arrays, and the grid, made outside the timing
    s["run"]()
    cell = course.lesson_cell("04_coalescing", "scale_vec4_grid")
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    prog = course.compile_for_arch(cell.source, course.device_info().arch, use_cache=False)
    t1 = time.perf_counter()
    k = course.Module(prog).kernel("scale_vec4_grid")
    t2 = time.perf_counter()
    k(s["grid"], 256, s["x"], s["y"], 2.0, n // 4)
    cupy.cuda.Device().synchronize()
    t3 = time.perf_counter()
    warm = course.benchmark(lambda: k(s["grid"], 256, s["x"], s["y"], 2.0, n // 4)).median_ms
    return {"compile_ms": 1e3 * (t1 - t0), "load_ms": 1e3 * (t2 - t1), "first_launch_ms": 1e3 * (t3 - t2),
            "total_ms": 1e3 * (t3 - t0), "warm_ms": warm}


def _no_flush():
    import course
    s = _scale(N_SMALL)
    return (course.benchmark(s["run"], flush_l2=False).gbps(s["bytes"]),
            course.benchmark(s["run"], flush_l2=True).gbps(s["bytes"]))


def _one_sample():
    import course
    r = course.benchmark(_scale(N_TINY)["run"], min_samples=50, max_samples=50, rel_noise=0.0)
    return 1e3 * max(r.samples_ms), 1e3 * r.median_ms


def _idle_start():
    """Events around a few-microsecond kernel on an idle GPU (L2 flushed and synchronized before each, as the
    timer flushes it, but nothing queued ahead of the start event), against `course.benchmark` of the same."""
    import cupy
    import course
    s, ev, times = _scale(N_TINY), (cupy.cuda.Event(), cupy.cuda.Event()), []
    from .._timing import flush_bytes   # the timer's own flush, so the two differ only in what is queued ahead
    flush = cupy.empty(flush_bytes(course.device_info().l2_bytes), dtype=cupy.uint8)
    for _ in range(51):                       # the first, warm-up, is dropped
        flush.fill(0)
        cupy.cuda.Device().synchronize()
        ev[0].record(), s["run"](), ev[1].record(), ev[1].synchronize()
        times.append(cupy.cuda.get_elapsed_time(*ev))
    return 1e3 * sorted(times[1:])[25], 1e3 * course.benchmark(s["run"]).median_ms


def _async_copy(pinned: bool):
    import cupy
    import cupyx
    import numpy as np
    from cupy.cuda import runtime
    host = cupyx.empty_pinned(COPY_BYTES, dtype=np.uint8) if pinned else np.empty(COPY_BYTES, dtype=np.uint8)
    host[:] = 1
    dev, s = cupy.empty(COPY_BYTES, dtype=cupy.uint8), cupy.cuda.Stream(non_blocking=True)

    def copy():
        runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, COPY_BYTES, runtime.memcpyHostToDevice, s.ptr)
    got = {}
    for sync in (False, True, False, True):   # the second of each pair: warm
        s.synchronize()
        t0 = time.perf_counter()
        copy()
        if sync:
            s.synchronize()
        got[sync] = COPY_BYTES / (time.perf_counter() - t0) / 1e9
    s.synchronize()
    return got[False], got[True]


# key, what is wrong, the right way, unit, and why they differ
GALLERY = (
    ("host timer, no sync", "time.perf_counter around a launch", "CUDA events, median", "ms",
     "a launch returns once the work is queued; the timer saw the queueing", _host_timer_no_sync),
    ("first launch included", "compile + load + first launch", "median of warm launches", "ms",
     "NVRTC, module load and lazy function loading are paid once, not per launch",
     lambda: (lambda c: (c["total_ms"], c["warm_ms"]))(first_launch_cost())),
    ("no L2 flush, 16 MiB", "warm L2, reported as memory bandwidth", "L2 flushed before each sample", "GB/s",
     "16 MiB of data fits in L2: without a flush the kernel reads it from there", _no_flush),
    ("one sample", "the worst of 50 single samples", "median of the 50", "us",
     "a kernel of a few microseconds varies by more than the effect one is looking for", _one_sample),
    ("events on an idle GPU", "start event, launch, stop event, nothing queued ahead", "course.benchmark", "us",
     "the start event fired at once on the idle GPU; the host's launch overhead was counted as kernel time",
     _idle_start),
    ("async copy from pinned memory, no sync", "host timer around cudaMemcpyAsync", "the same with a sync",
     "GB/s", "from pinned memory the call returns before the DMA engine has moved a byte",
     lambda: _async_copy(True)),
    ("async copy from pageable memory, no sync", "host timer around cudaMemcpyAsync", "the same with a sync",
     "GB/s", "from pageable memory the driver stages the copy and returns late: right by accident",
     lambda: _async_copy(False)),
)


def gallery(keys=None) -> list:
    """Measure the gallery (every entry, or ``keys``): one dict per entry with both numbers and their ratio."""
    out = []
    for key, wrong, right, unit, why, fn in GALLERY:
        if keys is None or key in keys:
            w, r = fn()
            out.append({"case": key, "wrong": w, "right": r, "unit": unit, "ratio": w / r if r else None,
                        "wrong way": wrong, "right way": right, "why": why})
            __import__("cupy").get_default_memory_pool().free_all_blocks()
    return out


OCC_KERNELS = ("scale_scalar", "scale_vec4")       # 4 and 16 bytes in flight per thread
OCC_CONFIGS = ((32, 0), (64, 0), (256, 0), (1024, 0), (256, 48 << 10), (256, 100 << 10), (64, 100 << 10),
               (1024, 100 << 10))


def occupancy_point(kernel: str, block: int, smem: int, state: dict) -> dict:
    """Blocks per SM predicted from the hardware rules (`course.occupancy.predict`) and given by the CUDA
    occupancy API, and the kernel's GB/s on N_OCC floats with ``smem`` bytes of dynamic shared memory that
    it does not use (only to hold occupancy down)."""
    import cupy
    import course
    from course import occupancy
    if "x" not in state:
        state.update(x=cupy.random.default_rng(5).random(N_OCC, dtype=cupy.float32),
                     ks=course.lesson_cell("04_coalescing", "scale_scalar").compile())
    x, k = state["x"], state["ks"].kernel(kernel)
    y = state.setdefault("y", cupy.empty_like(x))
    api = occupancy.measured(k, block, smem)
    pred = occupancy.predict(block, api["registers"], api["smem_per_block"],
                             cc=occupancy.table_cc(course.device_info().cc))
    n = N_OCC if kernel == "scale_scalar" else N_OCC // 4
    r = course.benchmark(lambda: k(course.grid_for(n, block), block, x, y, 2.0, n, shared_mem=smem),
                         name=kernel, budget_s=0.5)
    return {"kernel": kernel, "block": block, "smem": smem, "registers": api["registers"],
            "predicted": pred["blocks_per_sm"], "limiter": pred["limiter"], "occupancy": pred["occupancy"],
            "api": api["blocks_per_sm"], "gbps": r.gbps(8 * N_OCC)}


def occupancy_table(kernel: str = "scale_scalar", configs=OCC_CONFIGS) -> list:
    """`occupancy_point` at each (block, shared bytes) of ``configs`` that a block may reserve on this GPU."""
    state = {}
    return [occupancy_point(kernel, b, s, state) for b, s in configs if __import__("course").occupancy.fits(s)]


def occupancy_sweep(record: bool | None = None):
    """The widget: GB/s against the dynamic shared memory a block reserves (which caps blocks per SM), sliders
    for the block size and for the kernel (one float or one float4 per thread)."""
    from course.widgets import sweep
    state = {}

    def run(smem_kib, block, kernel):
        p = occupancy_point(kernel, block, smem_kib << 10, state)
        return p["gbps"], (f"{p['api']} blocks/SM by the API, {p['predicted']} predicted ({p['limiter']}), "
                           f"occupancy {p['occupancy']:.0%}")
    from course.occupancy import fits
    return sweep(run, {"smem_kib": [s for s in (0, 8, 16, 24, 32, 48, 64, 100, 200) if fits(s << 10)],
                       "block": [64, 256, 1024], "kernel": list(OCC_KERNELS)}, metric="GB/s (8 bytes per element)",
                 name="11_profiling_occupancy", record=record,
                 title="chapter 04's scale, occupancy held down by unused shared memory")
