"""The batch on Dask distributed: one worker per GPU (started here, or a running cluster's), results
committed to the store as each arrives, a progress bar with ETA, then the gradebook and the report.

Dask schedules, retries the tasks of a worker that died (a GPU that fell off) on the others, and gives up
on a task that killed workers repeatedly; that job alone gets a "grader error" row, graded again next run.

A ring exercise (chapter 16: autograder/ring.py) needs several GPUs of the host at once, which no one-GPU worker
has: on a local cluster its jobs are graded after the workers' jobs (their GPUs then free), one at a time, by
this process with the batch's GPUs visible, as `python -m autograder grade` would grade them on this host.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time

from .jobs import discover
from .store import ResultStore
from .work import grade_job, problem_report, worker_gpu

__all__ = ["BatchResult", "grade_class", "local_gpus", "local_cluster", "default_per_gpu", "GIB_PER_GRADING",
           "MAX_PER_GPU"]

# Measured on an H100 (benchmarks/results/class-batch-*.md): 8 chapter-01 gradings at once peak near 19 GiB
# together, 12 near 21 GiB (CUDA contexts, the timing size's buffers, CuPy's pools); 6 GiB each leaves room
# for chapters with larger buffers. More than 8 at once was no faster: they queue for the GPU lock.
GIB_PER_GRADING = 6
MAX_PER_GPU = 8


@dataclasses.dataclass
class BatchResult:
    rows: list                 # the standing result of every job, as store rows
    graded: int = 0            # graded in this run
    reused: int = 0            # already in the store (same kernel, spec version, GPU model)
    lost: int = 0              # not graded: worker lost repeatedly, or the run was interrupted
    elapsed_s: float = 0.0
    gpus: dict = dataclasses.field(default_factory=dict)   # worker -> GPU model
    ignored: list = dataclasses.field(default_factory=list)
    gradebook: object = None   # gradebook.WriteSummary when a gradebook was written
    interrupted: bool = False
    per_gpu: int | None = None  # gradings at a time per GPU on a local cluster (None: a running scheduler's)

    @property
    def per_minute(self) -> float:
        return 60.0 * self.graded / self.elapsed_s if self.elapsed_s > 0 else 0.0


def local_gpus() -> list:
    """This host's GPUs as CUDA_VISIBLE_DEVICES entries (honouring an existing CUDA_VISIBLE_DEVICES), from
    NVML; [] without a usable GPU."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return []


