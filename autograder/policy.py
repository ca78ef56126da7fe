"""The grading rules, as pure functions of measured results (no CUDA), so they are tested on a CPU.

Rules, in one place:
- Correctness points go by size group (`correctness_points`): all of them for a kernel right at every size;
  the exercise's `partial_points` (by default half) for one right at every small and edge size, hidden ones
  included, that fails, crashes or times out only at sizes larger than L2; none for a kernel wrong at any
  small or edge size, where bounds and indexing bugs show. Only a size that ran and passed counts: every
  size is run, but after a timeout the rest are skipped (to bound grading time), so a timeout leaves the
  sizes after it unproven. A grader error at any size gives no points (regrade). `partial=None` in a spec,
  and every library call, make correctness all-or-nothing. The report lists each size.
- Speed points need correctness at every size (a kernel with partial credit is not timed). The ratio is
  reference time / student time; the best tier met gives its fraction of the speed points. A verdict whose
  ratio lies within the noise band of a tier boundary is re-measured; after `MAX_ROUNDS` the pooled medians
  decide.
- Pipeline points (exercises with a `Pipeline`) need correctness too. The ratio is the pipeline's time /
  the un-overlapped time (lower is better): full points at <= full_at, half at <= half_at. A ratio within
  `PIPELINE_BAND` of a boundary is measured once more (`PIPELINE_ROUNDS`); then the best pipeline time of
  both rounds over their mean un-overlapped time decides. A wrong pipeline output is like a wrong timed run:
  no points at all.
- A technique the spec lists in `techniques` (autograder/techniques.py) that the kernel's SASS lacks withholds
  the speed points of a correct kernel (status 'slow', the check's message as the reason); its correctness
  points stay. One in `required_techniques` fails the exercise at compile time instead.
- A time below `IMPOSSIBLE_MARGIN` x the floor (bytes / measured copy bandwidth, or FLOPs / peak) is
  'flagged': zero speed points and a note for the instructor; correctness points stay.
- Timeouts: a kernel is killed after max(spec timeout_s (default 10 s), 50 x the reference time).
- A GPU older than the exercise needs: status 'skipped', 0 points, and the exercise's points do not
  count towards the maximum (`counted_max_points` = 0), so the student is neither failed nor given
  points for code nobody ran; the report says to regrade on a newer GPU.
"""
from __future__ import annotations

import dataclasses
import statistics

from .report import ExerciseReport, PipelineResult, SizeResult, SpeedResult, Status
from .techniques import withheld_reason

__all__ = ["TIMEOUT_MULTIPLE", "MAX_ROUNDS", "MIN_BAND", "IMPOSSIBLE_MARGIN", "timeout_for", "speed_fraction",
           "noise_band", "near_boundary", "decide_speed", "SpeedDecision", "is_impossible", "floor_ms",
           "score", "skipped_report", "PIPELINE_BAND", "PIPELINE_ROUNDS", "PIPELINE_SEED_STRIDE", "pipeline_near_boundary",
           "decide_pipeline", "PipelineDecision", "pipeline_advice", "large_flags", "correctness_points",
           "partial_rule", "pipeline_result", "WrongPipelineOutput", "decide_checked_pipeline"]

TIMEOUT_MULTIPLE = 50
MAX_ROUNDS = 4
MIN_BAND = 0.01
# a hand-written kernel can beat a device-to-device memcpy by a little, never by a third
IMPOSSIBLE_MARGIN = 0.75
# the pipeline ratio is a best-of-3 time over a sum of medians; on the H100 the same configuration
# measures within ~1% across runs (benchmarks/results/sweeps/03_streams_pipeline.json), so 3% is a safe band
PIPELINE_BAND = 0.03
PIPELINE_ROUNDS = 2  # measure once more inside the band, then decide


def timeout_for(timeout_s: float, reference_s: float | None) -> float:
    """Seconds a student kernel may run at one size before it is killed."""
    return max(float(timeout_s), TIMEOUT_MULTIPLE * float(reference_s or 0.0))


def speed_fraction(ratio: float, tiers) -> float:
    """Fraction of the speed points for a reference/student time ratio; tiers best first."""
    for min_ratio, fraction in sorted(tiers, reverse=True):
        if ratio >= min_ratio:
            return float(fraction)
    return 0.0


def _median(xs):
    return statistics.median(xs)


