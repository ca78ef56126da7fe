"""Several GPUs of one host: peer access, peer copies, NCCL's all-reduce and the course's ring all-reduce.

Chapter 16 teaches these, the grader times a student's ring step in the same ring (autograder/ring.py), and
the benchmark suite records both: one driver serves all three, so what the lesson measures and what the
grader scores are the same ring.

The ring runs on *ranks*: rank r owns a buffer, a stream and a compiled kernel, all on one device. Ranks
are usually one per GPU, but any list of devices works, so ``ranks_on([0, 0, 0, 0])`` simulates a ring of
four on one GPU (each rank still has its own stream, and the same events order the steps), which is how a
student with one GPU checks a ring kernel. The arithmetic (chunks, steps, bus bandwidth) runs on a CPU; the rest needs a GPU. Nothing
here touches CUDA at import time; NCCL is imported only when used.
"""
from __future__ import annotations

import functools
import os

import numpy as np

from ._timing import benchmark

__all__ = ["ring_chunk", "ring_chunk_bounds", "ring_schedule", "ring_bytes", "bus_bandwidth", "algorithm_bandwidth",
           "gpu_count", "devices", "peer_matrix", "enable_peer_access", "ring_problem", "Ranks", "ranks_on", "load_kernel",
           "ring_allreduce", "copy_ring_allreduce", "nccl_available", "nccl_comms", "nccl_allreduce", "fill_ranks",
           "host_sum", "check_allreduce", "copy_bandwidth_matrix", "NCCL_ENV"]

NCCL_ENV = {"NCCL_NVLS_ENABLE": "0"}
"""Set before NCCL starts: NVLink multicast (NVLS) stays off, so a collective uses the links the lesson measures."""


# --- the arithmetic of the ring (CPU) --------------------------------------------------------------

