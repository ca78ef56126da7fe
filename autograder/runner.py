"""Grade kernels in spawned children, and put their step results together into reports.

The parent never imports CuPy: it checks what it can as text (signature, LAUNCH data), then runs the
steps (compile, each size, timing, pipeline) in a child, restarting a fresh child after a crash or a kill,
so one illegal address or hang costs one step only.
"""
from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import signal
import tempfile
import time

from . import policy
from .extract import Submission, find_submissions
from .launchcfg import LaunchDataError, launch_from_source, merge_launch, parse_call_cell
from .loader import chapters, get_exercise, load_chapter
from .report import ExerciseReport, PipelineResult, Report, SizeResult, SpeedResult, Status
from .signature import compare_signature
from .spec import CallExercise, SpecError, did_you_mean
from .worker import MESSAGE_CAP, child_main

__all__ = ["grade_source", "grade_submission", "grade_path", "speed_trials", "Session", "PRINTF_TAIL_BYTES"]

PRINTF_TAIL_BYTES = 4096
HARNESS_MODULE = None  # None: autograder.harness; CPU tests name a fake one for the children to use
STARTUP_TIMEOUT_S = 120.0  # importing CuPy and creating a CUDA context on a cold machine
KILL_WAIT_S = 30.0


@dataclasses.dataclass
class Session:
    """State shared across the exercises of one grading run (so 'no GPU' is found out once)."""

    no_gpu: str | None = None
    device: str = ""
    seed: int | None = None  # fixed only for debugging; normally fresh from os.urandom per exercise

    def new_seed(self) -> int:
        return self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "little")


@dataclasses.dataclass
class _ChildOutcome:
    results: dict = dataclasses.field(default_factory=dict)  # step -> (data, fatal)
    device: dict | None = None
    nogpu: str | None = None
    skipped: str | None = None
    current: int | None = None  # step begun without a result
    armed: str = ""             # what ran when the deadline was set by "arm"
    armed_timeout: float = 0.0
    end: str = "done"           # done | killed | died
    exitcode: int | None = None


def _run_child(task: dict) -> _ChildOutcome:
    ctx = multiprocessing.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child_main, args=(send, task), daemon=True, name="autograder-child")
    proc.start()
    send.close()
    out = _ChildOutcome()
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                out.end = "killed"
                break
            try:
                ready = recv.poll(min(remaining, 0.5))
            except (EOFError, OSError):
                ready = False
            if ready:
                try:
                    msg = json.loads(recv.recv_bytes(maxlength=task.get("cap", MESSAGE_CAP)))
                except EOFError:
                    out.end = "died"  # closed without a "done" message
                    break
                except (OSError, ValueError):
                    out.end = "killed"  # oversized or garbled: do not trust the child further
                    break
                kind = msg.get("kind")
                if kind == "begin":
                    out.current, out.armed = msg["step"], ""
                    deadline = time.monotonic() + float(msg["timeout"])
                elif kind == "arm":
                    out.armed, out.armed_timeout = msg.get("what", ""), float(msg["timeout"])
                    deadline = time.monotonic() + float(msg["timeout"])
                elif kind == "result":
                    out.results[msg["step"]] = (msg.get("data") or {}, bool(msg.get("fatal")))
                    out.current = None
                elif kind == "device":
                    out.device = msg
                elif kind == "nogpu":
                    out.nogpu = msg.get("reason") or "no usable GPU"
                elif kind == "skipped":
                    out.skipped = msg.get("arch", "?")
                elif kind == "done":
                    break
            elif not proc.is_alive():
                out.end = "died"
                break
    finally:
        if out.end == "killed" or proc.is_alive():
            proc.join(5 if out.end != "killed" else 0)
            if proc.is_alive():
                proc.kill()
            proc.join(KILL_WAIT_S)
        out.exitcode = proc.exitcode
        recv.close()
    if out.end == "done" and out.current is not None:
        out.end = "died"  # said done in the middle of a step: treat as a crash of that step
    return out


def _signal_name(code) -> str:
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return signal.Signals(-code).name
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _read_tail(path: str, limit: int = PRINTF_TAIL_BYTES) -> str:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").strip()
    if size > limit:
        text = f"[... {size - limit} earlier bytes cut]\n" + text
    return text


