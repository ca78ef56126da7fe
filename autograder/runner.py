"""Grade kernels in spawned children, and put their step results together into reports.

The parent never imports CuPy: it checks what it can as text (size, includes, signature, LAUNCH data),
compiles in a confined compile child, then runs the steps (load, each size, timing, pipeline) in run
children, restarting a fresh child after a crash or a kill, so one illegal address or hang costs one step
only. Each grading has a private folder (0700) for the children's log, temp files and caches, removed
at the end; the size cases are the spec's public ones plus hidden ones drawn from the grading's secret seed.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import shutil
import signal
import tempfile
import threading
import time

from . import compiling, counters, policy, triton_build
from .compiling import choose_arch
from .extract import Submission, collect_submissions
from .hidden import draw_cases
from .launchcfg import LaunchDataError, launch_from_source, merge_launch, parse_call_cell, reference_launch
from .loader import chapters, get_exercise, load_chapter, reference_source
from .ring import gpus_needed
from .report import ExerciseReport, PipelineResult, Report, SizeResult, SpeedResult, Status
from .signature import compare_signature
from .source_check import check_source
from .spec import CallExercise, SpecError, did_you_mean
from .supervise import PRINTF_TAIL_BYTES, run_child, run_steps, signal_name
from .tensormaps import launch_problem, runs_on
from .triton_source import check_source as check_triton_source, launch_from_python
from .versions import spec_version
from .worker import COMPILE_TIMEOUT_S, MESSAGE_CAP

__all__ = ["grade_source", "grade_submission", "grade_path", "speed_trials", "Session", "PRINTF_TAIL_BYTES"]

HARNESS_MODULE = None  # None: autograder.harness; CPU tests name a fake one for the children to use
COMPILE_CAP = 96 << 20  # the compile child's one message carries the cubins (see compiling.MAX_CUBIN_BYTES)


@dataclasses.dataclass
class Session:
    """State shared across the exercises of one grading run (so 'no GPU' is found out once)."""

    no_gpu: str | None = None
    device: str = ""
    seed: int | None = None  # fixed only for debugging; normally fresh from os.urandom per exercise
    gpu: dict | None = None  # the probe's answer: name, cc, arch, l2_bytes, sm_count, max_clock_mhz
    references: dict = dataclasses.field(default_factory=dict)  # (chapter, exercise, arch) -> program data
    # gradings of this session may run side by side on its GPU: their run children share a lock (gpulock.py)
    shared_gpu: bool = False
    lock_dir: str | None = None
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    def new_seed(self) -> int:
        return self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "little")

    def gpu_lock(self) -> str | None:
        """The lock folder the run children of this session share, when gradings overlap."""
        if not self.shared_gpu:
            return None
        with self._lock:
            if self.lock_dir is None:
                self.lock_dir = tempfile.mkdtemp(prefix="autograder-gpu-")
                atexit.register(shutil.rmtree, self.lock_dir, True)  # each Dask worker makes one per run
            return self.lock_dir

    def probe(self) -> None:
        """Ask a child which GPU this is, once per session (the parent never initializes CUDA)."""
        with self._lock:
            self._probe()

    def _probe(self) -> None:
        if self.gpu is not None or self.no_gpu:
            return
        out = run_child({"phase": "probe", "harness": HARNESS_MODULE, "cap": MESSAGE_CAP})
        if out.device:
            self.gpu = {k: v for k, v in out.device.items() if k != "kind"}
            self.device = f"{self.gpu.get('name')} ({self.gpu.get('arch')})"
        else:
            self.no_gpu = out.nogpu or f"the GPU probe did not answer ({signal_name(out.exitcode)})"


@contextlib.contextmanager
def _private_dir():
    path = tempfile.mkdtemp(prefix="autograder-")  # 0700: no other user reads a log or a cubin
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _size_results(steps, results, cases, hidden_from: int) -> list:
    out = []
    for i, step in enumerate(steps):
        if not step.startswith("size:"):
            continue
        idx = int(step.split(":", 1)[1])
        data, _ = results.get(i, ({"status": Status.NOT_RUN, "message": ""}, False))
        sizes = data.get("sizes") or {k: repr(v) for k, v in cases[idx].items()}
        out.append(SizeResult(sizes=sizes, status=data.get("status", Status.ERROR), message=data.get("message", ""),
                              ref_ms=data.get("ref_ms"), hidden=idx >= hidden_from))
    return out


def _fail(ex, status: str, reason: str, **extra) -> ExerciseReport:
    extra.setdefault("spec_version", spec_version(ex.chapter))
    return ExerciseReport(chapter=ex.chapter, exercise=ex.name, status=status, points=0.0,
                          max_points=ex.max_points, reason=reason, **extra)


def _no_gpu_report(ex, reason: str, compiled_for: str = "", **extra) -> ExerciseReport:
    """Nothing could run here; ``compiled_for``: the arch the student's kernel compiled for, to say so."""
    tool = "Triton" if getattr(ex, "language", "cuda") == "triton" else "NVRTC"
    done = (f"Your kernel compiles ({tool}, {compiled_for}); running it on the test sizes needs a GPU. "
            if compiled_for else "")
    return _fail(ex, Status.NEEDS_GPU, f"needs a GPU: not graded here. {done}{reason}", **extra)


def _source_problem(source: str, first_line: int) -> str:
    """`check_source`'s verdict, its line numbers counted from ``first_line`` (as the student's cell shows)."""
    problem = check_source(source)
    if problem and first_line > 1:
        renumbered = check_source("\n" * (first_line - 1) + source)  # blank lines shift every "line N"
        if renumbered.startswith("line "):
            problem = renumbered
    return problem


def _prepare(ex, source, launch, cases, first_line: int = 1):
    """(cfg, None) or (None, (status, message)) from the checks that need no GPU."""
    if not source or not source.strip():
        return None, (Status.FAILED, (
            f"no kernel found for {ex.name}: put it in a `%%cuda --name {ex.name}` cell (or a cell tagged "
            f"kernel:{ex.name})."))
    triton = getattr(ex, "language", "cuda") == "triton"
    problem = (check_triton_source(source) if triton else _source_problem(source, first_line)) \
        or compare_signature(ex, source)
    if problem:
        return None, (Status.COMPILE_ERROR, problem)
    try:
        if launch is None:
            launch = launch_from_python(source) if triton else launch_from_source(source)
        cfg = merge_launch(ex, launch)
    except LaunchDataError as exc:
        return None, (Status.FAILED, str(exc))
    except (MemoryError, RecursionError):
        return None, (Status.FAILED, "the LAUNCH data is too deeply nested to read; write a flat literal dict "
                                     "such as {\"block\": 256}")
    problem = launch_problem(ex, cfg)  # a TMA map's box from the student's tile sizes
    if problem:
        return None, (Status.FAILED, f"LAUNCH {cfg} does not work for {ex.name}: {problem}")
    from .spec import check_launch_result
    for case in cases:
        sizes = ex.resolve_sizes(case, 64 << 20)
        try:
            bad = check_launch_result(ex.launch(dict(sizes), dict(cfg)))
        except Exception as exc:
            bad = f"{type(exc).__name__}: {exc}"
        if bad:
            return None, (Status.FAILED, f"LAUNCH {cfg} does not work for {ex.name} at {ex.size_label(sizes)}: {bad}")
    return cfg, None


def _run(ex, private: str, steps: list, **fields) -> tuple:
    """Run ``steps`` of ``ex`` in run children with the grading's private folder; what `run_steps` returns."""
    task = {"chapter": ex.chapter, "exercise": ex.name, "cap": MESSAGE_CAP, "harness": HARNESS_MODULE,
            "min_cc": list(ex.min_cc), "arch": getattr(ex, "arch", None), "private_dir": private, **fields}
    return run_steps(task, steps, os.path.join(private, "run.log"))


