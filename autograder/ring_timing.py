"""The speed step of a ring exercise (autograder/ring.py): the student's ring all-reduce against NCCL's.

Runs in the run child, after every size case passed, on the spec's `gpus` GPUs (the first ones of the machine,
whatever it has: the thresholds hold for that many, and a ring's launches grow with the square of the ranks,
which more GPUs would make a test of the host's launch rate). Three callables are timed
interleaved by the course's one timer (`course.interleaved`, every GPU's L2 flushed before each sample):
the ring of `course.multi_gpu.ring_allreduce` with the student's kernel on every rank, NCCL's all-reduce of
the same bytes (the anchor: the ratio is NCCL's time over the student's), and the same ring with the
reference kernel (context only). As in the single-GPU speed step (timing.py):

- every timed run sees inputs it has never seen: between samples, outside the timed region, each rank's
  buffer is refilled from two pools of generator values at hashed positions (device_ops.fresh_gather);
- every timed student run is checked: the expected sum (float64, over every rank's inputs, on GPU 0) waits
  XOR-masked while the student's kernels run, then every rank's result is compared with it;
- the first runs use integer-valued data, whose sums are exact in any order, and must match bit for bit;
  the timed runs use the exercise's floats and the course's tolerance for a sum of ``world`` values;
- a kernel faster than moving the ring's bytes through GPU 0's own memory is flagged impossible.

NCCL's communicators are made, and its channels connected, before the child closes its file system
(`before_confinement`), with NVLink multicast off (`course.multi_gpu.NCCL_ENV`).
"""
from __future__ import annotations

import os

import numpy as np

from . import policy
from .buffers import draw
from .cuda_errors import classify_cuda_error
from .device import backend, gpu_sections
from .device_ops import count_bad, count_differ, fresh_gather, xor_mask
from .ring import gpus_needed
from .timing import POOL_VALUES, TIMING_BUDGET_S, TIMING_MAX_SAMPLES, WrongWhileTimed, decide, speed_record, timed_pass

__all__ = ["before_confinement", "ring_timing_step", "RING_RTOL", "RING_ATOL"]

RING_RTOL, RING_ATOL = 1e-5, 1e-5   # a float32 sum of at most 8 values in [-1, 1), in any order: errors ~1e-6
_STATE: dict = {}


def before_confinement(ex) -> None:
    """Peer access and NCCL's communicators with every channel connected (NCCL reads the topology from /sys
    and /proc when it starts), while the child may still open files; nothing when the GPUs are too few."""
    from course import multi_gpu as mg
    if mg.gpu_count() < gpus_needed(ex):
        return
    os.environ.update({**mg.NCCL_ENV, "NCCL_RUNTIME_CONNECT": "0"})
    # exactly the spec's number of GPUs, whatever the machine has: the thresholds are set on that many, and
    # the ring's launches grow with the square of the ranks
    devs = list(range(gpus_needed(ex)))
    try:
        ranks = mg.Ranks(devs)
        comms = mg.nccl_comms(devs)
        import cupy
        bufs = []
        for d in devs:
            with cupy.cuda.Device(d):
                bufs.append(cupy.ones(1 << 20, dtype=cupy.float32))
        for _ in range(2):   # the large-message protocols too: 4 MiB moves through the same channels as 256 MiB
            mg.nccl_allreduce(ranks, bufs, comms)
        ranks.sync()
    except Exception as exc:   # the speed step says so; the size cases still run
        _STATE["error"] = f"NCCL could not start on GPUs {devs}: {type(exc).__name__}: {exc}"
        return
    _STATE.update(comms=comms, devs=devs)


class _Ring:
    """One ring's buffers and pools, and for the student's the masked expected sum on GPU 0."""

    def __init__(self, cp, ranks, n: int, pools: list, rng):
        self.cp, self.ranks, self.n, self.rng = cp, ranks, n, rng
        self.bufs, self.pools = [], []
        for r, d in enumerate(ranks.devices):
            with cp.cuda.Device(d):
                self.bufs.append(cp.empty(n, dtype=cp.float32))
                self.pools.append(None)
        self.set_pools(pools)

    def set_pools(self, pools) -> None:
        for r, d in enumerate(self.ranks.devices):
            with self.cp.cuda.Device(d):
                self.pools[r] = tuple(self.cp.asarray(p) for p in pools[r])

    def fill(self) -> None:
        for r, d in enumerate(self.ranks.devices):
            with self.cp.cuda.Device(d):
                fresh_gather(self.bufs[r], *self.pools[r], int(self.rng.integers(1 << 63)))
                self.cp.cuda.Device(d).synchronize()

    def gather(self, r: int, dst) -> None:
        """Rank r's buffer into ``dst`` on GPU 0, on GPU 0's current stream (the timer's, inside a measurement),
        so the additions and counts after it see the copy (cudaMemcpyPeer would go to the legacy stream, which
        a non-blocking stream does not wait for)."""
        cp = self.cp
        with cp.cuda.Device(0):
            cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, 0, self.bufs[r].data.ptr, self.ranks.devices[r], self.n * 4,
                                            cp.cuda.get_current_stream().ptr)


