"""The speed step: student and reference timed interleaved, every timed launch on inputs it has never seen.

Replay is the attack this shape stops: a kernel that computes once per input buffer, keeps the result in
a ``__device__`` array and copies it out later (with a calibrated pause so the speed looks plausible).
So, between samples and outside the timed region, each kernel's next input set is made afresh, the
reference computes that set's expected output, and after the student's timed launch its output is
checked against it. Fresh values are picked element by element from two pools of the spec's generators'
values, at positions hashed from a new seed (device_ops.fresh_gather): every element is still a value the
generator can produce, which keeps exact-integer and range contracts (histogram bins, small integers whose
sums are exact), and no two timed launches see the same array.
"""
from __future__ import annotations

import math

import numpy as np

from . import policy
from .buffers import device_bad_count, draw, fill_output, output_problem, scalar_value
from .cuda_errors import classify_cuda_error
from .device_ops import fresh_gather, xor_mask
from .device import backend, gpu_sections, kernel_args, launch, set_constants
from .floors import flop_floor_ms
from .spec import Constant, In, InOut, Out, Scalar, shape_of

__all__ = ["TIMING_BUDGET_S", "TIMING_MAX_SAMPLES", "WARMUP_RUNS", "WrongWhileTimed", "FreshInputs", "TimedPair",
           "timing_step", "timed_pass", "decide", "speed_record"]

TIMING_BUDGET_S = 1.0      # per interleaved round
POOL_VALUES = 1 << 20      # generator values per pool; fresh inputs pick from two pools
TIMING_MAX_SAMPLES = 60
WARMUP_RUNS = 2            # per kernel, outside `interleaved`, each on fresh inputs


class WrongWhileTimed(Exception):
    """A timed run's output was wrong (or a pipeline run's): the kernel gets no points."""


class FreshInputs:
    """Input sets never seen before, gathered on the device from two pools of the spec's generators' values.

    The pools (at most ``POOL_VALUES`` values each per input, drawn on the host before the GPU is
    touched) are small; every fill picks each element from one of them at a position hashed from a new
    seed and the element's index, in one device pass.
    """

    def __init__(self, xp, ex, sizes: dict, rng: np.random.Generator, host: dict | None = None):
        self.xp, self.ex, self.sizes, self.rng = xp, ex, sizes, rng
        host = host if host is not None else self.draw(ex, sizes, rng)
        self.pools = {name: tuple(xp.asarray(a) for a in pair) for name, pair in host.items()}

    @staticmethod
    def draw(ex, sizes: dict, rng: np.random.Generator) -> dict:
        """The two pools of every In, InOut and Constant, on the host (name -> two flat NumPy arrays)."""
        pools = {}
        for p in ex.params:  # in params order, so the draws do not depend on which kinds come first
            if isinstance(p, (In, InOut, Constant)):
                k = min(math.prod(shape_of(p.shape, sizes)), POOL_VALUES)
                pools[p.name] = tuple(draw(getattr(p, "gen", None), rng, (k,), p.np_dtype) for _ in range(2))
        return pools

    def fill(self, arrays: dict) -> dict:
        """Write new values into ``arrays`` (name -> device array) for every In, InOut and Constant; new
        scalars drawn by the spec (sizes stay). Returns the scalars."""
        for name, (a, b) in self.pools.items():
            fresh_gather(arrays[name], a, b, int(self.rng.integers(1 << 63)))
        return {p.name: scalar_value(p, self.sizes, self.rng) for p in self.ex.params if isinstance(p, Scalar)}


class _Set:
    """One kernel's buffers for one timed launch: inputs, pristine InOut values, outputs, scalars."""

    def __init__(self, xp, ex, sizes):
        self.inputs, self.pristine, self.outputs, self.expected = {}, {}, {}, {}
        for p in ex.params:
            shape = shape_of(p.shape, sizes) if not isinstance(p, Scalar) else None
            if isinstance(p, (In, Constant)):
                self.inputs[p.name] = xp.empty(shape, dtype=p.np_dtype)
            elif isinstance(p, InOut):
                self.pristine[p.name] = xp.empty(shape, dtype=p.np_dtype)
            if isinstance(p, (Out, InOut)):
                self.outputs[p.name] = xp.empty(shape, dtype=p.np_dtype)
                self.expected[p.name] = xp.empty(shape, dtype=p.np_dtype)
        self.scalars = {}
        self.args = None   # the next timed launch's arguments, made by `TimedPair.prepare`
        self.mask_seed = 0

    def arrays(self, outs: dict) -> dict:
        return {**self.inputs, **outs}

    def constants(self, ex) -> dict:
        return {c.name: self.inputs[c.name] for c in ex.constants}


def _reset_outputs(ex, s: _Set, outs: dict) -> None:
    for p in ex.arrays:
        if isinstance(p, InOut):
            outs[p.name][...] = s.pristine[p.name]
        elif isinstance(p, Out):
            fill_output(outs[p.name], p)