def _compile_failure(outcome) -> dict:
    """The compile child's verdict when it sent none: stopped for time or memory is the student's result."""
    code = outcome.exitcode
    if outcome.end == "killed":
        why = f"took longer than {COMPILE_TIMEOUT_S:.0f} s to compile and was stopped"
    elif code is not None and code < 0 and -code == getattr(signal, "SIGXCPU", -1):
        why = f"used more than {compiling.COMPILE_CPU_S} s of CPU time to compile and was stopped"
    elif code is None or code >= 0:
        return {"status": Status.ERROR, "message": (
            f"the compile process ended without a result ({signal_name(code)}): a grader problem")}
    else:
        why = f"made the compiler fail ({signal_name(code)}), most likely by running out of memory"
    return {"status": Status.COMPILE_ERROR, "message": (
        f"your source {why}. Deep template recursion, huge unrolled loops or enormous constant tables do this; "
        "simplify the source.")}


def _compile(ex, source: str, session: Session, private: str, first_line: int = 1, cfg=None, cases=()) -> dict:
    """Compile the student's source (and, once per session and arch, the reference) in a compile child;
    compile errors are numbered from ``first_line``, the cell line where the source starts."""
    if getattr(ex, "language", "cuda") == "triton":
        return _compile_triton(ex, source, session, private, cfg, cases)
    ref_source = reference_source(ex)
    # an arch-specific target (ex.arch) is the one arch; a GPU it cannot run on skips the exercise, never here
    arch = ex.arch or choose_arch(session.gpu["cc"] if session.gpu else None, ref_source, source)
    key = (ex.chapter, ex.name, arch)
    task = {"phase": "compile", "chapter": ex.chapter, "exercise": ex.name, "source": source, "arch": arch,
            "first_line": first_line,
            "harness": HARNESS_MODULE, "cap": COMPILE_CAP, "private_dir": private,
            "log_path": os.path.join(private, "compile.log"),
            "compile_memory": compiling.COMPILE_MEMORY_BYTES, "compile_cpu_s": compiling.COMPILE_CPU_S}
    if key not in session.references:
        task["reference_source"] = ref_source
    outcome = run_child(task)
    data, _ = outcome.results.get(0) or outcome.results.get(-1) or (None, True)  # -1: a grader bug
    if data is None:
        return _compile_failure(outcome)
    if data.get("status") == "ok":
        data.setdefault("arch", arch)
        if "reference" in data:
            session.references[key] = data.pop("reference")
        data["programs"] = {"student": data.pop("student"), "reference": session.references[key]}
    return data


def _compile_task(ex, private: str, **fields) -> dict:
    return {"phase": "compile", "chapter": ex.chapter, "exercise": ex.name, "harness": HARNESS_MODULE,
            "cap": COMPILE_CAP, "private_dir": private, "log_path": os.path.join(private, "compile.log"),
            "compile_memory": compiling.COMPILE_MEMORY_BYTES, "compile_cpu_s": compiling.COMPILE_CPU_S, **fields}


def _compile_triton(ex, source: str, session: Session, private: str, cfg: dict, cases) -> dict:
    """A Triton submission: compiled in a child of its own (the only process that executes its Python, confined
    to a folder of its own), then inspected, and the reference compiled, in a child that runs no student code."""
    # no GPU: the exercise's oldest target, so its compile verdicts (tensor cores in the SASS) are the real ones
    oldest = max((7, 5), tuple(ex.min_cc))
    arch = choose_arch(session.gpu["cc"]) if session.gpu else f"sm_{oldest[0]}{oldest[1]}"
    keys = triton_build.specializations(ex, cases, int((session.gpu or {}).get("l2_bytes") or 64 << 20))
    own = os.path.join(private, "student")
    os.makedirs(own, 0o700, exist_ok=True)   # speed_trials and a retried grading reuse the folder
    outcome = run_child(_compile_task(ex, own, language="triton", untrusted_python=True, source=source, arch=arch,
                                      launch=dict(cfg), keys=keys, max_step_s=COMPILE_TIMEOUT_S))
    data, _ = outcome.results.get(0) or outcome.results.get(-1) or (None, True)
    if data is None:
        return _compile_failure(outcome)
    if data.get("status") != "ok":
        message = str(data.get("message", ""))[:8000]  # from the student's own process: shown, never trusted
        return {"status": Status.COMPILE_ERROR, "message": message}
    ref_keys = triton_build.all_keys(ex) or keys
    key = (ex.chapter, ex.name, arch, "triton", tuple(ref_keys))
    task = _compile_task(ex, private, language="triton", arch=arch, keys=ref_keys, student=data.get("student"))
    if key not in session.references:
        ref = reference_source(ex)
        task.update(reference_source=ref, reference_launch=merge_launch(ex, launch_from_python(ref)))
    outcome = run_child(task)
    checked, _ = outcome.results.get(0) or outcome.results.get(-1) or (None, True)
    if checked is None:
        return {"status": Status.ERROR, "message": (
            f"the grader's Triton compile child ended without a result ({signal_name(outcome.exitcode)})")}
    if checked.get("status") != "ok":
        return checked
    if "reference" in checked:
        session.references[key] = checked.pop("reference")
    return {"status": "ok", "arch": arch, "log": "", "notes": checked.get("notes") or [],
            "techniques": checked.get("techniques") or [],
            "programs": {"student": data["student"], "reference": session.references[key]}}