def _rel_iqr(xs) -> float:
    if len(xs) < 2:
        return float("inf")
    q = statistics.quantiles(sorted(xs), n=4, method="inclusive")
    med = q[1]
    return (q[2] - q[0]) / med if med > 0 else float("inf")


def noise_band(student_samples, reference_samples) -> float:
    """Relative half-width of the uncertainty of the ratio: half the sum of the relative IQRs."""
    return max(MIN_BAND, 0.5 * (_rel_iqr(student_samples) + _rel_iqr(reference_samples)))


def near_boundary(ratio: float, band: float, tiers):
    """The tier boundary whose band contains ``ratio`` (the verdict there is unsure), or None."""
    for min_ratio, _ in tiers:
        if min_ratio * (1 - band) <= ratio < min_ratio * (1 + band):
            return min_ratio
    return None


@dataclasses.dataclass
class SpeedDecision:
    ratio: float
    fraction: float
    rounds: int
    student_ms: float
    reference_ms: float
    student_iqr_ms: float
    reference_iqr_ms: float
    band: float
    samples: int
    settled: bool  # False: still inside the band after MAX_ROUNDS; decided on the pooled medians


def _iqr(xs) -> float:
    if len(xs) < 2:
        return 0.0
    q = statistics.quantiles(sorted(xs), n=4, method="inclusive")
    return q[2] - q[0]


def decide_speed(measure, tiers, max_rounds: int = MAX_ROUNDS) -> SpeedDecision:
    """Measure, and measure again while the ratio sits inside the noise band of a tier boundary.

    ``measure()`` returns (student_samples_ms, reference_samples_ms) from one interleaved run.
    Samples are pooled across rounds, so each round narrows the band.
    """
    stu, ref = [], []
    rounds = 0
    while True:
        s, r = measure()
        if not s or not r:
            raise ValueError("a timing round returned no samples")
        stu += list(s)
        ref += list(r)
        rounds += 1
        ratio = _median(ref) / _median(stu)
        band = noise_band(stu, ref)
        unsure = near_boundary(ratio, band, tiers) is not None
        if not unsure or rounds >= max_rounds:
            return SpeedDecision(ratio, speed_fraction(ratio, tiers), rounds, _median(stu), _median(ref),
                                 _iqr(stu), _iqr(ref), band, len(stu), not unsure)


def pipeline_near_boundary(ratio: float, band: float, boundaries):
    """The boundary (full_at or half_at, lower is better) whose band contains ``ratio``, or None."""
    for b in boundaries:
        if b * (1 - band) < ratio <= b * (1 + band):
            return b
    return None


@dataclasses.dataclass
class PipelineDecision:
    ratio: float
    fraction: float
    rounds: int
    total_ms: float
    serial_ms: float
    settled: bool  # False: still inside the band after the last round; decided on the pooled times


PIPELINE_SEED_STRIDE = 64
"""Seeds of successive pipeline-driver calls lie this far apart: a call fills from its seed upwards, one seed a
run (a warm-up and its timed repeats), so no two calls, the reference's included, time the same inputs."""


def decide_pipeline(measure, pipeline, band: float = PIPELINE_BAND,
                    max_rounds: int = PIPELINE_ROUNDS) -> PipelineDecision:
    """Measure, and measure again while the ratio sits inside the band of ``full_at`` or ``half_at``.

    ``measure()`` returns (total_ms, serial_ms) of one pipeline run. Pooled over rounds: the best total
    (each is already a best of several runs) over the mean of the un-overlapped times.
    """
    totals, serials = [], []
    rounds = 0
    while True:
        total, serial = measure()
        if not (total > 0 and serial > 0):
            raise ValueError(f"a pipeline measurement returned no time (total {total}, serial {serial})")
        totals.append(float(total))
        serials.append(float(serial))
        rounds += 1
        t, s = min(totals), statistics.fmean(serials)
        ratio = t / s
        unsure = pipeline_near_boundary(ratio, band, (pipeline.full_at, pipeline.half_at)) is not None
        if not unsure or rounds >= max_rounds:
            return PipelineDecision(ratio, pipeline.fraction(ratio), rounds, t, s, not unsure)


class WrongPipelineOutput(Exception):
    """A timed pipeline run's output was wrong; ``measurement`` is its 1-based number."""

    def __init__(self, message: str, measurement: int):
        super().__init__(message)
        self.measurement = measurement