class TimedPair:
    """The state of one speed measurement: the kernels, their geometry, and each kernel's next input set.

    ``prepare(who)`` (untimed) gives ``who``'s next launch fresh inputs and its arguments (a `TensorMap`
    param's map is encoded there, by the driver, never in the timed region), and for the student the
    expected output; ``launch(who)`` is what is timed; ``check()`` compares the student's last output.
    """

    def __init__(self, ctx, sizes: dict, geo_student, geo_reference, rng: np.random.Generator,
                 host: dict | None = None):
        be = backend()
        self.xp, self.ex, self.ctx = be.xp, ctx.ex, ctx
        self.kernels = {"student": ctx.student, "reference": ctx.reference}
        self.geo = {"student": geo_student, "reference": geo_reference}
        self.cfg = {"student": dict(ctx.cfg), "reference": dict(self.ex.launch_defaults)}  # what each geo is from
        self.fresh = FreshInputs(self.xp, self.ex, sizes, rng, host)
        self.sets = {who: _Set(self.xp, self.ex, sizes) for who in self.kernels}
        self.launches = {"student": 0, "reference": 0}

    def prepare(self, who: str) -> None:
        ex, s = self.ex, self.sets[who]
        s.scalars = self.fresh.fill({**s.inputs, **s.pristine})
        s.args = kernel_args(ex, s.arrays(s.outputs), s.scalars, self.cfg[who])
        if who == "student":
            # the expected output of exactly these inputs, from the reference, untimed
            _reset_outputs(ex, s, s.expected)
            ref = self.kernels["reference"]
            set_constants(ex, ref, s.constants(ex))
            ref_args = kernel_args(ex, s.arrays(s.expected), s.scalars, self.cfg["reference"])
            launch(ref, self.geo["reference"], ref_args)
            # the answer waits masked while the student kernel runs: XOR with random bits whose seed only
            # this process holds, so no device buffer a kernel could scan for holds it in the clear
            s.mask_seed = int(self.fresh.rng.integers(1 << 62))
            self._xor_mask(s)
            set_constants(ex, ref, self.sets["reference"].constants(ex))
        else:
            # the same amount of GPU work before each kernel's sample, so clocks and caches favour neither
            launch(self.kernels["reference"], self.geo["reference"], s.args)
        _reset_outputs(ex, s, s.outputs)
        set_constants(ex, self.kernels[who], s.constants(ex))

    def _xor_mask(self, s: _Set) -> None:
        """Flip the expected outputs' bits with a mask hashed from ``s.mask_seed`` (twice restores them)."""
        for p in self.ex.arrays:
            if isinstance(p, (Out, InOut)):
                xor_mask(s.expected[p.name], s.mask_seed)

    def launch(self, who: str, sync: bool = False) -> None:
        s = self.sets[who]
        self.launches[who] += 1
        launch(self.kernels[who], self.geo[who], s.args, sync=sync)

    def check(self) -> str:
        """'' when the student's last output matches its expected output, else what differs."""
        s = self.sets["student"]
        self._xor_mask(s)  # the student kernel has finished: unmask
        try:
            for p in self.ex.arrays:
                if isinstance(p, (Out, InOut)):
                    got, want = s.outputs[p.name], s.expected[p.name]
                    if device_bad_count(self.ex, p, got, want):
                        be = backend()
                        problem = output_problem(self.ex, p, be.host(got), be.host(want), 0)
                        if problem:
                            return problem
            return ""
        finally:
            for buf in s.expected.values():
                buf.fill(0)


def timing_step(ctx) -> dict:
    """Time student and reference interleaved at the speed size; check every timed student output."""
    be = backend()
    ex = ctx.ex
    sizes = ex.resolve_sizes(ex.default_speed_size(), ctx.l2)
    label = ex.size_label(sizes)
    base = {"sizes": sizes}
    try:
        geo_s = ctx.geometry(sizes, ctx.cfg)
    except Exception as exc:
        return {**base, "status": "failed", "message": f"the launch configuration {ctx.cfg} does not work "
                f"at {label}: {exc}"}
    be.free_cached()
    rng = np.random.default_rng([ctx.seed, 10_000])
    host = FreshInputs.draw(ex, sizes, rng)  # host work: no lock held
    shared, alone = gpu_sections(ctx)
    with shared():
        pair = TimedPair(ctx, sizes, geo_s, ctx.geometry(sizes, ex.launch_defaults), rng, host)
    return _timed(ctx, pair, sizes, label, base, geo_s, shared, alone)