def _run_steps(base_task: dict, steps: list, ex) -> tuple:
    """Run ``steps`` in as many children as it takes; (results by step, last outcome, log text)."""
    fd, log_path = tempfile.mkstemp(prefix="autograder-", suffix=".log")
    os.close(fd)
    results = {}
    outcome = None
    start = 0
    try:
        while start < len(steps):
            failed = any(d.get("status") not in ("ok", "passed", "not run") for d, _ in results.values())
            if steps[start] in ("timing", "pipeline") and failed:
                results[start] = ({"status": Status.NOT_RUN, "message": "correctness failed"}, False)
                start += 1
                continue
            task = {**base_task, "steps": steps, "start": start, "failed_before": failed, "log_path": log_path}
            outcome = _run_child(task)
            if outcome.nogpu or outcome.skipped:
                break
            for k, v in outcome.results.items():
                results[k] = v
            if outcome.end in ("killed", "died"):
                k = outcome.current
                if k is None:  # died between steps, or before the first one
                    k = next((j for j in range(start, len(steps)) if j not in results), None)
                    if k is None:
                        break
                    results[k] = ({"status": Status.ERROR, "message": (
                        f"the grading process stopped outside a step ({_signal_name(outcome.exitcode)})"
                        + (": it did not start within the time limit" if outcome.end == "killed" else "")
                        + ". Grader problem; its log: " + _read_tail(log_path, 1500))}, True)
                elif outcome.end == "killed" and outcome.armed:
                    results[k] = ({"status": Status.TIMED_OUT, "message": (
                        f"timed out: {outcome.armed} was still running after {outcome.armed_timeout:.0f} s "
                        "and was stopped. Look for a loop whose exit condition never becomes true, or a "
                        "__syncthreads() that not every thread of the block reaches.")}, True)
                elif outcome.end == "killed":
                    results[k] = ({"status": Status.ERROR, "message":
                                   "the grader's own work at this step took too long (grader problem)"}, True)
                else:
                    results[k] = ({"status": Status.CRASHED, "message": (
                        f"the grading process died ({_signal_name(outcome.exitcode)})"
                        + (f" while running {outcome.armed}" if outcome.armed else "")
                        + ". A fault in the driver from your kernel, or a grader problem.")}, True)
            done = sorted(results)
            if not done:
                break
            last = done[-1]
            data, fatal = results[last]
            status = data.get("status")
            if steps[last] == "compile" and status != "ok":
                break
            if status in (Status.TIMED_OUT, Status.ERROR):
                for j in range(last + 1, len(steps)):
                    results[j] = ({"status": Status.NOT_RUN, "message": f"an earlier step {status}"}, False)
                break
            nxt = next((j for j in range(start, len(steps)) if j not in results), None)
            if nxt is None:
                break
            start = nxt
    finally:
        printf = _read_tail(log_path)
        try:
            os.unlink(log_path)
        except OSError:
            pass
    return results, outcome, printf


def _size_results(ex, steps, results) -> list:
    out = []
    for i, step in enumerate(steps):
        if not step.startswith("size:"):
            continue
        idx = int(step.split(":", 1)[1])
        data, _ = results.get(i, ({"status": Status.NOT_RUN, "message": ""}, False))
        sizes = data.get("sizes") or {k: repr(v) for k, v in ex.sizes[idx].items()}
        out.append(SizeResult(sizes=sizes, status=data.get("status", Status.ERROR), message=data.get("message", ""),
                              ref_ms=data.get("ref_ms")))
    return out


def _fail(ex, status: str, reason: str, **extra) -> ExerciseReport:
    return ExerciseReport(chapter=ex.chapter, exercise=ex.name, status=status, points=0.0,
                          max_points=ex.max_points, reason=reason, **extra)


def _no_gpu_report(ex, reason: str, **extra) -> ExerciseReport:
    return _fail(ex, Status.NEEDS_GPU, f"needs a GPU: not graded here. {reason}", **extra)


def _prepare(ex, source, launch):
    """(cfg, None) or (None, (status, message)) from the checks that need no GPU."""
    if not source or not source.strip():
        return None, (Status.FAILED, (
            f"no kernel found for {ex.name}: put it in a `%%cuda --name {ex.name}` cell (or a cell tagged "
            f"kernel:{ex.name})."))
    problem = compare_signature(ex, source)
    if problem:
        return None, (Status.COMPILE_ERROR, problem)
    try:
        cfg = merge_launch(ex, launch if launch is not None else launch_from_source(source))
    except LaunchDataError as exc:
        return None, (Status.FAILED, str(exc))
    for case in ex.sizes:
        sizes = ex.resolve_sizes(case, 64 << 20)
        try:
            from .loader import check_launch_result
            bad = check_launch_result(ex.launch(dict(sizes), dict(cfg)))
        except Exception as exc:
            bad = f"{type(exc).__name__}: {exc}"
        if bad:
            return None, (Status.FAILED, f"LAUNCH {cfg} does not work for {ex.name} at {ex.size_label(sizes)}: {bad}")
    return cfg, None