def grade_source(chapter: str, exercise: str, source: str | None, *, launch: dict | None = None,
                 submission: str = "", session: Session | None = None, speed: bool = True,
                 first_line: int = 1) -> ExerciseReport:
    """Grade one kernel source for one exercise; never raises for student errors.

    ``first_line`` is the line number of the source's first line where the student wrote it: 2 for the
    body of a ``%%cuda`` cell (Jupyter numbers the magic line 1), so that the line numbers of compile
    errors and source problems are the ones the student sees in the cell.

    Raises
    ------
    SpecError
        When the chapter or exercise does not exist or its spec is invalid.
    """
    session = session or Session()
    ex = get_exercise(chapter, exercise)
    t0 = time.monotonic()
    extra = {"submission": submission, "spec_version": spec_version(chapter)}  # every report below gets it
    if isinstance(ex, CallExercise):
        return _grade_call(ex, source, session, extra, t0, speed)
    seed = session.new_seed()
    cases = list(ex.sizes) + draw_cases(ex, seed)
    cfg, problem = _prepare(ex, source, launch, cases, first_line)
    if problem:
        return policy.score(ex, [], compile_failure=problem, **extra)
    session.probe()
    if session.gpu and (not runs_on(ex, session.gpu["cc"]) or session.gpu.get("gpu_count", 1) < gpus_needed(ex)):
        # nothing to compile for a GPU that cannot grade it, or too few GPUs for a ring exercise
        return policy.skipped_report(ex, session.gpu.get("arch", "?"), gpu_count=session.gpu.get("gpu_count", 1),
                                     **dict(extra, device=session.device, cc=session.gpu["cc"]))
    with _private_dir() as private:
        comp = _compile(ex, source, session, private, first_line, cfg=cfg, cases=cases)
        notes = list(comp.get("notes") or [])
        extra["compile_log"] = comp.get("log", "")
        if comp.get("status") != "ok":
            return policy.score(ex, [], compile_failure=(comp.get("status", Status.ERROR), comp.get("message", "")),
                                notes=notes, **extra)
        # technique checks that failed withhold the speed points (policy.score); verdicts with no GPU are notes
        techniques = [t["message"] for t in comp.get("techniques") or () if t.get("passed") is False]
        if session.no_gpu:
            return _no_gpu_report(ex, session.no_gpu, comp["arch"], notes=notes + [
                f"On a GPU the speed points would be withheld: {m}" for m in techniques] + counters.pending(ex),
                **extra)
        steps = ["load"] + [f"size:{i}" for i in range(len(cases))]
        if speed and ex.points.speed > 0:
            steps.append("timing")
        if speed and ex.pipeline is not None:
            steps.append("pipeline")
        results, outcome, printf = _run(ex, private, steps, programs=comp["programs"], launch=cfg, seed=seed,
                                        cases=cases, gpu_lock=session.gpu_lock(), reference_launch=(reference_launch(ex) if ex.pipeline
                                                                       is not None else None))
        early = _no_verdict(ex, outcome, session, extra)
        if early:
            return early
        if speed and counters.counter_checks(ex) and _all_passed(steps, results, cases, len(ex.sizes)):
            techniques, notes = _counted(ex, comp, cfg, seed, session, private, techniques, notes,
                                         hidden=cases[len(ex.sizes):])
    report = _assemble(ex, steps, results, cases, len(ex.sizes), dict(extra, printf=printf), notes, speed,
                       techniques)
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
        return policy.skipped_report(ex, outcome.skipped, gpu_count=outcome.skipped_gpus, why=outcome.skipped_why,
                                     **extra)
    return None


def _grade_call(ex: CallExercise, source: str | None, session: Session, extra: dict, t0: float,
                speed: bool = True) -> ExerciseReport:
    """A library-call exercise: the call cell read as data and checked here, then each size case made
    by the grader's driver in a child (a wrong call that faults the GPU costs that case only), then the
    pipeline's overlap when the exercise has one."""
    try:
        call = parse_call_cell(source or "", ex.name, ex.parser)
        problem = ex.resolve("checker")(ex.name, call)
    except LaunchDataError as exc:
        problem = str(exc)
    except (MemoryError, RecursionError):
        problem = f"the {ex.name} call is too deeply nested to read; write a flat literal dict"
    if problem:
        return policy.score(ex, [], compile_failure=(Status.FAILED, problem), **extra)
    if session.no_gpu:  # only after the checks every submission gets: one case, one verdict
        return _no_gpu_report(ex, session.no_gpu, **extra)
    seed = session.new_seed()
    cases = list(ex.sizes) + draw_cases(ex, seed)
    steps = [f"size:{i}" for i in range(len(cases))]
    timed = {}
    if ex.pipeline is not None and speed:  # the reference's pipeline runs first, as a kernel's does
        steps.append("pipeline")
        timed["reference_call"] = parse_call_cell(reference_source(ex), ex.name, ex.parser)
    with _private_dir() as private:
        results, outcome, _ = _run(ex, private, steps, call=call, seed=seed, cases=cases,
                                   gpu_lock=session.gpu_lock(), **timed)  # cuBLAS's work shares the GPU too
    early = _no_verdict(ex, outcome, session, extra)
    if early:
        return early
    pipeline, failure = None, None
    if "pipeline" in steps:
        data, failure = _step_failure(results, steps, "pipeline")
        pipeline = PipelineResult(**data["pipeline"]) if data else None
    report = policy.score(ex, _size_results(steps, results, cases, len(ex.sizes)), pipeline=pipeline,
                          pipeline_failure=failure, speed_graded=speed, **extra)
    report.duration_s = time.monotonic() - t0
    return report


def _all_passed(steps, results, cases, hidden_from) -> bool:
    sizes = _size_results(steps, results, cases, hidden_from)
    return bool(sizes) and all(r.status == Status.PASSED for r in sizes)


def _counted(ex, comp, cfg, seed, session, private, techniques, notes, hidden=()) -> tuple:
    """(technique failures, notes) with the counter checks decided: the student's kernel profiled once in a
    grader-owned process under ncu (autograder/counters.py), at one of the ``hidden`` size cases."""
    verdicts = counters.measure(ex, comp["programs"]["student"], cfg, seed, private,
                                int((session.gpu or {}).get("l2_bytes") or 0), lock_dir=session.gpu_lock(),
                                hidden=hidden)
    failed = [v.message for v in verdicts if v.passed is False]
    said = [v.message for v in verdicts if v.passed is None]
    said += [f"{v.name}: checked with Nsight Compute, passed." for v in verdicts if v.passed]
    return list(techniques) + failed, list(notes) + said


def _step_failure(results, steps, name):
    data, _ = results.get(steps.index(name), ({"status": Status.NOT_RUN}, False))
    if data.get("status") == "ok":
        return data, None
    if data.get("status") in (Status.NOT_RUN, None):
        return None, None
    return None, SizeResult(sizes=data.get("sizes", {}), status=data["status"], message=data.get("message", ""))