def _timed(ctx, pair, sizes, label, base, geo_s, shared, alone) -> dict:
    be = backend()
    ex = ctx.ex
    # the reference's time sets the student's deadline; the timing size is new to the student, so its
    # first launches are checked one by one before anything is timed
    with shared():
        pair.prepare("reference")
    with alone():
        ref_s = be.time_ms(lambda: pair.launch("reference")) / 1e3
    for _ in range(WARMUP_RUNS):
        with shared():
            pair.prepare("student")
            ctx.arm(policy.timeout_for(ex.timeout_s, ref_s), f"your kernel at the timing size {label}")
            try:
                pair.launch("student", sync=True)
            except Exception as exc:
                return {**base, **classify_cuda_error(exc, label, geo_s)}
            problem = pair.check()
            if problem:
                return {**base, "status": "failed", "message": f"wrong output at the timing size {label}. {problem}"}
            pair.prepare("reference")
            pair.launch("reference", sync=True)

    fns = {"student": lambda: pair.launch("student"), "reference": lambda: pair.launch("reference")}
    copy_ms = []
    if ex.floor_bytes is not None:
        xp = be.xp
        half = max(int(ex.floor_bytes(dict(sizes))) // 2, 1)
        with shared():
            src, dst = xp.zeros(half, dtype=xp.uint8), xp.empty(half, dtype=xp.uint8)
        fns["copy"] = be.copy_fn(dst, src)

    # The GPU is ours alone for one round-robin pass at a time (a sample of each kernel, each followed by
    # the next launch's fresh inputs and the check): other gradings' work runs between passes. Measured
    # on an H100 with 8 gradings at once, a pass per hold and a sample per hold gave the same throughput
    # and verdicts; a pass per hold takes the lock a third as often.
    def on_sample(name, i):
        if name == "copy":
            return
        if name == "student":
            problem = pair.check()
            if problem:
                raise WrongWhileTimed(f"timed run {pair.launches['student']}: {problem}")
        pair.prepare(name)

    def measure():
        with shared():
            pair.prepare("student")
            pair.prepare("reference")
        be.sync()
        res = timed_pass(be, fns, on_sample, copy_ms, around_pass=alone)
        return res["student"].samples_ms, res["reference"].samples_ms

    # every sample now also costs a fresh draw and a reference run for the expected output
    ctx.arm(policy.MAX_ROUNDS * (TIMING_BUDGET_S * 3 + 4 * TIMING_MAX_SAMPLES * 3 * ref_s) + 60
            + policy.timeout_for(ex.timeout_s, ref_s), f"your kernel while being timed at {label}")
    d, failed = decide(ctx, measure, base, label, geo_s, (
        "your kernel gave wrong results while being timed ({}). Every timed launch gets new inputs and its output is "
        "checked: it must be right on every launch, not only the first ones."))
    if failed:
        return failed
    floor, why = None, ""
    if copy_ms:
        floor, why = float(np.median(copy_ms)), "copy"
    if ex.floor_flops is not None:
        flop_ms = flop_floor_ms(ex.floor_flops(dict(sizes)), getattr(ex, "peak", "fp32"), ctx.device)
        if flop_ms is not None and flop_ms > (floor or 0.0):
            floor, why = flop_ms, getattr(ex, "peak", "fp32")
    return {**base, "status": "ok", "speed": speed_record(d, ex, sizes, floor, why)}


def timed_pass(be, fns: dict, on_sample, copy_ms: list, **kw) -> dict:
    """One pass of the speed protocol, the same for every kind of exercise: ``fns`` interleaved by the course's
    timer, no warm-up of its own (the checked first runs were it), 10 to TIMING_MAX_SAMPLES samples within
    TIMING_BUDGET_S, ``on_sample`` between samples (the check and the fresh inputs, outside the timed region).
    The copy's samples, where one ran, are added to ``copy_ms``; ``kw`` goes to the timer."""
    res = be.interleaved(fns, warmup=0, min_samples=10, max_samples=TIMING_MAX_SAMPLES, budget_s=TIMING_BUDGET_S,
                         on_sample=on_sample, **kw)
    if "copy" in res:
        copy_ms.extend(res["copy"].samples_ms)
    return res


def decide(ctx, measure, base: dict, label: str, geo, wrong: str) -> tuple:
    """(the speed decision, None), or (None, the step's result) when a timed run was wrong (``wrong``, with
    the problem in its ``{}``) or failed on the GPU. Disarms the measurement's deadline either way."""
    from .worker import SETUP_TIMEOUT_S
    try:
        return policy.decide_speed(measure, ctx.ex.tiers), None
    except WrongWhileTimed as exc:
        return None, {**base, "status": "failed", "message": wrong.format(exc)}
    except Exception as exc:
        return None, {**base, **classify_cuda_error(exc, label, geo)}
    finally:
        ctx.arm(SETUP_TIMEOUT_S, "")


def speed_record(d, ex, sizes: dict, floor, why: str, note: str = "") -> dict:
    """The speed step's result (a `SpeedResult`'s fields) from a decision and the floor it is held to."""
    if not d.settled:
        note = "; ".join(filter(None, [note, f"the ratio stayed within the noise band (+-{100 * d.band:.1f}%) after "
                                       f"{d.rounds} rounds; decided on the pooled medians"]))
    return {"student_ms": d.student_ms, "reference_ms": d.reference_ms, "student_iqr_ms": d.student_iqr_ms,
            "reference_iqr_ms": d.reference_iqr_ms, "ratio": d.ratio, "threshold": float(ex.speed_threshold),
            "rounds": d.rounds, "sizes": sizes, "floor_ms": floor, "floor_kind": why,
            "impossible": policy.is_impossible(d.student_ms, floor, d.reference_ms), "samples": d.samples, "note": note}
