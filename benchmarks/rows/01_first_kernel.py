"""Chapter 01 rows: the reference vector add against the device-to-device copy of the same run, and the
cost of a launch call. The kernel is the notebook's ``vec_add`` cell (course.lesson_cell).

Bytes counted for both: everything read plus everything written (vector add: 2 reads + 1 write
per element; copy: 1 read + 1 write), so the ratio compares like with like.
"""
from __future__ import annotations

import time

import numpy as np

BLOCK = 256
N_BIG = (1 << 28) - 3   # 1 GiB per array, far past L2; odd, so the last block is partial


def _check(k, cupy, n, seed):
    rng = cupy.random.default_rng(seed)
    x = rng.standard_normal(n, dtype=cupy.float32)
    y = rng.standard_normal(n, dtype=cupy.float32)
    z = cupy.full(n, cupy.nan, dtype=cupy.float32)
    k(-(-n // BLOCK), BLOCK, x, y, z, n)
    # x + y is one correctly rounded add on both sides: equality is exact
    assert bool((z == x + y).all()), f"vec_add wrong for n={n}"


def _vec_add_gbps(ctx, k, cupy):
    rng = cupy.random.default_rng(14)
    x = rng.standard_normal(N_BIG, dtype=cupy.float32)
    y = rng.standard_normal(N_BIG, dtype=cupy.float32)
    z = cupy.empty_like(x)
    grid = -(-N_BIG // BLOCK)
    return ctx.benchmark(lambda: k(grid, BLOCK, x, y, z, N_BIG), name="vec_add")


def _launch_us(launch, cupy, repeats: int = 50) -> dict:
    """Medians in microseconds, as chapter 01's timing section measures them: the host clock around the
    launch call alone, around launch + synchronize, and CUDA events around the kernel."""
    stream = cupy.cuda.get_current_stream()
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
        start = stream.record()
        launch()
        stop = stream.record()
        stop.synchronize()
        out["events"].append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3)
    return {k: 1e6 * float(np.median(v)) for k, v in out.items()}


def rows(ctx) -> list:
    import cupy
    import course
    k = course.lesson_cell("01_first_kernel", "vec_add").kernel()
    for n, seed in ((1, 11), (1_000_003, 12), (N_BIG, 13)):
        _check(k, cupy, n, seed)
    cupy.get_default_memory_pool().free_all_blocks()
    r = _vec_add_gbps(ctx, k, cupy)
    out = [ctx.row(f"reference vec_add, n=2^28-3, block {BLOCK} (2 reads + 1 write)", r.gbps(12 * N_BIG),
                   "GB/s", anchor="D2D copy (read+write), same run", anchor_value=ctx.copy_gbps, target=0.90,
                   note=f"median {r.median_ms:.3f} ms, IQR {100 * r.rel_iqr:.1f}%")]
    cupy.get_default_memory_pool().free_all_blocks()
    # launch overhead: what the host pays per launch, the floor of any tiny kernel
    tiny = cupy.empty(1, dtype=cupy.float32)
    t = _launch_us(lambda: k(1, 32, tiny, tiny, tiny, 1), cupy)
    out.append(ctx.row("launch call, host clock, no sync", t["host_no_sync"], "us",
                       note=f"with sync {t['host_sync']:.1f} us; events {t['events']:.1f} us"))
    return out