def grade_source(chapter: str, exercise: str, source: str | None, *, launch: dict | None = None,
                 submission: str = "", session: Session | None = None, speed: bool = True) -> ExerciseReport:
    """Grade one kernel source for one exercise; never raises for student errors.

    Raises
    ------
    SpecError
        When the chapter or exercise does not exist or its spec is invalid.
    """
    session = session or Session()
    ex = get_exercise(chapter, exercise)
    t0 = time.monotonic()
    extra = {"submission": submission}
    if session.no_gpu:
        return _no_gpu_report(ex, session.no_gpu, **extra)
    if isinstance(ex, CallExercise):
        return _grade_call(ex, source, session, extra, t0)
    cfg, problem = _prepare(ex, source, launch)
    if problem:
        return policy.score(ex, [], compile_failure=problem, **extra)
    steps = ["compile"] + [f"size:{i}" for i in range(len(ex.sizes))]
    if speed and ex.points.speed > 0:
        steps.append("timing")
    if speed and ex.pipeline is not None:
        steps.append("pipeline")
    task = {"chapter": ex.chapter, "exercise": ex.name, "source": source, "launch": cfg,
            "seed": session.new_seed(), "cap": MESSAGE_CAP, "harness": HARNESS_MODULE,
            "min_cc": list(ex.min_cc)}
    results, outcome, printf = _run_steps(task, steps, ex)
    early = _no_verdict(ex, outcome, session, extra)
    if early:
        return early
    report = _assemble(ex, steps, results, dict(extra, printf=printf))
    report.duration_s = time.monotonic() - t0
    return report


def _no_verdict(ex, outcome, session: Session, extra: dict) -> ExerciseReport | None:
    """Record the child's GPU in ``session`` and ``extra``; the report when nothing could be graded
    there (no usable GPU, or one older than the exercise needs), else None."""
    if outcome is not None and outcome.device:
        session.device = f"{outcome.device.get('name')} ({outcome.device.get('arch')})"
    extra["device"] = session.device
    if outcome is not None and outcome.nogpu:
        session.no_gpu = outcome.nogpu
        return _no_gpu_report(ex, outcome.nogpu, **extra)
    if outcome is not None and outcome.skipped:
        return policy.skipped_report(ex, outcome.skipped, **extra)
    return None


def _grade_call(ex: CallExercise, source: str | None, session: Session, extra: dict, t0: float) -> ExerciseReport:
    """A library-call exercise: the call cell read as data and checked here, then each size case made
    by the grader's driver in a child (a wrong call that faults the GPU costs that case only)."""
    try:
        call = parse_call_cell(source or "", ex.name)
        problem = ex.resolve("checker")(ex.name, call)
    except LaunchDataError as exc:
        problem = str(exc)
    if problem:
        return policy.score(ex, [], compile_failure=(Status.FAILED, problem), **extra)
    steps = [f"size:{i}" for i in range(len(ex.sizes))]
    task = {"chapter": ex.chapter, "exercise": ex.name, "call": call, "seed": session.new_seed(),
            "cap": MESSAGE_CAP, "harness": HARNESS_MODULE, "min_cc": list(ex.min_cc)}
    results, outcome, _ = _run_steps(task, steps, ex)
    early = _no_verdict(ex, outcome, session, extra)
    if early:
        return early
    report = policy.score(ex, _size_results(ex, steps, results), **extra)
    report.duration_s = time.monotonic() - t0
    return report


def _assemble(ex, steps, results, extra) -> ExerciseReport:
    comp, _ = results.get(0, ({"status": Status.ERROR, "message": "the compile step did not run"}, True))
    notes = list(comp.get("notes") or [])
    extra = dict(extra, compile_log=comp.get("log", ""))
    if comp.get("status") != "ok":
        return policy.score(ex, [], compile_failure=(comp.get("status", Status.ERROR), comp.get("message", "")),
                            notes=notes, **extra)
    sizes = _size_results(ex, steps, results)
    speed, timing_failure = None, None
    if "timing" in steps:
        data, _ = results.get(steps.index("timing"), ({"status": Status.NOT_RUN}, False))
        if data.get("status") == "ok":
            speed = SpeedResult(**data["speed"])
            if speed.note:
                notes.append(speed.note)
        elif data.get("status") not in (Status.NOT_RUN, None):
            timing_failure = SizeResult(sizes=data.get("sizes", {}), status=data["status"],
                                        message=data.get("message", ""))
    pipeline, pipeline_failure = None, None
    if "pipeline" in steps:
        data, _ = results.get(steps.index("pipeline"), ({"status": Status.NOT_RUN}, False))
        if data.get("status") == "ok":
            pipeline = PipelineResult(**data["pipeline"])
            if pipeline.note:
                notes.append(pipeline.note)
        elif data.get("status") not in (Status.NOT_RUN, None):
            pipeline_failure = SizeResult(sizes=data.get("sizes", {}), status=data["status"],
                                          message=data.get("message", ""))
    return policy.score(ex, sizes, speed, pipeline=pipeline, timing_failure=timing_failure,
                        pipeline_failure=pipeline_failure, notes=notes, **extra)


