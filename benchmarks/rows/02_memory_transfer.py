"""Chapter 02 rows: pinned versus pageable copies, zero-copy reads, managed-memory first touch.

The kernel is the notebook's ``scale_copy`` cell (course.lesson_cell); the managed-memory row times the
same steps as the notebook's section 3 (host-written pages, first touch, resident, prefetch).
"""
from __future__ import annotations

import numpy as np

SIZE = 256 << 20          # large enough that per-call overhead is < 1% of a pinned copy
ZC_N = (64 << 20) - 5     # floats read through the mapped pointer (odd count: a partial last block)


def _roundtrip_ok(bufs, kind, nbytes, cupy):
    """Fresh random bytes host -> device -> host must come back unchanged."""
    from course.lessons.ch02 import transfer_fn
    host = bufs.host(kind)
    host[:nbytes] = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    want = host[:nbytes].copy()
    transfer_fn(bufs, kind, "h2d", nbytes)()
    # a pinned copy is truly asynchronous: clearing the source before it finishes would race the DMA
    cupy.cuda.get_current_stream().synchronize()
    host[:nbytes] = 0
    transfer_fn(bufs, kind, "d2h", nbytes)()
    cupy.cuda.get_current_stream().synchronize()
    assert np.array_equal(host[:nbytes], want), f"{kind} round trip of {nbytes} bytes corrupted data"


def _copies(cupy, ch02) -> dict:
    bufs = ch02.HostBuffers(SIZE)
    for kind in ch02.KINDS:
        for n in (1000, 1 << 20, SIZE - 3):
            _roundtrip_ok(bufs, kind, n, cupy)
    return {(kind, d): ch02.time_transfer(bufs, kind, d, SIZE, budget_s=3.0).gbps(SIZE)
            for kind in ch02.KINDS for d in ch02.DIRECTIONS}


def _zero_copy(ctx, cupy, course, k):
    from course.lessons import ch02
    host, mapped = ch02.mapped_empty(ZC_N, np.float32)
    host[:] = np.random.default_rng(3).standard_normal(ZC_N).astype(np.float32)
    dst = cupy.empty(ZC_N, dtype=cupy.float32)
    grid = course.device_info().sm_count * 8
    k(grid, 256, mapped, dst, 2.0, ZC_N)
    assert bool((dst.get() == 2.0 * host).all()), "zero-copy scale_copy read wrong data"
    return ctx.benchmark(lambda: k(grid, 256, mapped, dst, 2.0, ZC_N), flush_l2=False, name="zero-copy read")


def _once_ms(fn, cupy) -> float:
    stream = cupy.cuda.get_current_stream()
    start = stream.record()
    fn()
    stop = stream.record()
    stop.synchronize()
    return cupy.cuda.get_elapsed_time(start, stop)


def _managed(k, n, cupy, course, ch02) -> dict:
    """Milliseconds of one scale_copy over ``n`` managed floats written by the host (first touch), again
    (resident), after the host wrote them again and one prefetch moved them (prefetched; the prefetch's
    own time is ``prefetch``), and over ordinary device memory (device)."""
    grid = course.device_info().sm_count * 8
    y, plain = cupy.empty(n, dtype=cupy.float32), cupy.ones(n, dtype=cupy.float32)
    dev, host = ch02.managed_empty(n, np.float32)
    scale = lambda src: k(grid, 256, src, y, 2.0, n)  # noqa: E731
    scale(plain)  # load the module before timing anything
    host[:] = 1.0
    cupy.cuda.get_current_stream().synchronize()
    t = {"first touch": _once_ms(lambda: scale(dev), cupy), "resident": _once_ms(lambda: scale(dev), cupy)}
    host[:] = 1.0  # the host's writes pull every page back to the CPU
    cupy.cuda.get_current_stream().synchronize()
    t["prefetch"] = _once_ms(lambda: ch02.prefetch(dev, "device"), cupy)
    t["prefetched"] = _once_ms(lambda: scale(dev), cupy)
    assert bool((y == 2.0).all()), "scale_copy over managed memory produced wrong values"
    t["device"] = _once_ms(lambda: scale(plain), cupy)
    return t


def rows(ctx) -> list:
    import cupy
    import course
    from course.lessons import ch02
    out = []
    got = _copies(cupy, ch02)
    link = ch02.link_rate()
    for d in ch02.DIRECTIONS:
        out.append(ctx.row(f"pinned {d.upper()} 256 MiB", got["pinned", d], "GB/s",
                           anchor=(link["label"] if link else None), anchor_value=(link["gbps"] if link else None),
                           note="fraction of the link's theoretical rate"))
    out.append(ctx.row("pinned H2D over pageable H2D, 256 MiB", got["pinned", "h2d"], "GB/s",
                       anchor="pageable H2D 256 MiB", anchor_value=got["pageable", "h2d"], target=5.0))
    out.append(ctx.row("pinned D2H over pageable D2H, 256 MiB", got["pinned", "d2h"], "GB/s",
                       anchor="pageable D2H 256 MiB", anchor_value=got["pageable", "d2h"]))
    cupy.get_default_pinned_memory_pool().free_all_blocks()

    k = course.lesson_cell("02_memory_transfer", "scale_copy").kernel()
    r = _zero_copy(ctx, cupy, course, k)
    out.append(ctx.row("zero-copy kernel read of mapped host memory, 256 MiB", r.gbps(4 * ZC_N), "GB/s",
                       anchor="pinned H2D 256 MiB", anchor_value=got["pinned", "h2d"],
                       note="bytes read over the link / kernel time"))

    t = _managed(k, ZC_N, cupy, course, ch02)
    out.append(ctx.row("managed memory: first-touch kernel over prefetched kernel, 256 MiB", t["first touch"], "ms",
                       anchor="same kernel after prefetch", anchor_value=t["prefetched"], higher_is_better=False,
                       note=f"resident {t['resident']:.3f} ms, prefetch {t['prefetch']:.3f} ms, "
                            f"device memory {t['device']:.3f} ms"))
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    return out
