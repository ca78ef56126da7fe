"""Chapter 02 rows: pinned versus pageable copies, zero-copy reads, managed-memory first touch."""
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

    k = course.compile(ch02.SCALE_SRC).kernel("scale_copy")
    r = _zero_copy(ctx, cupy, course, k)
    out.append(ctx.row("zero-copy kernel read of mapped host memory, 256 MiB", r.gbps(4 * ZC_N), "GB/s",
                       anchor="pinned H2D 256 MiB", anchor_value=got["pinned", "h2d"],
                       note="bytes read over the link / kernel time"))

    t = ch02.managed_timings(k, ZC_N)
    out.append(ctx.row("managed memory: first-touch kernel over prefetched kernel, 256 MiB", t["first touch"], "ms",
                       anchor="same kernel after prefetch", anchor_value=t["prefetched"], higher_is_better=False,
                       note=f"resident {t['resident']:.3f} ms, prefetch {t['prefetch']:.3f} ms, "
                            f"device memory {t['device']:.3f} ms"))
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    return out