class _Checked:
    """The expected sum of a ring's current inputs, masked on GPU 0 until the student's ring has run."""

    def __init__(self, cp, ring: _Ring, rng):
        self.cp, self.ring, self.rng = cp, ring, rng
        with cp.cuda.Device(0):
            self.tmp = cp.empty(ring.n, dtype=cp.float32)
            self.acc = cp.empty(ring.n, dtype=cp.float64)
            self.want = cp.empty(ring.n, dtype=cp.float32)
        self.seed = 0

    def expect(self) -> None:
        cp = self.cp
        with cp.cuda.Device(0):
            self.acc.fill(0)
            for r in range(self.ring.ranks.world):
                self.ring.gather(r, self.tmp)
                self.acc += self.tmp
            self.want[...] = self.acc
            self.acc.fill(0)   # the answer stays only in its masked copy
            self.seed = int(self.rng.integers(1 << 62))
            xor_mask(self.want, self.seed)
            cp.cuda.Device(0).synchronize()   # masked, and the clear copies zeroed, before any student kernel runs

    def check(self, exact: bool) -> str:
        cp = self.cp
        with cp.cuda.Device(0):
            xor_mask(self.want, self.seed)
            try:
                for r in range(self.ring.ranks.world):
                    self.ring.gather(r, self.tmp)
                    bad = count_differ(self.tmp, self.want) if exact else count_bad(self.tmp, self.want, RING_RTOL,
                                                                                    RING_ATOL)
                    if bad:
                        got, want = cp.asnumpy(self.tmp), cp.asnumpy(self.want)
                        wrong = (got != want) if exact else ~(np.abs(got.astype(np.float64) - want) <=
                                                             RING_ATOL + RING_RTOL * np.abs(want))
                        i = int(np.flatnonzero(wrong)[0]) if wrong.any() else 0
                        return (f"GPU {r} holds {int(bad)} wrong values of {self.ring.n}; first at [{i}]: {got[i]!r}, "
                                f"expected {want[i]!r}" + (" (integer-valued data: the sum is exact in any order)"
                                                           if exact else ""))
                return ""
            finally:
                self.want.fill(0)


def ring_timing_step(ctx) -> dict:
    """Time the student's ring, NCCL and the reference ring interleaved; check every timed student run."""
    _, alone = gpu_sections(ctx)
    with alone():   # the ring's GPUs are busy for the whole step
        return _ring_timing(ctx)