def decide_checked_pipeline(run_once, pipeline) -> tuple:
    """`decide_pipeline` over driver runs: ``run_once(i)`` (i = 1, 2, ...) returns a driver report (keys
    ``correct``, ``message``, ``total_ms``, ``serial_ms``); a wrong one raises `WrongPipelineOutput`.
    Returns (the decision, the last report)."""
    reports = []

    def measure():
        rep = run_once(len(reports) + 1)
        if not rep.get("correct"):
            raise WrongPipelineOutput(rep.get("message", "") or "wrong output", len(reports) + 1)
        reports.append(rep)
        return rep["total_ms"], rep["serial_ms"]

    return decide_pipeline(measure, pipeline), reports[-1] if reports else None


def pipeline_advice(p: PipelineResult) -> str:
    """What to change, from the configuration that was measured."""
    tips = []
    if p.streams == 1:
        tips.append("use more than one stream (on one stream every copy waits for the work before it, so "
                    "nothing overlaps)")
    if p.chunks == 1:
        tips.append("cut the work into chunks (8 to 32): with one chunk the kernel waits for the whole copy-in "
                    "and the copy-out for the whole kernel")
    elif p.chunks < 8:
        tips.append(f"use more chunks (8 to 32): the first copy-in and the last copy-out, 1/{p.chunks} of the data "
                    "each, overlap with nothing")
    elif p.chunks > 64:
        tips.append("use fewer chunks (8 to 32): every copy and launch has a fixed cost of a few microseconds")
    if p.streams > p.chunks:
        tips.append(f"streams beyond the number of chunks ({p.chunks}) stay idle")
    if not tips:
        tips.append("look at the timeline (course.plots.timeline(report.pipeline.spans) after a preview): copies "
                    "in both directions and the kernels should run at the same time; a kernel much slower than "
                    "a copy of its chunk also holds the pipeline back")
    return ("; ".join(tips) + ". The host buffers are pinned already, so copies on different streams can "
            "overlap with each other and with kernels.")


def floor_ms(floor_bytes: float | None, floor_flops: float | None, copy_gbps: float | None,
             peak_tflops: float | None) -> float | None:
    """The fastest time the hardware allows for this work, from measured ceilings; None if unknown."""
    times = []
    if floor_bytes and copy_gbps:
        times.append(floor_bytes / (copy_gbps * 1e9) * 1e3)
    if floor_flops and peak_tflops:
        times.append(floor_flops / (peak_tflops * 1e12) * 1e3)
    return max(times) if times else None


def is_impossible(student_ms: float, floor: float | None, reference_ms: float | None = None) -> bool:
    """True when the student's time beats the floor by more than the margin.

    If the reference itself beats the floor, the ceiling measurement is off, not the student: no flag.
    """
    if floor is None or floor <= 0:
        return False
    if reference_ms is not None and reference_ms < floor * IMPOSSIBLE_MARGIN:
        return False
    return student_ms < floor * IMPOSSIBLE_MARGIN


def _worst(statuses) -> str:
    order = {s: i for i, s in enumerate(Status.SEVERITY)}
    return min(statuses, key=lambda s: order.get(s, 0))


def _size_reason(results: list, large: list | None = None) -> str:
    bad = [r for r in results if r.status not in (Status.PASSED, Status.NOT_RUN)]
    if not bad:
        return ""
    if large is not None:  # a small or edge size first: that failure is what costs the partial credit
        bad = [r for big in (False, True) for r, b in zip(results, large)
               if b == big and r.status not in (Status.PASSED, Status.NOT_RUN)]
    first = bad[0]
    label = ", ".join(f"{k}={v}" for k, v in first.sizes.items())
    if getattr(first, "hidden", False):
        label += (" (a size the spec does not list, drawn at random for this grading: the kernel must be right "
                  "for every size in the exercise's range)")
    text = f"At size {label}: {first.message}" if first.message else f"At size {label}: {first.status}"
    others = [", ".join(f"{k}={v}" for k, v in r.sizes.items()) for r in bad[1:]]
    if others:
        text += f"\n(Also {bad[1].status if len(set(r.status for r in bad[1:])) == 1 else 'failing'} at: " \
                + "; ".join(others) + ")"
    passed = [", ".join(f"{k}={v}" for k, v in r.sizes.items()) for r in results if r.status == Status.PASSED]
    if passed:
        text += "\n(Correct at: " + "; ".join(passed) + ")"
    return text


# a failing case that is the kernel's doing; any other (a grader error) leaves nothing to give credit for
_KERNEL_FAULTS = (Status.FAILED, Status.CRASHED, Status.TIMED_OUT)


