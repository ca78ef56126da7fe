"""Chapter 16 (several GPUs): peers, peer copies, NCCL's all-reduce and a ring all-reduce by hand.

The kernels live in the notebook's ``%%cuda`` cells (``peer_read``, ``ring_kernels``); the rings themselves are
`course.multi_gpu`'s, which the grader times too. Every all-reduce is checked (integer-valued data: exact sums)
before anything is timed, and every table has its anchor timed in the same run: a peer copy for a kernel that
reads a peer, NCCL's all-reduce for the rings. With one GPU the ring runs with all its ranks on that GPU (the
same steps, one after another), and the measured tables come from the benchmark suite's record.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np

import course
from course import multi_gpu as mg
from course.variants import Variant, compare

__all__ = ["CHAPTER", "lesson_kernels", "machine", "topology", "schedule_table", "simulate", "bandwidth_table",
           "plot_matrix", "peer_read_table", "allreduce_table", "allreduce_sweep", "plot_busbw", "overlap", "MIB"]

CHAPTER = "16_multi_gpu"
MIB = 1 << 20


def lesson_kernels(names, given=None) -> dict:
    """name -> `course.Kernel` (from ``given``, else compiled from the lesson cell that defines it)."""
    have = dict(given) if isinstance(given, dict) else {k.name: k for k in given or ()}
    return {n: have[n] if n in have else course.lesson_cell(CHAPTER, n).kernel(n) for n in names}


# --- 1. the machine ---------------------------------------------------------------------------------

def machine() -> list:
    """One row per GPU (name, compute capability, memory, SMs, PCI bus) and which peers it can reach."""
    peers = mg.peer_matrix()
    return [{"GPU": d["index"], "name": d["name"], "cc": f"{d['cc'][0]}.{d['cc'][1]}", "GiB": d["memory_gib"],
             "SMs": d["sms"], "PCI": d["pci_bus_id"],
             "peer access to": ", ".join(str(j) for j in range(len(peers)) if j != d["index"] and peers[d["index"], j])
             or "none"} for d in mg.devices()]


def topology() -> str:
    """`nvidia-smi topo -m`: how each pair of GPUs is connected (NV# = # bonded NVLinks; PIX/PXB/PHB/NODE/SYS = PCIe
    paths, longer as they go); '' where nvidia-smi is missing."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return ""
    out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=30)
    return "\n".join(line for line in out.stdout.splitlines() if line.strip() and not line.startswith("Legend")
                     and not line.lstrip().startswith(("X ", "SYS ", "NODE ", "PHB ", "PXB ", "PIX ", "NV# ")))


# --- 2. the ring's schedule (CPU) -----------------------------------------------------------------------

def schedule_table(world: int = 4) -> list:
    """One row per step: what every rank does (``+c`` adds chunk c from its left neighbour, ``=c`` copies it)."""
    rows = {}
    for s, r, c, op in mg.ring_schedule(world):
        row = rows.setdefault(s, {"step": s, "phase": "reduce-scatter" if op == "add" else "all-gather"})
        row[f"rank {r}"] = ("+" if op == "add" else "=") + str(c)
    return list(rows.values())


def simulate(kernel, world: int, n: int, *, block: int = 256, one_per_thread: bool = False, seed: int = 0) -> str:
    """Run the ring with ``kernel`` on ``world`` ranks, every one on this GPU, on integer-valued floats; '' when
    every rank ends with the exact sum, else what is wrong."""
    import cupy
    ranks = mg.ranks_on([0] * world, kernel)
    bufs = mg.fill_ranks(ranks, n, seed=seed, integers=True)
    want = mg.host_sum(bufs)
    grid = _one_per_thread_grid(n, world, block) if one_per_thread else None
    mg.ring_allreduce(ranks, bufs, block=block, grid=grid)
    ranks.sync()
    return mg.check_allreduce(want, bufs, exact=True)