def speed_trials(chapter: str, exercise: str, source: str, *, launch: dict | None = None, trials: int = 20,
                 session: Session | None = None) -> list:
    """Repeat the speed verdict ``trials`` times in one child (for measuring the grader's stability).

    Returns one `SpeedResult` per trial, or the failure dict of the step that stopped them.
    """
    session = session or Session()
    ex = get_exercise(chapter, exercise)
    cfg, problem = _prepare(ex, source, launch)
    if problem:
        raise ValueError(f"{exercise}: {problem[1]}")
    steps = ["compile"] + ["timing"] * trials
    task = {"chapter": ex.chapter, "exercise": ex.name, "source": source, "launch": cfg,
            "seed": session.new_seed(), "cap": MESSAGE_CAP, "harness": HARNESS_MODULE,
            "min_cc": list(ex.min_cc)}
    results, outcome, _ = _run_steps(task, steps, ex)
    if outcome is not None and outcome.nogpu:
        raise RuntimeError(f"needs a GPU: {outcome.nogpu}")
    out = []
    for i in range(1, len(steps)):
        data, _ = results.get(i, ({"status": Status.NOT_RUN}, False))
        out.append(SpeedResult(**data["speed"]) if data.get("status") == "ok" else data)
    return out


def _exercise_of_file(sub: Submission, names: list, exercise: str | None) -> str:
    if exercise:
        return exercise
    from pathlib import Path
    p = Path(sub.path)
    for cand in (p.stem, p.parent.name):
        if cand in names:
            return cand
    raise SpecError(f"{sub.path}: cannot tell which exercise this file is for; name it after one "
                    f"({', '.join(names)}), put it in a folder of that name, or pass --exercise."
                    + did_you_mean(p.stem, names))


def grade_submission(sub: Submission, *, exercise: str | None = None, session: Session | None = None,
                     speed: bool = True) -> list:
    """ExerciseReports for every exercise of the submission's chapter (or just ``exercise``)."""
    session = session or Session()
    if not sub.chapter:
        raise SpecError(f"{sub.path}: cannot tell the chapter (no NN_topic in the file or folder names); "
                        f"pass --chapter (one of: {', '.join(chapters())})")
    exercises = [e.name for e in load_chapter(sub.chapter)]
    if sub.single_exercise:
        name = _exercise_of_file(sub, exercises, exercise)
        get_exercise(sub.chapter, name)
        source = next(iter(sub.kernels.values()))
        return [grade_source(sub.chapter, name, source, submission=sub.label, session=session, speed=speed)]
    if exercise:
        get_exercise(sub.chapter, exercise)
        exercises = [exercise]
    out = []
    for name in exercises:
        ex = get_exercise(sub.chapter, name)
        problem = sub.problems.get(name) or sub.problems.get("*")
        if problem:
            out.append(_fail(ex, Status.FAILED, problem, submission=sub.label))
            continue
        out.append(grade_source(sub.chapter, name, sub.kernels.get(name), launch=sub.launches.get(name),
                                submission=sub.label, session=session, speed=speed))
    return out


def grade_path(path, *, chapter: str | None = None, exercise: str | None = None, progress: bool = False,
               seed: int | None = None, speed: bool = True) -> Report:
    """Grade a notebook, a .cu file, or a folder of submissions. Raises `SpecError` on usage errors."""
    if chapter:
        load_chapter(chapter)
    subs = find_submissions(path, chapter=chapter, known_chapters=chapters())
    if not subs:
        raise SpecError(f"{path}: no .ipynb or .cu files found")
    session = Session(seed=seed)
    report = Report()
    it = subs
    if progress and len(subs) > 1:
        from tqdm import tqdm
        it = tqdm(subs, desc="grading", unit="submission")
    for sub in it:
        report.exercises.extend(grade_submission(sub, exercise=exercise, session=session, speed=speed))
    report.device = session.device
    return report