def large_flags(ex, sizes: list) -> list | None:
    """For each size result, whether its case is larger than L2; None when the results cannot be matched.

    The spec's public cases are the results that are not ``hidden``, in the spec's order (the runner keeps
    it); hidden cases are always small (`hidden.MAX_CASE_BYTES`). Library calls have no large case.
    """
    is_large = getattr(ex, "is_large_case", None)
    if is_large is None or sum(1 for r in sizes if not r.hidden) != len(ex.sizes):
        return None
    cases = iter(ex.sizes)
    return [False if r.hidden else bool(is_large(next(cases))) for r in sizes]


def partial_rule(ex) -> str:
    """The exercise's correctness rule in a sentence or two, for students (feedback, docs)."""
    total = float(ex.points.correctness)
    partial = getattr(ex, "partial_points", None)
    if partial is None:
        return (f"all {total:g} correctness points for a kernel right at every size, none otherwise (no partial "
                "credit for this exercise)." + _timed_note(ex))
    return (f"all {total:g} correctness points for a kernel right at every size; {partial:g} for one right at "
            "every small and edge size (the hidden ones included) that is wrong or crashes only at a size larger "
            "than the L2 cache; none for one wrong at any smaller size, or one that times out before every smaller "
            "size ran." + _timed_note(ex))


def _timed_note(ex) -> str:
    """What a kernel that is not right at every size loses besides correctness points ('' if nothing)."""
    what = [w for w, pts in (("speed", ex.points.speed), ("overlap", getattr(ex.pipeline, "points", 0))) if pts]
    if not what:
        return ""
    return f" {' and '.join(what).capitalize()} points need every size right."


def _label(r) -> str:
    return ", ".join(f"{k}={v}" for k, v in r.sizes.items())


def correctness_points(ex, sizes: list) -> tuple:
    """(points, text) for size results that are not all passing: the partial credit they earn, and a
    paragraph that says which groups passed (or why nothing is earned) and the exercise's rule; the text is
    '' where no rule applies (a library call, results that cannot be matched to the spec, a grader error)."""
    flags = large_flags(ex, sizes)
    if flags is None or not any(flags) or any(r.status == Status.ERROR for r in sizes):
        return 0.0, ""
    rule = "Rule for this exercise: " + partial_rule(ex)
    partial = ex.partial_points
    if partial is None:
        return 0.0, rule
    small = [r for r, big in zip(sizes, flags) if not big]
    large = [r for r, big in zip(sizes, flags) if big]
    total = float(ex.points.correctness)
    wrong = [r for r in small if r.status not in (Status.PASSED, Status.NOT_RUN)]
    if wrong:
        return 0.0, (f"No partial credit: {len(wrong)} of the {len(small)} small and edge sizes "
                     f"{'is' if len(wrong) == 1 else 'are'} not right.\n{rule}")
    if any(r.status == Status.NOT_RUN for r in small):
        stop = next((r for r in sizes if r.status == Status.TIMED_OUT), None)
        why = f"the timeout at {_label(stop)} stopped the sizes after it" if stop else "some were not run"
        return 0.0, (f"No partial credit: it needs every small and edge size run and right, and {why}.\n{rule}")
    failing = [r for r in large if r.status != Status.PASSED]
    if not failing or not all(r.status in _KERNEL_FAULTS + (Status.NOT_RUN,) for r in failing) \
            or not any(r.status in _KERNEL_FAULTS for r in failing):
        return 0.0, rule
    hidden = sum(1 for r in small if r.hidden)
    what = "; ".join(f"{r.status} at {_label(r)}" for r in failing)
    head = (f"Correctness {partial:g}/{total:g} points (partial credit): right at all {len(small)} small and edge "
            f"sizes" + (f" ({hidden} of them drawn at random for this grading)" if hidden else "")
            + f", but not at the size{'s' * (len(large) != 1)} larger than the L2 cache ({what}).")
    return partial, f"{head}\n{rule}"