def default_per_gpu(gpus: list) -> int:
    """Gradings at a time per GPU: one per GIB_PER_GRADING GiB of the smallest GPU's memory, 1 to MAX_PER_GPU
    (MAX_PER_GPU when NVML cannot say)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            sizes = []
            for g in gpus:
                h = (pynvml.nvmlDeviceGetHandleByIndex(int(g)) if str(g).isdigit()
                     else pynvml.nvmlDeviceGetHandleByUUID(str(g)))
                sizes.append(pynvml.nvmlDeviceGetMemoryInfo(h).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return MAX_PER_GPU
    if not sizes:
        return MAX_PER_GPU
    return max(1, min(MAX_PER_GPU, int(min(sizes) // (GIB_PER_GRADING << 30))))


def local_cluster(gpus: list, per_gpu: int, env: dict | None = None):
    """A Dask cluster on this host: one worker process per GPU, each seeing only its GPU and running
    ``per_gpu`` gradings at a time (one worker without CUDA devices when there is no GPU)."""
    import dask
    from distributed import Nanny, Scheduler, SpecCluster
    # grading workers start grading children of their own, which a daemonic process may not
    dask.config.set({"distributed.worker.daemon": False})
    specs = {}
    for g in gpus or [None]:
        wenv = dict(env or {})
        if g is not None:
            wenv["CUDA_VISIBLE_DEVICES"] = g
        name = f"gpu{g}" if g is not None else "cpu"
        specs[name] = {"cls": Nanny, "options": {"nthreads": per_gpu, "env": wenv, "name": name,
                                                 "memory_limit": 0}}
    return SpecCluster(workers=specs, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                       silence_logs=logging.ERROR)


def _progress(total: int, enabled: bool):
    if not enabled or total == 0:
        return None
    try:
        from tqdm.auto import tqdm  # a widget in a notebook, a bar with ETA in a terminal
    except ImportError:
        return None
    return tqdm(total=total, desc="grading", unit="job")


def grade_class(path, *, chapters=None, exercise: str | None = None, results: str | None = None,
                gradebook: str | None = None, report_dir: str | None = None, scheduler: str | None = None,
                gpus=None, per_gpu: int | None = None, speed: bool = True, progress: bool = True,
                reset_overrides: bool = False, regrade: bool = False, harness: str | None = None,
                worker_env: dict | None = None, log=print) -> BatchResult:
    """Grade every kernel exercise of every submission under ``path``; see `python -m autograder grade-class`.

    ``results`` is the store (default: ``<path>/../grading/results.sqlite``); ``gradebook`` an nbgrader
    database URL to write the points into; ``scheduler`` a Dask scheduler address (default: a cluster on
    this host, one worker per GPU in ``gpus`` or every GPU NVML sees). ``harness`` and ``worker_env`` are
    for the grader's own tests.
    """
    from pathlib import Path
    jobs, ignored = discover(path, chapter_names=chapters, exercise=exercise)
    results = results or str(Path(path).resolve().parent / "grading" / "results.sqlite")
    t0 = time.monotonic()
    out = BatchResult(rows=[], ignored=ignored)
    with ResultStore(results) as store:
        client, cluster, out.per_gpu = _connect(scheduler, gpus, per_gpu, worker_env)
        host_gpus = local_gpus() if gpus is None else [str(g) for g in gpus]
        try:
            out.gpus = client.run(worker_gpu, harness) if client is not None else {}
            models = sorted(set(out.gpus.values())) or None
            todo = [j for j in jobs if regrade or store.done(j, None if j.problem else models) is None]
            out.reused = len(jobs) - len(todo)
            log(f"{len(jobs)} job(s) in {len({(j.student, j.assignment) for j in jobs})} submission(s); "
                f"{out.reused} already graded, {len(todo)} to grade on "
                f"{', '.join(f'{w.rsplit(chr(47), 1)[-1]}: {m}' for w, m in sorted(out.gpus.items())) or 'no worker'}")
            # a running scheduler's workers are on other hosts, and this one's GPUs may be theirs: its ring jobs go
            # to those workers like the rest (one GPU each, so skipped: grade them where two GPUs are free)
            rings = [j for j in todo if not j.problem and _needs_all_gpus(j)] if scheduler is None else []
            out.interrupted = _run(client, [j for j in todo if j not in rings], store, speed, harness, out, progress)
            if rings and not out.interrupted:
                _close(client, cluster)   # the workers' GPUs are free: the rings take them all
                client = cluster = None
                out.interrupted = _run_rings(rings, store, speed, harness, out, host_gpus, log)
        finally:
            _close(client, cluster)
        out.rows = store.current(jobs)
    out.elapsed_s = time.monotonic() - t0
    if gradebook:
        from .gradebook import write_gradebook
        out.gradebook = write_gradebook(gradebook, out.rows, reset_overrides=reset_overrides)
    if report_dir:
        from .summary import write_report
        write_report(out, report_dir)
    return out


def _needs_all_gpus(job) -> bool:
    from ..loader import get_exercise
    from ..ring import gpus_needed
    try:
        return gpus_needed(get_exercise(job.assignment, job.exercise)) > 1
    except Exception:  # an unknown exercise is the worker's to report
        return False


def _run_rings(jobs, store, speed, harness, out: BatchResult, gpus: list, log) -> bool:
    """Ring exercises, one at a time in this process, every GPU of the batch visible; True when interrupted."""
    log(f"{len(jobs)} ring job(s) on {len(gpus)} GPU(s) together")
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    try:
        for job in jobs:
            try:
                res = grade_job(job.to_dict(), speed, harness)
                store.put(job, res["report"], res["gpu"], f"{res['worker']} (all GPUs)")
                out.graded += 1
            except KeyboardInterrupt:
                raise
            except Exception as exc:  # the grader failed on this job: its row only, graded again next run
                _lost(job, exc, store, out)
    except KeyboardInterrupt:
        return True
    finally:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before
    return False


def _connect(scheduler, gpus, per_gpu, worker_env):
    from distributed import Client
    if scheduler:
        return Client(scheduler), None, None
    gpus = local_gpus() if gpus is None else list(gpus)
    per_gpu = per_gpu or default_per_gpu(gpus)
    cluster = local_cluster(gpus, per_gpu, worker_env)
    return Client(cluster), cluster, per_gpu


def _close(client, cluster) -> None:
    for thing in (client, cluster):
        try:
            if thing is not None:
                thing.close()
        except Exception:
            pass


def _lost(job, exc, store, out: BatchResult) -> None:
    """A job the grading could not finish: a "grader error" row saying why, graded again on the next run."""
    rep = problem_report({**job.to_dict(), "problem": (
        f"not graded: {type(exc).__name__}: {exc}. Graded again on the next run.")})
    rep["status"] = "grader error"
    store.put(job, rep, "none", "lost")
    out.lost += 1


def _run(client, todo, store, speed, harness, out: BatchResult, progress: bool) -> bool:
    """Submit, and commit each result as it arrives; True when interrupted (Ctrl-C)."""
    from distributed import as_completed
    bar = _progress(len(todo), progress)
    by_key = {}
    futures = []
    for job in todo:
        if job.problem:  # decided without a GPU: no task
            rep = problem_report(job.to_dict())
            store.put(job, rep, "none", "reader")
            out.graded += 1
            if bar is not None:
                bar.update(1)
            continue
        fut = client.submit(grade_job, job.to_dict(), speed, harness, pure=False, retries=1,
                            key=f"grade-{job.student}-{job.assignment}-{job.exercise}-{job.content}")
        by_key[fut.key] = job
        futures.append(fut)
    try:
        for fut in as_completed(futures):
            job = by_key[fut.key]
            try:
                res = fut.result()
                store.put(job, res["report"], res["gpu"], res["worker"])
                out.graded += 1
            except Exception as exc:  # the task killed its workers (or the grader failed): this row only
                _lost(job, exc, store, out)
            if bar is not None:
                bar.update(1)
    except KeyboardInterrupt:
        for fut in futures:
            fut.cancel()
        return True
    finally:
        if bar is not None:
            bar.close()
    return False