def _assemble(ex, steps, results, cases, hidden_from, extra, notes, speed_graded, techniques=()) -> ExerciseReport:
    load, _ = results.get(0, ({"status": Status.ERROR, "message": "the kernels were not loaded"}, True))
    if load.get("status") != "ok":
        return policy.score(ex, [], compile_failure=(load.get("status", Status.ERROR), load.get("message", "")),
                            notes=notes, **extra)
    sizes = _size_results(steps, results, cases, hidden_from)
    speed, timing_failure = None, None
    if "timing" in steps:
        data, timing_failure = _step_failure(results, steps, "timing")
        if data:
            speed = SpeedResult(**data["speed"])
            if speed.note:
                notes.append(speed.note)
    pipeline, pipeline_failure = None, None
    if "pipeline" in steps:
        data, pipeline_failure = _step_failure(results, steps, "pipeline")
        if data:
            pipeline = PipelineResult(**data["pipeline"])
            if pipeline.note:
                notes.append(pipeline.note)
    return policy.score(ex, sizes, speed, pipeline=pipeline, timing_failure=timing_failure,
                        pipeline_failure=pipeline_failure, notes=notes, speed_graded=speed_graded,
                        technique_failures=techniques, **extra)


def speed_trials(chapter: str, exercise: str, source: str, *, launch: dict | None = None, trials: int = 20,
                 session: Session | None = None) -> list:
    """Repeat the speed verdict ``trials`` times in one child (for measuring the grader's stability).

    Returns one `SpeedResult` per trial, or the failure dict of the step that stopped them.
    """
    session = session or Session()
    ex = get_exercise(chapter, exercise)
    cfg, problem = _prepare(ex, source, launch, list(ex.sizes))
    if problem:
        raise ValueError(f"{exercise}: {problem[1]}")
    session.probe()
    if session.no_gpu:
        raise RuntimeError(f"needs a GPU: {session.no_gpu}")
    with _private_dir() as private:
        comp = _compile(ex, source, session, private, cfg=cfg, cases=list(ex.sizes))
        if comp.get("status") != "ok":
            raise ValueError(f"{exercise}: {comp.get('message')}")
        steps = ["load"] + ["timing"] * trials
        results, _, _ = _run(ex, private, steps, programs=comp["programs"], launch=cfg, seed=session.new_seed())
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
        ex = get_exercise(sub.chapter, name)
        if sub.problems.get("*"):
            return [_fail(ex, Status.FAILED, sub.problems["*"], submission=sub.label)]
        source = next(iter(sub.kernels.values()))
        return [_noted(grade_source(sub.chapter, name, source, submission=sub.label, session=session, speed=speed),
                       sub, name)]
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
        out.append(_noted(grade_source(sub.chapter, name, sub.kernels.get(name), launch=sub.launches.get(name),
                                       submission=sub.label, session=session, speed=speed,
                                       first_line=sub.first_lines.get(name, 1)), sub, name))
    return out


def _noted(rep: ExerciseReport, sub: Submission, name: str) -> ExerciseReport:
    if name in sub.notes:
        rep.notes.insert(0, sub.notes[name])
    return rep


def grade_path(path, *, chapter: str | None = None, exercise: str | None = None, progress: bool = False,
               seed: int | None = None, speed: bool = True) -> Report:
    """Grade a notebook, a .cu file, or a folder of submissions. Raises `SpecError` on usage errors."""
    if chapter:
        load_chapter(chapter)
    subs, ignored = collect_submissions(path, chapter=chapter, known_chapters=chapters(),
                                        exercises_of=lambda ch: [e.name for e in load_chapter(ch)])
    if not subs:
        raise SpecError(f"{path}: nothing to grade" + (":\n  " + "\n  ".join(ignored) if ignored
                                                       else ": no .ipynb or .cu files found"))
    session = Session(seed=seed)
    report = Report(ignored=ignored)
    it = subs
    if progress and len(subs) > 1:
        from tqdm import tqdm
        it = tqdm(subs, desc="grading", unit="submission")
    for sub in it:
        report.exercises.extend(grade_submission(sub, exercise=exercise, session=session, speed=speed))
    report.device = session.device
    return report