def score(ex, sizes: list, speed: SpeedResult | None = None, *, pipeline: PipelineResult | None = None,
          timing_failure: SizeResult | None = None, pipeline_failure: SizeResult | None = None,
          compile_failure: tuple | None = None, notes=(), speed_graded: bool = True, technique_failures=(),
          **extra) -> ExerciseReport:
    """Turn per-size results, a speed measurement and a pipeline measurement into points, a status, a reason.

    ``compile_failure`` is (status, message) when nothing could run; ``timing_failure`` is a failure
    seen while timing (a wrong output of a timed run, a crash), ``pipeline_failure`` one seen in the
    pipeline run: the kernel then gets no points at all, because a kernel that is right only while being
    checked is not right. ``technique_failures`` are the messages of the spec's `techniques` checks that failed
    (autograder/techniques.py): a correct kernel then keeps its correctness points and gets no speed points.
    """
    base = dict(chapter=ex.chapter, exercise=ex.name, max_points=ex.max_points, notes=list(notes), **extra)
    if compile_failure is not None:
        status, message = compile_failure
        return ExerciseReport(status=status, points=0.0, reason=message, sizes=list(sizes), **base)
    if not sizes:
        return ExerciseReport(status=Status.ERROR, points=0.0, reason="no test size was run", **base)
    ran = [r for r in sizes if r.status != Status.NOT_RUN]
    if any(r.status != Status.PASSED for r in ran) or not ran:
        status = _worst([r.status for r in ran] or [Status.ERROR])
        points, text = correctness_points(ex, sizes) if ran else (0.0, "")
        reason = _size_reason(sizes, large_flags(ex, sizes))
        if points > 0:  # the verdict on the groups first; the failing size's details after it
            head, _, rule = text.partition("\n")
            reason = f"{head}\n{reason}\n{rule}"
        elif text:
            reason = f"{reason}\n{text}"
        return ExerciseReport(status=status, points=points, reason=reason, sizes=list(sizes), **base)
    if timing_failure is not None:
        label = ", ".join(f"{k}={v}" for k, v in timing_failure.sizes.items())
        reason = (f"Correct at every test size, but it failed while being timed (size {label}): "
                  f"{timing_failure.message}")
        return ExerciseReport(status=timing_failure.status, points=0.0, reason=reason, sizes=list(sizes), **base)
    if pipeline_failure is not None:
        what = ("the pipeline run hit a grader problem" if pipeline_failure.status == Status.ERROR
                else "it failed in the pipeline run")
        reason = f"Correct at every test size, but {what}: {pipeline_failure.message}"
        return ExerciseReport(status=pipeline_failure.status, points=0.0, reason=reason, sizes=list(sizes), **base)
    points = float(ex.points.correctness)
    status, reasons, shown = Status.PASSED, [], None
    if not speed_graded and (ex.points.speed > 0 or ex.pipeline is not None):
        skipped = ex.max_points - points
        return ExerciseReport(status=Status.UNTIMED, points=points, sizes=list(sizes), reason=(
            f"Correct at every test size. Speed was not graded in this run (--no-speed), so its "
            f"{skipped:g} point{'s' * (skipped != 1)} are not awarded; grade without --no-speed for them.")
            + "".join(f"\nTimed or not, the speed points would be withheld: {m}" for m in technique_failures), **base)
    if ex.points.speed > 0:
        if speed is None:
            return ExerciseReport(status=Status.ERROR, points=points, sizes=list(sizes), speed=None,
                                  reason="correct, but the speed was not measured (grader problem)", **base)
        shown = speed
        if speed.impossible:
            status = Status.FLAGGED
            kind = getattr(speed, "floor_kind", "") or "copy"
            bound = ("this GPU can move the data (" + f"{speed.floor_ms:.4f} ms at the measured copy bandwidth)"
                     if kind == "copy" else f"this GPU's {kind.upper()} arithmetic allows ({speed.floor_ms:.4f} ms "
                     f"at its peak {kind.upper()} rate)")
            reasons.append(f"Correct, but timed at {speed.student_ms:.4f} ms, faster than {bound}. No speed "
                           "points; the instructor will look at it. Work done in a lower precision than the "
                           "exercise's (tensor cores for an FP32 exercise) or work skipped while timed does this.")
        elif technique_failures:
            status = Status.SLOW
            reasons.append(withheld_reason(ex, technique_failures, speed))
        else:
            fraction = speed_fraction(speed.ratio, ex.tiers)
            points += fraction * ex.points.speed
            if fraction < 1.0:
                status = Status.SLOW
                reason = (f"Correct, but slower than needed: yours takes {speed.student_ms:.4f} ms, the reference "
                          f"{speed.reference_ms:.4f} ms, so you run at {speed.ratio:.2f}x the reference speed; "
                          f"full speed points need {ex.speed_threshold:.2f}x.")
                if fraction > 0:
                    reason += f" You get {fraction:.0%} of the speed points."
                reasons.append(reason)
    if ex.pipeline is not None:
        if pipeline is None:
            return ExerciseReport(status=Status.ERROR, points=points, sizes=list(sizes), speed=shown,
                                  reason="correct, but the pipeline was not measured (grader problem)", **base)
        fraction = ex.pipeline.fraction(pipeline.ratio)
        points += fraction * ex.pipeline.points
        if fraction < 1.0:
            status = Status.SLOW if status == Status.PASSED else status
            reason = (f"Correct, but the pipeline overlaps too little: with {pipeline.streams} stream"
                      f"{'s' * (pipeline.streams != 1)} and {pipeline.chunks} chunk{'s' * (pipeline.chunks != 1)} "
                      f"it took {pipeline.ratio:.2f} of the un-overlapped time ({pipeline.total_ms:.2f} ms; copy-in, "
                      f"kernel and copy-out one after another take {pipeline.serial_ms:.2f} ms). Full pipeline "
                      f"points need <= {ex.pipeline.full_at:.3g}, half <= {ex.pipeline.half_at:.3g}"
                      + (f"; the reference's pipeline took {pipeline.reference_ratio:.2f}"
                         if pipeline.reference_ratio is not None else "") + ". ")
            reason += f"You get {fraction:.0%} of the pipeline points. " if fraction > 0 else ""
            reason += "To overlap more: " + pipeline_advice(pipeline)
            reasons.append(reason)
    return ExerciseReport(status=status, points=points, reason="\n".join(reasons), sizes=list(sizes), speed=shown,
                          pipeline=pipeline, **base)


