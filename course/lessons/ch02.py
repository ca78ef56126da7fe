"""Chapter 02 (memory transfer): host buffers of each kind, transfer sweeps, managed and mapped memory.

The four ways host data reaches a kernel, as CuPy spells them:

========== ============================================== =========================================
kind       allocation                                     how the GPU gets the bytes
========== ============================================== =========================================
pageable   ``numpy.empty``                                the driver stages through its own pinned
                                                          buffer, chunk by chunk
pinned     ``cupyx.empty_pinned``                         DMA straight from the page-locked buffer
managed    ``cupy.cuda.malloc_managed``                   pages migrate on first touch (or prefetch)
mapped     pinned + ``cudaHostAllocMapped``               the kernel reads host memory over the link
========== ============================================== =========================================
"""
from __future__ import annotations

import numpy as np

__all__ = [
    "TRANSFER_SIZES", "KINDS", "DIRECTIONS", "link_rate", "HostBuffers", "transfer_fn", "time_transfer",
    "transfer_sweep", "plot_transfer_sweep", "host_array", "managed_empty", "mapped_empty", "prefetch",
    "fmt_bytes",
]

TRANSFER_SIZES = [1 << k for k in range(10, 31, 2)]
"""1 KiB to 1 GiB in steps of 4x: 11 sizes."""

KINDS = ("pageable", "pinned")
DIRECTIONS = ("h2d", "d2h")
_KIND_CODE = {"h2d": 1, "d2h": 2}  # cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost


def fmt_bytes(n: int) -> str:
    """1024 -> '1 KiB', 3 << 20 -> '3 MiB'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def link_rate() -> dict | None:
    """The host link of this GPU from NVML: PCIe generation, lanes and theoretical GB/s per direction.

    Returns None without a GPU or NVML. The generation and width are the maximum the link trains
    to; an idle link reports a lower current generation to save power.
    """
    from .._env import gpu_available
    if not gpu_available():
        return None
    from .._nvml import pcie_link
    got = pcie_link()
    if not got:
        return None
    gen, width, gbps = got
    return {"gen": gen, "width": width, "gbps": gbps, "label": f"PCIe gen{gen} x{width}: {gbps:.0f} GB/s"}


# --- host memory of each kind --------------------------------------------------------------------

class _HostWindow:
    """Exposes ``nbytes`` at host address ``ptr`` to NumPy while keeping ``owner`` alive."""

    def __init__(self, ptr: int, shape, dtype, owner):
        self.owner = owner
        self.__array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                    "data": (int(ptr), False), "version": 3}


def host_array(ptr: int, shape, dtype, owner) -> np.ndarray:
    """A NumPy array over host-accessible memory at ``ptr`` that keeps ``owner`` alive as long as it lives."""
    return np.asarray(_HostWindow(ptr, shape, dtype, owner))


def managed_empty(shape, dtype=np.float32):
    """A CuPy array in managed (unified) memory, and a NumPy view of the same bytes for the host.

    Returns
    -------
    (cupy.ndarray, numpy.ndarray)
        Both address the same pages; whichever processor touches a page last holds it. Synchronize
        before the host touches pages a kernel may be using.
    """
    import cupy
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    mem = cupy.cuda.malloc_managed(nbytes)
    dev = cupy.ndarray(shape, dtype=dtype, memptr=mem)
    return dev, host_array(mem.ptr, shape, dtype, owner=dev)


def mapped_empty(shape, dtype=np.float32):
    """Pinned host memory mapped into the GPU's address space (zero-copy).

    Returns
    -------
    (numpy.ndarray, cupy.ndarray)
        The host view and a CuPy array a kernel can read and write; every access from the GPU
        crosses the host link, so it pays off for data touched about once.
    """
    import cupy
    from cupy.cuda import runtime
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    nbytes = max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize)
    mem = cupy.cuda.PinnedMemory(nbytes, runtime.hostAllocMapped)
    # under unified addressing the device pointer of mapped memory equals the host pointer;
    # ask the driver anyway so a system without it fails loudly, not with a wrong address
    attrs = runtime.pointerGetAttributes(mem.ptr)
    dptr = int(attrs.devicePointer) or mem.ptr
    dev_id = cupy.cuda.Device().id
    um = cupy.cuda.UnownedMemory(dptr, nbytes, owner=mem, device_id=dev_id)
    dev = cupy.ndarray(shape, dtype=dtype, memptr=cupy.cuda.MemoryPointer(um, 0))
    host = host_array(mem.ptr, shape, dtype, owner=mem)
    return host, dev


def prefetch(dev_array, to: str = "device", stream=None) -> None:
    """Move the pages of a managed array ahead of use (``cudaMemPrefetchAsync``).

    ``to="device"`` migrates them to the current GPU. ``to="host"`` is refused with an explanation:
    CUDA 13 changed the prefetch call to take a memory location, and CuPy 14's wrapper cannot
    name the CPU as the destination. Touching the pages from the host migrates them back instead.
    """
    import cupy
    from .._errors import FeatureUnavailable
    if to not in ("device", "host"):
        raise ValueError(f"`to` should be 'device' or 'host'; got {to!r}")
    stream = stream or cupy.cuda.get_current_stream()
    if to == "host":
        raise FeatureUnavailable(
            "Prefetching managed memory to the CPU is not available through this CuPy build (CUDA 13 "
            "changed cudaMemPrefetchAsync to take a cudaMemLocation). Let the host's first touch "
            "migrate the pages, or copy the data out explicitly.")
    ptr, nbytes = dev_array.data.ptr, dev_array.nbytes
    mem = dev_array.data.mem
    if hasattr(mem, "prefetch"):
        mem.prefetch(stream, device_id=cupy.cuda.Device().id)
    else:
        cupy.cuda.runtime.memPrefetchAsync(ptr, nbytes, cupy.cuda.Device().id, stream.ptr)


# --- transfer timing -------------------------------------------------------------------------------

class HostBuffers:
    """A pageable and a pinned host buffer and a device buffer, all ``max_bytes`` long, for sweeps.

    The pageable buffer is written once so its pages exist before timing: a first touch inside a
    timed copy would add the kernel's page-fault cost to the measurement.
    """

    def __init__(self, max_bytes: int):
        import cupy
        import cupyx
        self.max_bytes = int(max_bytes)
        self.pageable = np.ones(self.max_bytes, dtype=np.uint8)
        self.pinned = cupyx.empty_pinned(self.max_bytes, dtype=np.uint8)
        self.pinned[:] = 1
        self.device = cupy.empty(self.max_bytes, dtype=cupy.uint8)

    def host(self, kind: str) -> np.ndarray:
        if kind not in KINDS:
            raise ValueError(f"`kind` should be one of {KINDS}; got {kind!r}")
        return self.pageable if kind == "pageable" else self.pinned


def transfer_fn(bufs: HostBuffers, kind: str, direction: str, nbytes: int):
    """A callable that enqueues one ``nbytes`` copy on the current stream (for `course.benchmark`)."""
    import cupy
    if direction not in DIRECTIONS:
        raise ValueError(f"`direction` should be one of {DIRECTIONS}; got {direction!r}")
    if not 0 < nbytes <= bufs.max_bytes:
        raise ValueError(f"`nbytes` should be in 1..{bufs.max_bytes}; got {nbytes}")
    h = bufs.host(kind).ctypes.data
    d = bufs.device.data.ptr
    src, dst = (h, d) if direction == "h2d" else (d, h)
    code = _KIND_CODE[direction]

    def copy():
        cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, code, cupy.cuda.get_current_stream().ptr)
    return copy


def time_transfer(bufs: HostBuffers, kind: str, direction: str, nbytes: int, *, budget_s: float = 1.0):
    """`course.BenchResult` of one copy of ``nbytes`` (no L2 flush: the copy engines bypass it anyway)."""
    from .._timing import benchmark
    return benchmark(transfer_fn(bufs, kind, direction, nbytes), flush_l2=False, budget_s=budget_s,
                     min_samples=5 if nbytes >= 1 << 28 else 10, name=f"{kind} {direction} {fmt_bytes(nbytes)}")


def transfer_sweep(sizes=TRANSFER_SIZES, kinds=KINDS, directions=DIRECTIONS, *, budget_s: float = 1.0) -> list:
    """Measure every (kind, direction, size); return rows {kind, direction, bytes, gbps, median_ms}."""
    import cupy
    sizes = sorted(int(s) for s in sizes)
    bufs = HostBuffers(sizes[-1])
    rows = []
    try:
        for kind in kinds:
            for direction in directions:
                for n in sizes:
                    r = time_transfer(bufs, kind, direction, n, budget_s=budget_s)
                    rows.append({"kind": kind, "direction": direction, "bytes": n, "gbps": r.gbps(n),
                                 "median_ms": r.median_ms})
    finally:
        del bufs
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
    return rows


def plot_transfer_sweep(rows, *, link: dict | None = None, ax=None, title=None):
    """Bandwidth against transfer size, one line per (kind, direction), with the link's rate dashed."""
    from ..plots import bandwidth_curve
    series, sizes = {}, sorted({r["bytes"] for r in rows})
    for r in rows:
        series.setdefault(f"{r['kind']} {r['direction'].upper()}", {})[r["bytes"]] = r["gbps"]
    lines = {k: [v.get(s, float("nan")) for s in sizes] for k, v in series.items()}
    return bandwidth_curve(sizes, lines, peak_gbps=link["gbps"] if link else None,
                           peak_label=(f"PCIe gen{link['gen']} x{link['width']} theoretical" if link else "peak"),
                           ax=ax, title=title or "Host <-> device copies")