def ring_chunk(n: int, world: int) -> int:
    """Elements per chunk: ceil(n / world) rounded up to a multiple of 4, so every chunk starts 16-byte aligned
    and a kernel may load it as float4."""
    if n < 0 or world < 1:
        raise ValueError(f"need n >= 0 and world >= 1; got n={n}, world={world}")
    return (-(-n // world) + 3) // 4 * 4


def ring_chunk_bounds(n: int, world: int, c: int) -> tuple:
    """[lo, hi) of chunk ``c``; the last chunks may be short or empty (lo == hi)."""
    size = ring_chunk(n, world)
    lo = min(n, c * size)
    return lo, min(n, lo + size)


def ring_schedule(world: int) -> list:
    """Every step of the ring: (step, rank, chunk, "add" or "copy"). In step s rank r works on chunk
    (r - s - 1) mod world, reading it from rank r - 1: the first world - 1 steps add (reduce-scatter), the
    last world - 1 copy (all-gather)."""
    return [(s, r, (r - s - 1) % world, "add" if s < world - 1 else "copy")
            for s in range(2 * (world - 1)) for r in range(world)]


def ring_bytes(nbytes: int, world: int) -> float:
    """Bytes each rank receives in a ring all-reduce of ``nbytes``: 2 (world - 1) / world x nbytes."""
    return 2 * (world - 1) / world * nbytes


def algorithm_bandwidth(nbytes: int, ms: float) -> float:
    """GB/s of the buffer itself: nbytes over the time (NCCL's *algbw*)."""
    return nbytes / (ms * 1e6)


def bus_bandwidth(nbytes: int, ms: float, world: int) -> float:
    """GB/s each link carried (NCCL's *busbw*): algbw x 2 (world - 1) / world. It does not depend on the number
    of GPUs for an ideal ring, so it compares with a link's copy bandwidth."""
    return ring_bytes(nbytes, world) / (ms * 1e6)


# --- devices and peers -----------------------------------------------------------------------------

def gpu_count() -> int:
    """GPUs this process sees (0 without a usable GPU or CuPy)."""
    try:
        import cupy
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no driver, no CuPy: no GPU, never an error
        return 0


def devices() -> list:
    """One dict per GPU: index, name, cc, memory_gib, sms, pci_bus_id."""
    import cupy
    out = []
    for i in range(gpu_count()):
        p = cupy.cuda.runtime.getDeviceProperties(i)
        out.append({"index": i, "name": p["name"].decode(), "cc": (p["major"], p["minor"]),
                    "memory_gib": round(p["totalGlobalMem"] / 2**30, 1), "sms": p["multiProcessorCount"],
                    "pci_bus_id": cupy.cuda.Device(i).pci_bus_id})
    return out


def peer_matrix(n: int | None = None) -> np.ndarray:
    """m[i, j] True when device i can read and write device j's memory directly (cudaDeviceCanAccessPeer)."""
    import cupy
    n = gpu_count() if n is None else n
    m = np.eye(n, dtype=bool)
    for i in range(n):
        for j in range(n):
            if i != j:
                m[i, j] = bool(cupy.cuda.runtime.deviceCanAccessPeer(i, j))
    return m


_ENABLED: set = set()   # (from, to) pairs this process enabled: asking twice is an error CUDA remembers


def enable_peer_access(devs=None, pairs=None) -> None:
    """Let each listed device reach each other one's memory (``pairs``: only these (from, to) pairs), as a kernel
    that reads a peer's buffer needs; cudaMemcpyPeer works without it, through the host when the link cannot do
    it directly. A GPU can have at most 8 peers enabled, so a ring enables only its neighbours."""
    import cupy
    if pairs is None:
        devs = sorted(set(range(gpu_count()) if devs is None else devs))
        pairs = [(i, j) for i in devs for j in devs]
    for i, j in pairs:
        if i == j or (i, j) in _ENABLED or not cupy.cuda.runtime.deviceCanAccessPeer(i, j):
            continue
        with cupy.cuda.Device(i):
            try:
                cupy.cuda.runtime.deviceEnablePeerAccess(j)
            except cupy.cuda.runtime.CUDARuntimeError as exc:   # enabled before, by CuPy or another library
                if "AlreadyEnabled" not in str(exc) and "already" not in str(exc).lower():
                    raise
        _ENABLED.add((i, j))


def ring_problem(world: int = 2) -> str:
    """'' when the first ``world`` GPUs can run the ring and its NCCL anchor, else why not: too few GPUs, a
    neighbour that cannot reach the next one's memory (a PCIe topology without peer access), or no NCCL."""
    count = gpu_count()
    if count < world:
        return f"needs {world} GPUs of one host (this machine has {count})"
    import cupy
    for r in range(world):
        left = (r - 1) % world
        if not cupy.cuda.runtime.deviceCanAccessPeer(r, left):
            return (f"GPU {r} cannot reach GPU {left}'s memory (no peer access between them: check nvidia-smi topo -m; "
                    "a ring kernel reads its neighbour's buffer directly)")
    if not nccl_available():
        return "NCCL is not installed (pip install nvidia-nccl-cu13, or -cu12 for a CUDA 12 driver)"
    return ""


class Ranks:
    """The ranks of a ring: a device, a non-blocking stream and a kernel per rank, and events for the
    barrier between steps. ``fork()`` makes every rank's stream wait for the current stream's work so far,
    ``join()`` the current stream for every rank's: so a whole ring run sits between two events of the
    caller's stream (the timer's, in `course.benchmark`)."""

    def __init__(self, device_ids, kernels=None):
        import cupy
        self.devices = list(device_ids)
        self.world = len(self.devices)
        enable_peer_access(pairs=[(self.devices[r], self.devices[r - 1]) for r in range(self.world)]
                           + [(self.devices[r - 1], self.devices[r]) for r in range(self.world)])
        self.streams = []
        for d in self.devices:
            with cupy.cuda.Device(d):
                self.streams.append(cupy.cuda.Stream(non_blocking=True))
        self.kernels = list(kernels) if kernels is not None else [None] * self.world
        self._events = {}
        self._forked = None   # the last fork's event (copy_ring_allreduce's copy streams wait for it too)
        self.copy_streams = None   # copy_ring_allreduce's second stream per rank, made when first needed

    def event(self, key, r: int, device: int | None = None):
        """The event ``key`` of rank r, made on rank r's device (or ``device``): an event is recorded only on a
        stream of the device it was made on, and waited for from any."""
        import cupy
        d = self.devices[r] if device is None else device
        if (key, r, d) not in self._events:
            with cupy.cuda.Device(d):
                self._events[key, r, d] = cupy.cuda.Event(disable_timing=True)
        return self._events[key, r, d]

    def fork(self) -> None:
        import cupy
        here = cupy.cuda.Device().id   # the caller's stream is on the current device
        e = self.event("fork", 0, here)
        e.record(cupy.cuda.get_current_stream())
        for s in self.streams:
            s.wait_event(e)
        self._forked = e

    def join(self) -> None:
        import cupy
        cur = cupy.cuda.get_current_stream()
        for r, s in enumerate(self.streams):
            e = self.event("join", r)
            with cupy.cuda.Device(self.devices[r]):
                e.record(s)
            cur.wait_event(e)

    def barrier(self, key) -> None:
        """Between two steps: every rank's stream waits until its left neighbour has finished the step.

        That is all a ring needs. The next step reads what the left rank wrote in this one (read after write).
        And no rank can overwrite a chunk its right neighbour is still reading: the waits chain around the ring,
        so when rank r starts step s + 1, rank r + 1 has finished step s + 2 - world, and the chunk rank r writes
        in step s + 1 is the one rank r + 1 read in that step (with two ranks the left neighbour is the right
        one, waited for directly)."""
        import cupy
        done = []
        for r, s in enumerate(self.streams):
            e = self.event(key, r)
            with cupy.cuda.Device(self.devices[r]):
                e.record(s)
            done.append(e)
        for r, s in enumerate(self.streams):
            if self.world > 1:
                s.wait_event(done[(r - 1) % self.world])

    def sync(self) -> None:
        for s in self.streams:
            s.synchronize()


def ranks_on(device_ids, kernel=None) -> Ranks:
    """A `Ranks` on these devices (repeat one to simulate several ranks on it), with ``kernel`` (a compiled
    `course.Kernel` or `course.Module` plus name via `load_kernel`) loaded on each device once."""
    kernels = None
    if kernel is not None:
        loaded = {}
        kernels = []
        for d in device_ids:
            if d not in loaded:
                loaded[d] = load_kernel(kernel, d)
            kernels.append(loaded[d])
    return Ranks(device_ids, kernels)


def load_kernel(kernel, device: int):
    """The same compiled kernel loaded on ``device`` (a module lives on the GPU it was loaded on)."""
    import cupy

    from ._launch import Module
    with cupy.cuda.Device(device):
        if cupy.cuda.Device().id == _device_of(kernel):
            return kernel
        return Module(kernel.module.program).kernel(kernel.name)


def _device_of(kernel) -> int:
    return getattr(kernel.module, "device_id", 0)


# --- the rings ----------------------------------------------------------------------------------------

def ring_allreduce(ranks: Ranks, bufs, *, block: int = 512, grid: int | None = None) -> None:
    """Sum ``bufs`` (one float array per rank, on its device) in place with the ranks' ring-step kernels:
    2 (world - 1) steps, each a kernel on every rank reading its left neighbour's buffer, then a barrier.
    Enqueued between a fork from and a join into the current stream; nothing waits on the host."""
    import cupy
    world, n = ranks.world, int(bufs[0].size)
    if world == 1:
        return
    # the arguments converted once: with 2 (world - 1) x world launches a run, the host must stay ahead of GPUs
    # that finish a step in a fraction of a millisecond
    launches = []
    for r in range(world):
        k = ranks.kernels[r]
        k.convert_args((bufs[r], bufs[(r - 1) % world], n, r, world, 0))   # the signature's check, once
        g = (int(grid or _grid(ranks.devices[r], n // world, block)), 1, 1)
        launches.append((k._fn, g, (bufs[r], bufs[(r - 1) % world], np.int32(n), np.int32(r), np.int32(world))))
    ranks.fork()
    for s in range(2 * (world - 1)):
        step = np.int32(s)
        for r, (fn, g, args) in enumerate(launches):
            with cupy.cuda.Device(ranks.devices[r]):
                fn(g, (block, 1, 1), (*args, step), stream=ranks.streams[r])
        if s < 2 * (world - 1) - 1:
            ranks.barrier(("step", s))
    ranks.join()


def _grid(device: int, items: int, block: int) -> int:
    """Enough blocks to fill the GPU a few times over (a grid-stride loop does the rest)."""
    return max(1, min(-(-max(items, 1) // (4 * block)), 8 * _sm_count(device)))


@functools.lru_cache(maxsize=None)
def _sm_count(device: int) -> int:
    # asked once: reading a device's attributes takes longer than a ring step's launch, and a host that falls
    # behind leaves the GPUs idle between the steps
    import cupy
    return int(cupy.cuda.runtime.deviceGetAttribute(cupy.cuda.runtime.cudaDevAttrMultiProcessorCount, device))


def copy_ring_allreduce(ranks: Ranks, bufs, scratch, add_kernels, *, pieces: int = 1, block: int = 512) -> None:
    """The ring with copies: each step copies the chunk from the left rank into ``scratch`` (cudaMemcpyPeerAsync,
    the copy engines), then ``add_kernels[r]`` (``add_into(acc, x, n)``) adds it; all-gather steps copy
    straight into the buffer. ``pieces`` > 1 cuts every chunk into pieces on two streams per rank, so the copy
    of piece p + 1 overlaps the addition of piece p."""
    import cupy
    world, n = ranks.world, int(bufs[0].size)
    if world == 1:
        return
    item = bufs[0].itemsize
    if ranks.copy_streams is None:   # made once: a second stream per rank for the copies
        ranks.copy_streams = []
        for d in ranks.devices:
            with cupy.cuda.Device(d):
                ranks.copy_streams.append(cupy.cuda.Stream(non_blocking=True))
    copy_streams = ranks.copy_streams
    ranks.fork()
    for r in range(world):  # the copy streams start after the fork too
        copy_streams[r].wait_event(ranks._forked)
    for s in range(2 * (world - 1)):
        for r in range(world):
            left, c = (r - 1) % world, (r - s - 1) % world
            lo, hi = ring_chunk_bounds(n, world, c)
            if lo == hi:
                continue
            dev, dl = ranks.devices[r], ranks.devices[left]
            cs, ks = copy_streams[r], ranks.streams[r]
            step = max(1, -(-(hi - lo) // pieces))
            with cupy.cuda.Device(dev):
                for p, a in enumerate(range(lo, hi, step)):
                    b = min(hi, a + step)
                    if s >= world - 1:  # all-gather: straight into the buffer
                        cupy.cuda.runtime.memcpyPeerAsync(bufs[r].data.ptr + a * item, dev, bufs[left].data.ptr
                                                          + a * item, dl, (b - a) * item, cs.ptr)
                        continue
                    cupy.cuda.runtime.memcpyPeerAsync(scratch[r].data.ptr + a * item, dev, bufs[left].data.ptr
                                                      + a * item, dl, (b - a) * item, cs.ptr)
                    e = ranks.event(("piece", s, p), r)
                    e.record(cs)
                    ks.wait_event(e)
                    add_kernels[r](max(1, min(-(-(b - a) // (4 * block)), 1024)), block, bufs[r][a:b],
                                   scratch[r][a:b], np.int32(b - a), stream=ks)
                ks.wait_event(_recorded(ranks, ("copied", s), r, cs))
        ranks.barrier(("step", s))
        for r in range(world):  # the next step's copies read what every rank wrote in this one
            for q in range(world):
                copy_streams[r].wait_event(ranks.event(("step", s), q))
    ranks.join()


def _recorded(ranks: Ranks, key, r: int, stream):
    import cupy
    e = ranks.event(key, r)
    with cupy.cuda.Device(ranks.devices[r]):
        e.record(stream)
    return e


# --- NCCL -----------------------------------------------------------------------------------------------

def nccl_available() -> bool:
    """True when CuPy's NCCL bindings import and find the library."""
    try:
        from cupy.cuda import nccl
        return bool(getattr(nccl, "available", True)) and nccl.get_version() > 0
    except Exception:  # noqa: BLE001
        return False


_COMMS = {}


def nccl_comms(device_ids):
    """One NCCL communicator per device, from one process (ncclCommInitAll), kept for the session."""
    key = tuple(device_ids)
    if key not in _COMMS:
        os.environ.update(NCCL_ENV)   # before NCCL's first communicator of the process, which reads it
        from cupy.cuda import nccl
        _COMMS[key] = nccl.NcclCommunicator.initAll(list(device_ids))
    return _COMMS[key]


_NCCL_TYPES = {"float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64", "int32": "NCCL_INT32", "float16": "NCCL_FLOAT16"}


def nccl_allreduce(ranks: Ranks, bufs, comms=None) -> None:
    """NCCL's sum all-reduce of ``bufs`` in place, one call per rank inside a group (one process drives every
    GPU), on the ranks' streams between a fork and a join like `ring_allreduce`."""
    import cupy
    from cupy.cuda import nccl
    comms = comms or nccl_comms(ranks.devices)
    dtype = getattr(nccl, _NCCL_TYPES[str(bufs[0].dtype)])
    ranks.fork()
    nccl.groupStart()
    for r, (c, b) in enumerate(zip(comms, bufs)):
        with cupy.cuda.Device(ranks.devices[r]):
            c.allReduce(b.data.ptr, b.data.ptr, b.size, dtype, nccl.NCCL_SUM, ranks.streams[r].ptr)
    nccl.groupEnd()
    ranks.join()


# --- data, checks and measurements ------------------------------------------------------------------

def fill_ranks(ranks: Ranks, n: int, *, seed: int = 0, integers: bool = False, dtype="float32") -> list:
    """One array of ``n`` values per rank on its device: uniform in [-1, 1), or small integers (exact sums)."""
    import cupy
    out = []
    for r, d in enumerate(ranks.devices):
        with cupy.cuda.Device(d):
            rng = cupy.random.default_rng(seed * 1009 + r)
            if integers:
                out.append(rng.integers(-1000, 1000, size=n, dtype=cupy.int32).astype(dtype))
            else:
                out.append((rng.random(n, dtype=cupy.float32) * 2 - 1).astype(dtype))
    return out


def host_sum(bufs) -> np.ndarray:
    """The element-wise sum of every rank's buffer, in float64 on the host: what an all-reduce of them must give
    (take it before the all-reduce overwrites them)."""
    import cupy
    return np.sum([cupy.asnumpy(b).astype(np.float64) for b in bufs], axis=0)


def check_allreduce(inputs_sum, bufs, *, exact: bool = False, rtol: float = 1e-5) -> str:
    """'' when every rank's buffer equals ``inputs_sum`` (an array on device 0 or the host), else where not."""
    import cupy
    want = cupy.asnumpy(inputs_sum).astype(np.float64)
    scale = max(float(np.abs(want).max()) if want.size else 1.0, 1.0)
    for r, b in enumerate(bufs):
        got = cupy.asnumpy(b).astype(np.float64)
        bad = got != want if exact else ~(np.abs(got - want) <= rtol * scale)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            return (f"rank {r}: {int(bad.sum())} of {got.size} values wrong, first at [{i}]: {got[i]!r}, expected "
                    f"{want[i]!r}" + (" (exact: integer data)" if exact else f" (within {rtol:g} x {scale:g})"))
    return ""


def copy_bandwidth_matrix(nbytes: int = 256 << 20, devs=None) -> np.ndarray:
    """GB/s of cudaMemcpyPeerAsync from device i (rows) to device j (columns), each timed with
    `course.benchmark` on the source's stream, both L2s flushed; the diagonal is a copy within one GPU."""
    import cupy
    devs = list(range(gpu_count())) if devs is None else list(devs)
    enable_peer_access(devs)
    bufs = {}
    for d in devs:
        with cupy.cuda.Device(d):
            bufs[d] = (cupy.zeros(nbytes, dtype=cupy.uint8), cupy.empty(nbytes, dtype=cupy.uint8))
    m = np.zeros((len(devs), len(devs)))
    for a, i in enumerate(devs):
        for b, j in enumerate(devs):
            with cupy.cuda.Device(i):
                def copy(i=i, j=j):
                    cupy.cuda.runtime.memcpyPeerAsync(bufs[j][1].data.ptr, j, bufs[i][0].data.ptr, i, nbytes,
                                                      cupy.cuda.get_current_stream().ptr)
                res = benchmark(copy, devices=sorted({i, j}), budget_s=0.5)
            m[a, b] = nbytes / (res.median_ms * 1e6)
    return m