def _one_per_thread_grid(n: int, world: int, block: int) -> int:
    return max(1, -(-mg.ring_chunk(n, world) // block))


# --- 3. peer copies and peer loads --------------------------------------------------------------------

def bandwidth_table(nbytes: int = 256 * MIB) -> tuple:
    """(matrix of cudaMemcpyPeer GB/s, rows i -> j, the diagonal a copy within one GPU; GB/s of both directions of
    GPU 0 <-> GPU 1 at once) on this machine's GPUs."""
    import cupy
    m = mg.copy_bandwidth_matrix(nbytes)
    mg.enable_peer_access([0, 1])
    src0, dst0 = cupy.zeros(nbytes, dtype=cupy.uint8), cupy.empty(nbytes, dtype=cupy.uint8)
    with cupy.cuda.Device(1):
        src1, dst1 = cupy.zeros(nbytes, dtype=cupy.uint8), cupy.empty(nbytes, dtype=cupy.uint8)
        side = cupy.cuda.Stream(non_blocking=True)
        done = cupy.cuda.Event(disable_timing=True)   # recorded on GPU 1's stream: an event of GPU 1
    start = cupy.cuda.Event(disable_timing=True)      # recorded on GPU 0's

    def both():
        cur = cupy.cuda.get_current_stream()   # GPU 0's, the timer's: 0 -> 1 here, 1 -> 0 on GPU 1's side stream
        start.record(cur)
        side.wait_event(start)
        cupy.cuda.runtime.memcpyPeerAsync(dst1.data.ptr, 1, src0.data.ptr, 0, nbytes, cur.ptr)
        with cupy.cuda.Device(1):
            cupy.cuda.runtime.memcpyPeerAsync(dst0.data.ptr, 0, src1.data.ptr, 1, nbytes, side.ptr)
            done.record(side)
        cur.wait_event(done)
    r = course.benchmark(both, devices=[0, 1], budget_s=0.5)
    return m, 2 * nbytes / (r.median_ms * 1e6)


def plot_matrix(m, ax=None, title: str = "cudaMemcpyPeer, GB/s (rows: from, columns: to)"):
    import matplotlib.pyplot as plt
    ax = ax or plt.subplots(figsize=(1.2 * len(m) + 2.5, 1.1 * len(m) + 1.5))[1]
    im = ax.imshow(m, cmap="viridis")
    for i in range(len(m)):
        for j in range(len(m)):
            ax.text(j, i, f"{m[i][j]:.0f}", ha="center", va="center", color="w" if m[i][j] < np.max(m) / 2 else "k")
    ax.set_xticks(range(len(m)), [f"GPU {j}" for j in range(len(m))])
    ax.set_yticks(range(len(m)), [f"GPU {i}" for i in range(len(m))])
    ax.set_title(title)
    plt.colorbar(im, ax=ax)
    return ax


def peer_read_table(n: int = 64 * MIB, kernels=None, verbose: bool = True):
    """GPU 0 copies n floats from GPU 1 three ways: the copy engine (cudaMemcpyPeerAsync, the anchor), and
    ``read_peer`` on GPU 0's SMs with 16-byte and 4-byte loads; and, for scale, the same kernel reading GPU 0's own
    memory. Every row is checked first."""
    import cupy
    ks = lesson_kernels(("read_peer4", "read_peer1"), kernels)
    mg.enable_peer_access([0, 1])
    with cupy.cuda.Device(1):
        src = cupy.random.default_rng(16).random(n, dtype=cupy.float32)
    local = cupy.random.default_rng(17).random(n, dtype=cupy.float32)
    dst = cupy.empty(n, dtype=cupy.float32)
    sms = course.device_info().sm_count
    launches = {
        "cudaMemcpyPeerAsync (copy engine)": lambda: cupy.cuda.runtime.memcpyPeerAsync(
            dst.data.ptr, 0, src.data.ptr, 1, 4 * n, cupy.cuda.get_current_stream().ptr),
        "read_peer4 (SM loads, 16 bytes)": lambda: ks["read_peer4"](8 * sms, 512, dst, src, n // 4),
        "read_peer1 (SM loads, 4 bytes)": lambda: ks["read_peer1"](8 * sms, 512, dst, src, n),
        "read_peer4 on local memory": lambda: ks["read_peer4"](8 * sms, 512, dst, local, n // 4),
    }
    wants = {k: cupy.asnumpy(local if "local" in k else src) for k in launches}   # on the host: one check for all

    def check(name):
        def run():
            dst.fill(np.nan)
            launches[name]()
            cupy.cuda.Device(0).synchronize()
            return course.check(cupy.asnumpy(dst), wants[name], rtol=0, name=name)
        return run
    names = list(launches)
    return compare([Variant(k, launches[k], check=check(k)) for k in names[1:]],
                   anchors=[Variant(names[0], launches[names[0]], check=check(names[0]))], work=4 * n, unit="GB/s",
                   title=f"GPU 0 reads {4 * n // MIB} MiB from GPU 1", devices=[0, 1], verbose=verbose)


# --- 4. all-reduce: NCCL and the rings -----------------------------------------------------------------

def _rings(devs, n: int, kernels):
    import cupy
    ks = lesson_kernels(("add_into", "ring_step_1"), kernels)
    step = mg.ranks_on(devs, ks["ring_step_1"])
    copy = mg.ranks_on(devs)
    adds = [mg.load_kernel(ks["add_into"], d) for d in devs]
    scratch = []
    for d in devs:
        with cupy.cuda.Device(d):
            scratch.append(cupy.empty(n, dtype=cupy.float32))
    return step, copy, adds, scratch


def allreduce_table(nbytes: int = 256 * MIB, kernels=None, devs=None, pieces=(1, 8), extra=(), verbose: bool = True):
    """The all-reduce of ``nbytes`` per GPU over ``devs`` (default: every GPU): NCCL (the anchor), the copy ring
    (cudaMemcpyPeerAsync then ``add_into``) with its chunks in 1 and 8 pieces, and the direct ring with the
    lesson's ``ring_step_1``; ``extra`` adds (name, kernel, cfg) rows of ring-step kernels (the grader's
    reference, in the benchmark suite). Rates are bus bandwidths (GB/s); every row first sums integer-valued data
    and must be exact."""
    devs = list(range(mg.gpu_count())) if devs is None else list(devs)
    world, n = len(devs), nbytes // 4
    step, copy, adds, scratch = _rings(devs, n, kernels)
    nccl = mg.Ranks(devs)
    block = 512
    runs = {"NCCL all-reduce": (nccl, lambda b: mg.nccl_allreduce(nccl, b))}
    for p in pieces:
        runs[f"copy ring, {p} piece{'s' * (p > 1)} per chunk"] = (copy, lambda b, p=p: mg.copy_ring_allreduce(
            copy, b, scratch, adds, pieces=p, block=block))
    g1 = _one_per_thread_grid(n, world, block)
    runs["direct ring, ring_step_1"] = (step, lambda b: mg.ring_allreduce(step, b, block=block, grid=g1))
    for name, kernel, cfg in extra:
        r = mg.ranks_on(devs, kernel)
        runs[name] = (r, lambda b, r=r, cfg=cfg: mg.ring_allreduce(r, b, block=cfg["block"], grid=cfg["grid"]))
    bufs = {k: mg.fill_ranks(ranks, n, seed=3) for k, (ranks, _) in runs.items()}

    def check(name):
        ranks, run = runs[name]

        def go():
            b = mg.fill_ranks(ranks, n, seed=5, integers=True)
            want = mg.host_sum(b)
            run(b)
            ranks.sync()
            problem = mg.check_allreduce(want, b, exact=True)
            if problem:
                raise course.CheckError(problem)
            return True
        return go
    variants = [Variant(k, (lambda k=k: runs[k][1](bufs[k])), check=check(k)) for k in runs]
    return compare(variants[1:], anchors=variants[:1], work=mg.ring_bytes(nbytes, world), unit="GB/s",
                   title=f"all-reduce of {nbytes // MIB} MiB per GPU on {world} GPUs (bus bandwidth)", devices=devs,
                   verbose=verbose)


def allreduce_sweep(kernels=None, record: bool | None = None):
    """The widget: bus bandwidth against MiB per GPU, a slider for NCCL, the copy ring (8 pieces) and the direct
    ring (``ring_step_1``)."""
    from course.widgets import sweep
    state = {}

    def run(mib, how):
        import cupy
        devs = list(range(mg.gpu_count()))
        if len(devs) < 2:
            raise ValueError("needs two GPUs")
        n = mib * MIB // 4
        key = (n, how)
        if key not in state:
            state.clear()
            cupy.get_default_memory_pool().free_all_blocks()
            step, copy, adds, scratch = _rings(devs, n, kernels)
            ranks = {"NCCL": mg.Ranks(devs), "copy ring, 8 pieces": copy, "direct ring, ring_step_1": step}[how]
            b = mg.fill_ranks(ranks, n, seed=1)
            fn = {"NCCL": lambda: mg.nccl_allreduce(ranks, b),
                  "copy ring, 8 pieces": lambda: mg.copy_ring_allreduce(copy, b, scratch, adds, pieces=8),
                  "direct ring, ring_step_1": lambda: mg.ring_allreduce(
                      step, b, block=512, grid=_one_per_thread_grid(n, len(devs), 512))}[how]
            state[key] = fn
        r = course.benchmark(state[key], devices=list(range(mg.gpu_count())), budget_s=0.5, min_samples=10)
        return mg.bus_bandwidth(mib * MIB, r.median_ms, mg.gpu_count())
    return sweep(run, {"MiB per GPU": [1, 4, 16, 64, 256, 1024], "how": ["NCCL", "copy ring, 8 pieces",
                                                                     "direct ring, ring_step_1"]},
                 metric="bus bandwidth, GB/s (median)", name="16_multi_gpu_allreduce", logx=True,
                 title="all-reduce: bus bandwidth against size", record=record, live=mg.gpu_count() >= 2)


def plot_busbw(sw, peak_gbps: float | None = None, ax=None):
    """The sweep's three curves against the link: a peer copy's GB/s (``peak_gbps``, measured in section 2; by
    default the recorded GPU 0 -> GPU 1 copy), the ceiling a bus bandwidth cannot pass."""
    import course.plots
    import course.results
    if peak_gbps is None:
        rows, _gpu, _ceil = course.results.recorded_rows(CHAPTER, "peer copy GPU 0 -> GPU 1, 256 MiB")
        peak_gbps = rows[0]["value"] if rows else None
    mib = sw.params["MiB per GPU"]
    series = {how: [np.nan if v is None else v for _x, v in sw.curve(progress=False, how=how)] for how in sw.params["how"]}
    return course.plots.bandwidth_curve([m * MIB for m in mib], series, peak_gbps=peak_gbps,
                                        peak_label="peer copy GPU 0 -> GPU 1", ax=ax,
                                        title="all-reduce bus bandwidth against the link")


# --- 5. overlapping communication with compute ------------------------------------------------------------

def overlap(nbytes: int = 256 * MIB, size: int = 8192, reps: int = 4) -> dict:
    """A data-parallel step on every GPU: ``reps`` float32 products of size x size on a compute stream, and an
    all-reduce of ``nbytes`` (the "gradients") on a communication stream. Milliseconds of each alone and of both
    at once, and how much of the shorter one the overlap hid (1: all of it)."""
    import cupy
    devs = list(range(mg.gpu_count()))
    ranks = mg.Ranks(devs)
    grads = mg.fill_ranks(ranks, nbytes // 4, seed=7)
    work = mg.Ranks(devs)   # a second stream per GPU, for the products
    mats = []
    for d in devs:
        with cupy.cuda.Device(d):
            a = cupy.random.default_rng(d).random((size, size), dtype=cupy.float32)
            mats.append((a, a.copy(), cupy.empty_like(a)))

    def products(join=True):
        work.fork()
        for d, (a, b, c), stream in zip(devs, mats, work.streams):
            with cupy.cuda.Device(d), stream:
                for _ in range(reps):
                    cupy.matmul(a, b, out=c)
        if join:
            work.join()

    def both():
        # both fork from the same point of the timer's stream; joining the products only after the all-reduce
        # was enqueued keeps the timer's stream from ordering one after the other
        products(join=False)
        mg.nccl_allreduce(ranks, grads)
        work.join()
    t = course.interleaved({"compute": products, "all-reduce": lambda: mg.nccl_allreduce(ranks, grads),
                            "both": both}, devices=devs, budget_s=1.0)
    c, a, b = (t[k].median_ms for k in ("compute", "all-reduce", "both"))
    return {"compute_ms": c, "allreduce_ms": a, "both_ms": b, "serial_ms": c + a,
            "hidden": max(0.0, min(1.0, (c + a - b) / min(c, a)))}