def _ring_timing(ctx) -> dict:
    import cupy as cp

    from course import multi_gpu as mg

    be = backend()
    ex = ctx.ex
    if _STATE.get("error"):
        return {"status": "grader error", "message": _STATE["error"]}
    devs = _STATE.get("devs") or list(range(gpus_needed(ex)))
    world, n = len(devs), ex.ring.nbytes // 4
    sizes = {"n": n, "world": world}
    label = f"the ring all-reduce of {ex.ring.nbytes / 2**20:g} MiB per GPU over {world} GPUs"
    base = {"sizes": sizes}
    try:
        geo_s = ctx.geometry(sizes, ctx.cfg)
        geo_r = ctx.geometry(sizes, ex.launch_defaults)
    except Exception as exc:
        return {**base, "status": "failed", "message": f"the launch configuration {ctx.cfg} does not work at {label}: {exc}"}
    be.free_cached()
    rng = np.random.default_rng([ctx.seed, 30_000])
    gen = next(p for p in ex.params if p.name == "mine").gen
    k = min(n, POOL_VALUES)
    floats = [tuple(draw(gen, rng, (k,), np.float32) for _ in range(2)) for _ in devs]
    ints = [tuple(rng.integers(-1000, 1000, size=k).astype(np.float32) for _ in range(2)) for _ in devs]

    def ranks_for(kernel):
        return mg.Ranks(devs, [kernel] + [mg.load_kernel(kernel, d) for d in devs[1:]])

    student, reference, nccl = ranks_for(ctx.student), ranks_for(ctx.reference), mg.Ranks(devs)
    rings = {"student": _Ring(cp, student, n, ints, rng), "nccl": _Ring(cp, nccl, n, ints, rng),
             "reference": _Ring(cp, reference, n, ints, rng)}
    checked = _Checked(cp, rings["student"], rng)
    comms = _STATE.get("comms") or mg.nccl_comms(devs)

    def launch(who):
        bufs = rings[who].bufs
        if who == "nccl":
            return mg.nccl_allreduce(nccl, bufs, comms)
        geo = geo_s if who == "student" else geo_r
        mg.ring_allreduce(student if who == "student" else reference, bufs, grid=_int(geo[0]), block=_int(geo[1]))

    # the anchors first, on integer data: a wrong sum here is the grader's fault
    for who in ("reference", "nccl"):
        r = rings[who]
        r.fill()
        probe = _Checked(cp, r, rng)
        probe.expect()
        t0 = be.time_ms(lambda who=who: launch(who))
        problem = probe.check(exact=True)
        if problem:
            return {**base, "status": "grader error", "message": f"the {who} all-reduce is wrong at {label}: {problem}"}
        ref_s = t0 / 1e3
    for i in range(2):   # the student's first runs, one by one, on integer data: exact
        rings["student"].fill()
        checked.expect()
        ctx.arm(policy.timeout_for(ex.timeout_s, ref_s), f"your kernel in {label}")
        try:
            launch("student")
            student.sync()   # every GPU's stream first: a fault on any GPU shows here as the crash it is
            for d in devs:
                cp.cuda.Device(d).synchronize()
        except Exception as exc:
            return {**base, **classify_cuda_error(exc, label, geo_s)}
        problem = checked.check(exact=True)
        if problem:
            return {**base, "status": "failed", "message": f"wrong sum from {label}. {problem}"}
    for r in rings.values():   # from now on the exercise's floats
        r.set_pools(floats)

    copy_ms = []
    half = int(mg.ring_bytes(ex.ring.nbytes, world)) // 2
    src, dst = cp.zeros(half, dtype=cp.uint8), cp.empty(half, dtype=cp.uint8)
    fns = {"student": lambda: launch("student"), "reference": lambda: launch("nccl"),
           "ring_reference": lambda: launch("reference"), "copy": be.copy_fn(dst, src)}
    names = {"reference": "nccl", "ring_reference": "reference"}

    def on_sample(name, i):
        if name == "copy":
            return
        if name == "student":
            problem = checked.check(exact=False)
            if problem:
                raise WrongWhileTimed(f"timed run {i + 1}: {problem}")
            rings["student"].fill()
            checked.expect()
        else:
            rings[names[name]].fill()

    extra = {}

    def measure():
        for r in rings.values():
            r.fill()
        checked.expect()
        res = timed_pass(be, fns, on_sample, copy_ms, devices=devs)
        extra.setdefault("ring_ref", []).extend(res["ring_reference"].samples_ms)
        return res["student"].samples_ms, res["reference"].samples_ms

    ctx.arm(policy.MAX_ROUNDS * (TIMING_BUDGET_S * 4 + 6 * TIMING_MAX_SAMPLES * ref_s) + 120
            + policy.timeout_for(ex.timeout_s, ref_s), f"your kernel while being timed in {label}")
    d, failed = decide(ctx, measure, base, label, geo_s, (
        "your ring gave a wrong sum while being timed ({}). Every timed run gets new inputs and every GPU's result "
        "is checked."))
    if failed:
        return failed
    busbw = {who: mg.bus_bandwidth(ex.ring.nbytes, ms, world) for who, ms in
             (("yours", d.student_ms), ("NCCL", d.reference_ms), ("the reference ring", float(np.median(extra["ring_ref"]))))}
    note = (f"the reference here is NCCL's all-reduce of the same {ex.ring.nbytes / 2**20:g} MiB per GPU on the same "
            f"{world} GPUs; bus bandwidth: " + ", ".join(f"{k} {v:.0f} GB/s" for k, v in busbw.items()))
    floor = float(np.median(copy_ms)) if copy_ms else None
    return {**base, "status": "ok", "speed": speed_record(d, ex, sizes, floor, "copy", note)}


def _int(v) -> int:
    return int(v[0]) if isinstance(v, (tuple, list)) else int(v)