def skipped_report(ex, device_arch: str, gpu_count: int | None = None, why: str = "", cc=None,
                   **extra) -> ExerciseReport:
    """The report of an exercise this machine cannot grade: too few GPUs for a ring, or GPUs that cannot time one
    (``why``), unless its GPU (compute capability ``cc``) could not run the kernel anyway; else the GPU's arch."""
    from .ring import gpus_needed, skipped_reason
    from .tensormaps import runs_on
    if why or (gpu_count is not None and gpu_count < gpus_needed(ex) and (cc is None or runs_on(ex, cc))):
        reason = skipped_reason(ex, gpu_count, why)
    elif getattr(ex, "arch", None):   # an arch-specific target runs on one compute capability only
        from .tensormaps import arch_requirement
        needs, gpus = arch_requirement(ex.arch)
        reason = (f"skipped: needs {needs}; this GPU is {device_arch}. Not graded here, and its points are left "
                  f"out of the total; regrade on {gpus}.")
    else:
        need = f"sm_{ex.min_cc[0]}{ex.min_cc[1]}"
        reason = (f"skipped: needs {need} (this GPU is {device_arch}). Not graded here, and its points are left "
                  f"out of the total; regrade on a GPU with {need} or newer.")
    return ExerciseReport(chapter=ex.chapter, exercise=ex.name, status=Status.SKIPPED, points=0.0,
                          max_points=ex.max_points, counted_max_points=0.0, reason=reason, **extra)


SPAN_DIGITS = 4   # milliseconds to 0.1 us: the timeline's spans, small in the report


def pipeline_result(d, pl, last: dict, *, streams: int, chunks: int, block: int, nbytes: int, reference: dict) -> dict:
    """The report's "pipeline" entry from decide_pipeline's decision `d`, the spec's Pipeline `pl`, the driver's
    last report and the reference run's ratio, streams and chunks (one form for kernel and schedule pipelines)."""
    spans = [[str(lane), str(label), round(float(a), SPAN_DIGITS), round(float(b), SPAN_DIGITS)]
             for lane, label, a, b in last.get("spans", [])]
    note = "" if d.settled else (f"the pipeline ratio stayed within {100 * PIPELINE_BAND:.0f}% of a tier "
                                 f"boundary after {d.rounds} rounds; decided on the pooled times")
    return {"ratio": d.ratio, "total_ms": d.total_ms, "serial_ms": d.serial_ms, "full_at": float(pl.full_at),
            "half_at": float(pl.half_at), "streams": int(streams), "chunks": int(chunks), "block": int(block),
            "nbytes": int(nbytes), "ideal_ms": last.get("ideal_ms"), "rounds": d.rounds, "settled": d.settled,
            "reference_ratio": float(reference["ratio"]), "reference_streams": int(reference["streams"]),
            "reference_chunks": int(reference["chunks"]), "spans": spans, "note": note}

