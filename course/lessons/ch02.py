"""Chapter 02 (memory transfer): host buffers of each kind (pageable, pinned, managed, mapped), transfer
sweeps and the latency-bandwidth fit, and the zero-copy plot.

The notebook's table says how each kind reaches the GPU; its ``scale_copy`` cell is the chapter's
kernel, and the demonstrations that run it (managed first touch, zero-copy against copy-once) are in the
notebook's cells, built on the allocators here. Nothing here touches CUDA at import time.
"""
from __future__ import annotations

import numpy as np

from course import FeatureUnavailable, benchmark

__all__ = [
    "TRANSFER_SIZES", "KINDS", "DIRECTIONS", "link_rate", "HostBuffers", "transfer_fn", "time_transfer",
    "plot_transfer_sweep", "host_array", "managed_empty", "mapped_empty", "prefetch", "fmt_bytes",
    "transfer_runner", "rows_from_sweep", "pcie_theoretical", "fit_latency_bandwidth", "plot_zero_copy",
]

# GB/s per lane after line coding: gen1-2 use 8b/10b, gen3-5 128b/130b
_PCIE_LANE_GBPS = {1: 2.5 * 8 / 10 / 8, 2: 5.0 * 8 / 10 / 8, 3: 8.0 * 128 / 130 / 8,
                   4: 16.0 * 128 / 130 / 8, 5: 32.0 * 128 / 130 / 8}


def pcie_theoretical(gen: int, width: int = 16) -> float:
    """Theoretical GB/s per direction of a PCIe link: transfer rate x lanes x line-code efficiency.

    This is the raw data rate; packet headers and flow control take roughly another 10-15% in practice.
    """
    if gen not in _PCIE_LANE_GBPS:
        raise ValueError(f"`gen` should be one of {sorted(_PCIE_LANE_GBPS)}; got {gen!r}")
    return _PCIE_LANE_GBPS[gen] * width


def fit_latency_bandwidth(rows, kind: str, direction: str) -> tuple:
    """Fit time = t0 + bytes / bandwidth to the rows of one (kind, direction).

    Returns (t0 in microseconds, bandwidth in GB/s): the fixed cost per copy and the asymptotic rate.
    Half the asymptotic rate is reached at t0 * bandwidth bytes.
    """
    pts = [(r["bytes"], r["bytes"] / (r["gbps"] * 1e9)) for r in rows
           if r["kind"] == kind and r["direction"] == direction and r["gbps"] > 0]
    if len(pts) < 2:
        raise ValueError(f"need at least two sizes of {kind} {direction} to fit; got {len(pts)}")
    n = np.array([p[0] for p in pts], dtype=np.float64)
    t = np.array([p[1] for p in pts], dtype=np.float64)
    # weight by 1/t so the small sizes (latency) count as much as the large ones (bandwidth)
    a = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (t0, inv_bw), *_ = np.linalg.lstsq(a, np.ones_like(t), rcond=None)
    return float(1e6 * max(t0, 0.0)), float(1.0 / inv_bw / 1e9) if inv_bw > 0 else float("inf")

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
    from course import gpu_available
    if not gpu_available():
        return None
    from .. import pcie_link
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
    if to not in ("device", "host"):
        raise ValueError(f"`to` should be 'device' or 'host'; got {to!r}")
    stream = stream or cupy.cuda.get_current_stream()
    if to == "host":
        raise FeatureUnavailable(
            "Prefetching managed memory to the CPU is not available through this CuPy build (CUDA 13 "
            "changed cudaMemPrefetchAsync to take a cudaMemLocation). Let the host's first touch "
            "migrate the pages, or copy the data out explicitly.")
    dev_array.data.mem.prefetch(stream, device_id=cupy.cuda.Device().id)  # a cupy.cuda.ManagedMemory


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
    return benchmark(transfer_fn(bufs, kind, direction, nbytes), flush_l2=False, budget_s=budget_s,
                     min_samples=5 if nbytes >= 1 << 28 else 10, name=f"{kind} {direction} {fmt_bytes(nbytes)}")


def plot_transfer_sweep(rows, *, link: dict | None = None, ax=None, title=None):
    """Bandwidth against transfer size, one line per (kind, direction), with the link's rate dashed.

    Returns the axes, or None (with a sentence) when ``rows`` is empty.
    """
    from course.plots import bandwidth_curve
    rows = list(rows)
    if not rows:
        print("[no GPU] No measured or recorded transfers to draw; on a GPU this cell measures them.")
        return None
    series, sizes = {}, sorted({r["bytes"] for r in rows})
    for r in rows:
        series.setdefault(f"{r['kind']} {r['direction'].upper()}", {})[r["bytes"]] = r["gbps"]
    lines = {k: [v.get(s, float("nan")) for s in sizes] for k, v in series.items()}
    return bandwidth_curve(sizes, lines, peak_gbps=link["gbps"] if link else None,
                           peak_label=(f"PCIe gen{link['gen']} x{link['width']} theoretical" if link else "peak"),
                           ax=ax, title=title or "Host <-> device copies")


def transfer_runner(max_bytes: int = TRANSFER_SIZES[-1]):
    """A ``run(bytes, kind, direction) -> GB/s`` for `course.widgets.sweep`.

    The 1 GiB buffers are allocated on the first call, so building the sweep without a GPU (where
    it replays a recording) allocates nothing.
    """
    state = {}

    def run(bytes, kind, direction):  # noqa: A002 - the sweep's parameter name, shown on its axis
        if "bufs" not in state:
            state["bufs"] = HostBuffers(max_bytes)
        return time_transfer(state["bufs"], kind, direction, int(bytes), budget_s=0.5).gbps(int(bytes))
    return run


def rows_from_sweep(sweep) -> list:
    """The points of a (bytes, kind, direction) sweep as rows for `plot_transfer_sweep`.

    Measures every point first when a GPU is present; otherwise uses the recording it replays.
    """
    if sweep.live:
        sweep.measure_all(progress=False)
    rows = []
    for k in sweep.params["kind"]:
        for d in sweep.params["direction"]:
            for n in sweep.params["bytes"]:
                v = sweep.measure(bytes=n, kind=k, direction=d)
                if v is not None:
                    rows.append({"kind": k, "direction": d, "bytes": int(n), "gbps": v})
    return rows


def plot_zero_copy(rows, *, h2d_gbps: float | None = None, nbytes: int | None = None, ax=None):
    """Time against the number of passes over the data, zero-copy versus copy-once."""
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(7, 4))
    r = [x["reuses"] for x in rows]
    ax.plot(r, [x["zero_copy_ms"] for x in rows], marker="o", label="zero-copy: every pass reads host memory")
    ax.plot(r, [x["copy_ms"] for x in rows], marker="o", label="copy once (pinned H2D), then device memory")
    if h2d_gbps and nbytes:
        ax.plot(r, [k * nbytes / h2d_gbps / 1e6 for k in r], ls=":", color="gray",
                label=f"passes x bytes / pinned H2D rate ({h2d_gbps:.0f} GB/s)")
    ax.set_xlabel("passes over the data (kernel runs)")
    ax.set_ylabel("total time (ms)")
    ax.set_xticks(r)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax
