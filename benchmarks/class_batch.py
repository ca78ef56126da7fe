"""Class-scale grading throughput and agreement: `python -m benchmarks.class_batch`.

Builds a synthetic class from the grader's test corpus and the reference solutions (right, slow, wrong,
crashing, hanging, non-compiling and untouched kernels in fixed proportions), grades it with the batch
grader (`autograder.grade_class`, Dask, one worker per GPU), and compares every verdict with the serial
grading of the same kernel (`autograder.grade_source`, one at a time). Reports submissions per minute per
GPU and the verdict changes, and records them in benchmarks/results/class-batch-<gpu>.{json,md}.

  python -m benchmarks.class_batch --chapter 01_first_kernel --students 300 --repeats 3

With --gpu-counts, a scaling run instead: one class, its serial verdicts once, then the batch grader on the
first 1, 2, 4, ... GPUs (of CUDA_VISIBLE_DEVICES when it is set), each count's speedup and efficiency against
1 GPU and its verdicts against serial grading and against the 1-GPU batch, recorded in
benchmarks/results/class-scaling-<gpu>.{json,md}:

  python -m benchmarks.class_batch --chapter 01_first_kernel --students 150 --gpu-counts 1,2
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import json
import os
import platform
import random
import re
import shutil
import tempfile
import time
from pathlib import Path

import autograder

from . import _record

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "autograder" / "corpus"
# share of each kind of submission in a class (per exercise); the corpus files named here must exist
MIX = {"right": 0.55, "slow": 0.10, "wrong": 0.15, "crash": 0.05, "hang": 0.03, "compile": 0.07, "stub": 0.05}
KINDS = {  # corpus file stems by kind; "right" is the reference solution, "stub"/"compile" are made from it
    "01_first_kernel": {
        "saxpy": {"slow": ["slow"], "wrong": ["off_by_one", "wrong_one_size", "zero_output", "capped_at_max_n"],
                  "crash": ["illegal_address", "crash_while_timed"], "hang": ["infinite_loop"]},
        "rgb_to_gray": {"slow": ["block_16x16"], "wrong": ["no_bounds_check", "swapped_xy", "float_formula"],
                        "crash": ["no_bounds_check"], "hang": []},
    },
    "07_staged_gemm": {
        "sgemm_tiled": {"slow": ["coalesced_naive"], "wrong": ["replay_naive", "transposed_b_tile"],
                        "crash": ["illegal_address"], "hang": ["infinite_loop"]},
        "sgemm_regtile": {"slow": ["global_only"]},
    },
}


def _stub(source: str) -> str:
    """The reference with its body emptied: compiles, writes nothing."""
    head = source[:source.index("{", source.index("__global__")) + 1]
    return head + "\n    // YOUR CODE HERE\n}\n"


def kernels(chapter: str, exercise: str) -> dict:
    """kind -> list of kernel sources for one exercise."""
    ref = autograder.get_exercise(chapter, exercise)
    right = (ROOT / "solutions" / chapter / ref.source_file).read_text()
    out = {"right": [right], "stub": [_stub(right)], "compile": [right.replace("}", "} syntax error here", 1)]}
    for kind, stems in KINDS.get(chapter, {}).get(exercise, {}).items():
        files = [CORPUS / chapter / exercise / f"{s}.cu" for s in stems]
        out[kind] = [f.read_text() for f in files if f.is_file()]
    return {k: v for k, v in out.items() if v}


def build_class(chapter: str, students: int, root: Path, seed: int = 7) -> dict:
    """Write submitted/<student>/<chapter>/<chapter>.ipynb for a synthetic class; (student, exercise) -> kind."""
    rng = random.Random(seed)
    exercises = [e.name for e in autograder.load_chapter(chapter)]
    pools = {ex: kernels(chapter, ex) for ex in exercises}
    kinds = {}
    for i in range(students):
        student = f"s{i:03d}"
        cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                  "source": "%load_ext course"}]
        for ex in exercises:
            pool = pools[ex]
            names = [k for k in MIX if k in pool]
            kind = rng.choices(names, weights=[MIX[k] for k in names])[0]
            kinds[(student, ex)] = kind
            cells.append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                          "source": f"%%cuda --name {ex} --no-run\n{rng.choice(pool[kind])}"})
        nb = {"nbformat": 4, "nbformat_minor": 5, "cells": cells,
              "metadata": {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}}
        d = root / student / chapter
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{chapter}.ipynb").write_text(json.dumps(nb))
    return kinds


def kernel_key(exercise: str, source: str) -> str:
    return exercise + ":" + hashlib.sha256(source.encode()).hexdigest()[:16]


def serial_verdicts(chapter: str, root: Path, known: dict | None = None) -> dict:
    """kernel_key -> (status, points), each distinct kernel graded one at a time (those in ``known``, serial
    verdicts recorded on this GPU model by an earlier call, are not graded again)."""
    session = None
    seen = {k: tuple(v) for k, v in (known or {}).items()}
    for nb in sorted(root.glob(f"*/{chapter}/{chapter}.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            m = re.match(r"%%cuda --name (\w+) --no-run\n", cell["source"])
            if m and kernel_key(m.group(1), cell["source"][m.end():]) not in seen:
                ex, src = m.group(1), cell["source"][m.end():]
                session = session or autograder.Session()
                rep = autograder.grade_source(chapter, ex, src, session=session)
                seen[kernel_key(ex, src)] = (rep.status, rep.points)
    return seen


def _sources(chapter: str, root: Path) -> dict:
    """(student, exercise) -> the kernel source the class under ``root`` submitted."""
    sources = {}
    for nb in root.glob(f"*/{chapter}/{chapter}.ipynb"):
        for cell in json.loads(nb.read_text())["cells"]:
            m = re.match(r"%%cuda --name (\w+) --no-run\n", cell["source"])
            if m:
                sources[(nb.parent.parent.name, m.group(1))] = cell["source"][m.end():]
    return sources


def _changes(rows, serial: dict, sources: dict) -> list:
    """(student, exercise, serial verdict, batch verdict, feedback) of each batch row whose (status, points)
    differ from the serial grading of the same kernel."""
    def alone(row):
        return serial[kernel_key(row["exercise"], sources[(row["student"], row["exercise"])])]
    return [(row["student"], row["exercise"], alone(row), (row["status"], row["points"]), row["feedback"][:4000])
            for row in rows if alone(row) != (row["status"], row["points"])]


def _class(chapter: str, students: int, work: Path, known: dict | None, log) -> tuple:
    """Build the synthetic class under ``work`` and grade its distinct kernels serially: (root, kinds, serial
    verdicts, serial seconds, sources)."""
    root = work / "submitted"
    kinds = build_class(chapter, students, root)
    t0 = time.monotonic()
    serial = serial_verdicts(chapter, root, known)
    serial_s = time.monotonic() - t0
    log(f"{chapter}: {len(serial)} distinct kernels, {len(serial) - len(known or {})} graded serially in "
        f"{serial_s:.0f} s")
    return root, kinds, serial, serial_s, _sources(chapter, root)


def run(chapter: str, students: int, repeats: int, per_gpu: int | None, known: dict | None = None, trace: bool = False,
        log=print) -> dict:
    work = Path(tempfile.mkdtemp(prefix="class-batch-"))
    try:
        root, kinds, serial, serial_s, sources = _class(chapter, students, work, known, log)
        runs = []
        for r in range(repeats):
            trace_file = work / f"trace{r}.jsonl"
            if trace:
                os.environ[autograder.TRACE_ENV] = str(trace_file)  # the workers, their children and GPU locks inherit it
            try:
                res = autograder.grade_class(root, chapters=[chapter], results=str(work / f"store{r}.sqlite"),
                                             per_gpu=per_gpu, progress=False, log=log)
            finally:
                os.environ.pop(autograder.TRACE_ENV, None)
            changes = _changes(res.rows, serial, sources)
            gpus = collections.Counter(res.gpus.values())
            per_min = 60.0 * students / res.elapsed_s
            runs.append({"date": _record.utc_now(),
                         "chapter": chapter, "students": students, "per_gpu": res.per_gpu,
                         "elapsed_s": round(res.elapsed_s, 1), "submissions_per_minute": round(per_min, 1),
                         "per_minute_per_gpu": round(per_min / max(1, len(res.gpus)), 1), "gpus": dict(gpus),
                         "jobs": len(res.rows), "lost": res.lost, "verdict_changes": len(changes),
                         "changes": [list(map(str, c)) for c in changes[:20]],
                         "statuses": dict(collections.Counter(row["status"] for row in res.rows))})
            if trace and trace_file.exists():
                runs[-1]["trace"] = autograder.summarise_trace(trace_file)
                log("  where the time went: " + json.dumps(runs[-1]["trace"]))
            log(f"  repeat {r + 1}: {students} submissions in {res.elapsed_s:.1f} s = {per_min:.1f}/min on "
                f"{dict(gpus)}; {len(changes)} verdict change(s) against serial grading")
            for c in changes:
                log(f"    {c[0]} {c[1]}: serial {c[2]}, batch {c[3]}: {c[4]!r}")
        return {"chapter": chapter, "students": students, "per_gpu": per_gpu,
                "mix": dict(collections.Counter(kinds.values())), "distinct_kernels": len(serial),
                "serial_s": round(serial_s, 1), "serial": {k: list(v) for k, v in serial.items()}, "runs": runs}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def to_markdown(result: dict) -> str:
    d = result["device"]
    lines = [f"# Class-scale grading on {d['name']} x{d['count']}", "",
             f"{result['date']}; driver {d['driver']}, Python {result['python']}, CuPy {result['cupy']}, "
             f"Dask {result['dask']}. `python -m benchmarks.class_batch` (see its docstring).", "",
             "| chapter | students | kernels | per GPU at once | repeat | seconds | submissions/min | per GPU | "
             "verdict changes vs serial | lost |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in result["chapters"]:
        for i, r in enumerate(c["runs"]):
            lines.append(f"| {c['chapter']} | {c['students']} | {c['distinct_kernels']} | {c['per_gpu']} | {i + 1} | "
                         f"{r['elapsed_s']} | {r['submissions_per_minute']} | {r['per_minute_per_gpu']} | "
                         f"{r['verdict_changes']} | {r['lost']} |")
    lines += ["", "Mix of kernels per exercise: " + "; ".join(f"{c['chapter']}: {c['mix']}" for c in result["chapters"])]
    history = result.get("history") or []
    if history:
        lines += ["", "## Every recorded run", "", "| date (UTC) | chapter | students | per GPU at once | seconds | "
                  "submissions/min | verdict changes vs serial | grader | ", "|---|---|---|---|---|---|---|---|"]
        for h in history:
            lines.append(f"| {h['date']} | {h['chapter']} | {h['students']} | {h.get('per_gpu')} | {h['elapsed_s']} | "
                         f"{h['submissions_per_minute']} | {h['verdict_changes']} | {h.get('note', '')} |")
    return "\n".join(lines) + "\n"


# --- scaling: one class graded on the first 1, 2, 4, ... GPUs ------------------------------------------

GOAL_EFFICIENCY = 0.9  # the goal: k GPUs grade at least 0.9 x k times as fast as one


def parse_counts(text: str) -> list:
    """'2,1,4' -> [1, 2, 4]. 1 is always run, even when not asked: every speedup is against it."""
    try:
        counts = {int(c) for c in text.split(",") if c.strip()}
    except ValueError:
        raise ValueError(f"--gpu-counts takes GPU counts separated by commas (1,2,4), not {text!r}") from None
    if not counts or min(counts) < 1:
        raise ValueError(f"--gpu-counts takes counts of at least 1, not {text!r}")
    return sorted(counts | {1})


def visible_gpus(environ, host_gpus: int) -> list:
    """The GPUs a run may use, as CUDA_VISIBLE_DEVICES entries: those of the CUDA_VISIBLE_DEVICES in ``environ``
    when set (indices, UUIDs or MIG names, passed on as written), else the host's ``host_gpus``."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return [str(i) for i in range(host_gpus)]
    entries = []
    for v in (v.strip() for v in visible.split(",")):
        if not v or v == "-1":  # CUDA hides every device from an invalid entry on
            break
        entries.append(v)
    return entries


def visible_for(k: int, environ, host_gpus: int) -> list | None:
    """The first ``k`` of `visible_gpus`; None when fewer than ``k`` are visible."""
    entries = visible_gpus(environ, host_gpus)
    return entries[:k] if k <= len(entries) else None


def plan_counts(counts: list, environ, host_gpus: int) -> tuple[list, list]:
    """([(count, its CUDA_VISIBLE_DEVICES entries)] for the counts this host can run, [the counts it cannot])."""
    runs, skipped = [], []
    for k in counts:
        entries = visible_for(k, environ, host_gpus)
        if entries is None:
            skipped.append(k)
        else:
            runs.append((k, entries))
    return runs, skipped


@contextlib.contextmanager
def restricted(entries: list, environ=os.environ):
    """CUDA_VISIBLE_DEVICES set to ``entries`` inside, as it was (or unset) afterwards."""
    before = environ.get("CUDA_VISIBLE_DEVICES")
    environ["CUDA_VISIBLE_DEVICES"] = ",".join(entries)
    try:
        yield
    finally:
        if before is None:
            environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            environ["CUDA_VISIBLE_DEVICES"] = before


def with_speedups(counts: list) -> list:
    """Each count's record (``gpus``, ``seconds``) with its speedup against the 1-GPU record's seconds and its
    efficiency, speedup / GPUs (1.0: linear)."""
    base = next(c["seconds"] for c in counts if c["gpus"] == 1)
    for c in counts:
        speedup = base / c["seconds"]
        c["speedup"] = round(speedup, 3)
        c["efficiency"] = round(speedup / c["gpus"], 3)
    return counts


def goal_held(counts: list, goal: float = GOAL_EFFICIENCY) -> bool | None:
    """Whether every count above 1 GPU reached ``goal`` x linear; None when none above 1 ran (nothing to
    judge: one GPU is linear by definition)."""
    more = [c for c in counts if c["gpus"] > 1]
    return all(c["efficiency"] >= goal for c in more) if more else None


def _count_record(k: int, entries: list, tries: list, students: int) -> dict:
    """One GPU count's record from its repeats (each a grade_class result and its verdict changes): rates from
    the fastest repeat, the least disturbed by anything else on the host; changes and lost rows summed over
    all of them, so that none is hidden."""
    best = min(t["elapsed_s"] for t in tries)
    per_min = 60.0 * students / best
    return {"gpus": k, "visible": ",".join(entries), "workers": min(t["workers"] for t in tries),
            "per_gpu": tries[0]["per_gpu"], "seconds": round(best, 1),
            "seconds_all": [round(t["elapsed_s"], 1) for t in tries], "submissions_per_minute": round(per_min, 1),
            "per_minute_per_gpu": round(per_min / k, 1),
            "verdict_changes_vs_serial": sum(len(t["vs_serial"]) for t in tries),
            "verdict_changes_vs_1gpu": sum(len(t["vs_1gpu"]) for t in tries),
            "lost": sum(t["lost"] for t in tries), "jobs": tries[0]["jobs"],
            "changes_vs_serial": [list(map(str, c)) for t in tries for c in t["vs_serial"]][:20],
            "changes_vs_1gpu": [list(map(str, c)) for t in tries for c in t["vs_1gpu"]][:20]}


def scale(chapter: str, students: int, runs: list, repeats: int, per_gpu: int | None, known: dict | None = None,
          log=print) -> dict:
    """Grade one synthetic class serially once, then in batches on each (count, entries) of ``runs``, the
    1-GPU run first (the others' verdicts are compared with its first repeat)."""
    work = Path(tempfile.mkdtemp(prefix="class-scaling-"))
    try:
        root, kinds, serial, serial_s, sources = _class(chapter, students, work, known, log)
        reference = None
        counts = []
        for k, entries in runs:
            tries = []
            for r in range(repeats):
                # ``gpus`` is what reaches the workers: grade_class's local cluster starts one per entry, with
                # that entry as its CUDA_VISIBLE_DEVICES. The variable is narrowed too because without ``gpus``
                # grade_class takes all of it, and whatever else the run starts inherits it.
                with restricted(entries):
                    res = autograder.grade_class(root, chapters=[chapter], results=str(work / f"store-{k}-{r}.sqlite"),
                                                 gpus=entries, per_gpu=per_gpu, progress=False, log=log)
                verdicts = {(row["student"], row["exercise"]): (row["status"], row["points"]) for row in res.rows}
                reference = reference or verdicts
                vs_1gpu = [(s, e, reference.get((s, e)), verdicts.get((s, e)))
                           for s, e in sorted(reference.keys() | verdicts.keys())
                           if reference.get((s, e)) != verdicts.get((s, e))]
                tries.append({"elapsed_s": res.elapsed_s, "workers": len(res.gpus), "per_gpu": res.per_gpu,
                              "lost": res.lost, "jobs": len(res.rows), "vs_serial": _changes(res.rows, serial, sources),
                              "vs_1gpu": vs_1gpu})
                log(f"  {k} GPU(s) [{','.join(entries)}], repeat {r + 1}: {students} submissions in "
                    f"{res.elapsed_s:.1f} s on {len(res.gpus)} worker(s); {len(tries[-1]['vs_serial'])} verdict "
                    f"change(s) vs serial, {len(vs_1gpu)} vs 1 GPU, {res.lost} lost")
            counts.append(_count_record(k, entries, tries, students))
        return {"chapter": chapter, "students": students, "per_gpu": per_gpu, "repeats": repeats,
                "mix": dict(collections.Counter(kinds.values())), "distinct_kernels": len(serial),
                "serial_s": round(serial_s, 1), "counts": with_speedups(counts)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _goal_line(c: dict) -> str:
    held = goal_held(c["counts"])
    if held is None:
        return f"Goal ({GOAL_EFFICIENCY} x linear): not judged, no count above 1 GPU ran."
    short = [f"{r['gpus']} GPUs: {r['efficiency']}" for r in c["counts"] if r["gpus"] > 1
             and r["efficiency"] < GOAL_EFFICIENCY]
    return (f"Goal ({GOAL_EFFICIENCY} x linear, efficiency >= {GOAL_EFFICIENCY} at every count): "
            + ("held." if held else "NOT held (" + "; ".join(short) + ")."))


def _verdict_line(c: dict) -> str:
    bad = [r for r in c["counts"] if r["verdict_changes_vs_1gpu"] or r["lost"]]
    odd = [r for r in c["counts"] if r["workers"] != r["gpus"]]
    line = ("Verdicts: the same on every count as on 1 GPU, none lost." if not bad else
            "Verdicts: NOT the same as on 1 GPU (or rows lost) at " + ", ".join(f"{r['gpus']} GPUs" for r in bad) + ".")
    if odd:
        line += " Workers started differ from the GPUs asked at " + ", ".join(
            f"{r['gpus']} GPUs ({r['workers']} workers)" for r in odd) + ": those rates do not measure that count."
    return line


def _skipped_line(c: dict) -> str:
    return (f"Not run: {', '.join(map(str, c['skipped']))} GPUs (this host shows {c['visible_gpus']})."
            if c.get("skipped") else "")


def scaling_markdown(result: dict) -> str:
    d = result["device"]
    lines = [f"# Class-scale grading on 1, 2, ... GPUs of {d['name']} x{d['count']}", "",
             f"{result['date']}; driver {d['driver']}, Python {result['python']}, CuPy {result['cupy']}, "
             f"Dask {result['dask']}. `python -m benchmarks.class_batch --gpu-counts ...` (see its docstring): "
             "one synthetic class, graded serially once, then by the batch grader on the first k GPUs."]
    for c in result["chapters"]:
        lines += ["", f"## {c['chapter']}", "",
                  f"{c['date']}, `--gpu-counts {c['gpu_counts']}`: {c['students']} students, {c['distinct_kernels']} "
                  f"distinct kernels (serial grading {c['serial_s']} s), {c['repeats']} repeat(s) per count "
                  f"(seconds: the fastest). Mix: {c['mix']}." + (f" {c['note']}" if c.get("note") else ""), "",
                  "| GPUs | visible | per GPU at once | seconds | submissions/min | per GPU | speedup vs 1 GPU | "
                  "efficiency | verdict changes vs serial | verdict changes vs 1 GPU | lost |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in c["counts"]:
            # the 1-GPU run's first repeat is what the others are compared with: its own 0 says nothing
            vs_one = "reference" if r["gpus"] == 1 and len(r["seconds_all"]) == 1 else r["verdict_changes_vs_1gpu"]
            lines.append(f"| {r['gpus']} | {r['visible']} | {r['per_gpu']} | {r['seconds']} | "
                         f"{r['submissions_per_minute']} | {r['per_minute_per_gpu']} | {r['speedup']} | "
                         f"{r['efficiency']} | {r['verdict_changes_vs_serial']} | {vs_one} | {r['lost']} |")
        lines += ["", _goal_line(c), "", _verdict_line(c)] + (["", _skipped_line(c)] if c.get("skipped") else [])
    return "\n".join(lines) + "\n"


def scaling_summary(result: dict, chapters=None) -> str:
    """A few lines on the chapters named (default: all of the record)."""
    out = []
    for c in result["chapters"]:
        if chapters is not None and c["chapter"] not in chapters:
            continue
        for r in c["counts"]:
            out.append(f"{c['chapter']} on {r['gpus']} GPU(s): {r['seconds']} s, {r['submissions_per_minute']}/min "
                       f"({r['per_minute_per_gpu']} per GPU), speedup {r['speedup']}, efficiency {r['efficiency']}; "
                       f"{r['verdict_changes_vs_serial']} change(s) vs serial, {r['verdict_changes_vs_1gpu']} vs "
                       f"1 GPU, {r['lost']} lost")
        out += [_goal_line(c), _verdict_line(c)] + ([_skipped_line(c)] if c.get("skipped") else [])
    return "\n".join(out)


def scaling_main(args, device: dict, environ=os.environ, log=print) -> int:
    import cupy
    import dask
    counts = parse_counts(args.gpu_counts)
    runs, skipped = plan_counts(counts, environ, device["count"])
    visible = len(visible_gpus(environ, device["count"]))
    for k in skipped:
        log(f"skipping {k} GPUs: this host shows {visible}")
    if not runs:  # 1 is always asked: none runs only when no GPU is visible
        log("no GPU visible: nothing to scale")
        return 1
    path = _record.record_path(args.out, "class-scaling", device["name"])
    old = json.loads(path.read_text()) if path.exists() else {}
    # a device call's time limit may leave room for one chapter per call: the record keeps the others'
    chapters = [scale(ch, args.students, runs, args.repeats or 1, args.per_gpu, log=log)
                | {"date": _record.utc_now(), "gpu_counts": ",".join(map(str, counts)), "visible_gpus": visible,
                   "skipped": skipped, "note": args.note}
                for ch in args.chapter or ["01_first_kernel"]]
    keep = [c for c in old.get("chapters", []) if c["chapter"] not in {c["chapter"] for c in chapters}]
    result = {"device": device, "date": _record.utc_now(), "python": platform.python_version(),
              "cupy": cupy.__version__, "dask": dask.__version__,
              "chapters": sorted(keep + chapters, key=lambda c: c["chapter"])}
    _record.write_record(path, result, scaling_markdown(result))
    log(scaling_summary(result, {c["chapter"] for c in chapters}))
    log(f"recorded in {path} and {path.with_suffix('.md').name}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.class_batch", description=__doc__.splitlines()[0])
    ap.add_argument("--chapter", action="append", help="default: 01_first_kernel and 07_staged_gemm")
    ap.add_argument("--students", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=None, help="default: 3; 1 per GPU count with --gpu-counts")
    ap.add_argument("--per-gpu", type=int, default=None, help="default: grade-class's (from GPU memory)")
    ap.add_argument("--out", default=str(_record.RESULTS))
    ap.add_argument("--append", action="store_true", help="add these repeats to the recorded ones of the same "
                    "class (same students and per-GPU count, same GPU model), reusing their serial verdicts: "
                    "a device call has a time limit, a class of 300 does not")
    ap.add_argument("--note", default="", help="what this run's grader was (for the table of every run)")
    ap.add_argument("--trace", action="store_true", help="record where each batch's time went (autograder/trace.py)")
    ap.add_argument("--gpu-counts", help="a scaling run instead: the same class on the first 1, 2, ... GPUs "
                    "(1,2,4; 1 is always run), recorded in class-scaling-<gpu>.{json,md}; default chapter "
                    "01_first_kernel")
    args = ap.parse_args(argv)
    if args.gpu_counts is not None:
        if args.append or args.trace:
            ap.error("--append and --trace are for the single-run record, not --gpu-counts")
        try:
            parse_counts(args.gpu_counts)
        except ValueError as exc:
            ap.error(str(exc))
        return scaling_main(args, _record.device())
    args.repeats = 3 if args.repeats is None else args.repeats
    import cupy
    import dask
    device = _record.device()
    path = _record.record_path(args.out, "class-batch", device["name"])
    old = json.loads(path.read_text()) if path.exists() else {}
    before = {c["chapter"]: c for c in old.get("chapters", [])
              if args.append and c["students"] == args.students and c["per_gpu"] == args.per_gpu}
    # serial verdicts depend on the kernel alone: any recorded class of the chapter lends them
    known = {c["chapter"]: c.get("serial") for c in old.get("chapters", []) if args.append}
    chapters = []
    for ch in args.chapter or ["01_first_kernel", "07_staged_gemm"]:
        prev = before.get(ch, {})
        c = run(ch, args.students, args.repeats, args.per_gpu, known.get(ch), args.trace)
        c["runs"] = prev.get("runs", []) + c["runs"]
        c["serial_s"] = prev.get("serial_s", c["serial_s"])
        chapters.append(c)
    history = old.get("history", []) + [
        {k: r.get(k) for k in ("date", "chapter", "students", "per_gpu", "elapsed_s", "submissions_per_minute",
                               "verdict_changes")} | {"note": args.note}
        for c in chapters for r in c["runs"][len(before.get(c["chapter"], {}).get("runs", [])):]]
    result = {"device": device, "history": history, "date": _record.utc_now(),
              "python": platform.python_version(), "cupy": cupy.__version__, "dask": dask.__version__,
              "chapters": chapters}
    keep = [c for c in old.get("chapters", []) if c["chapter"] not in {c["chapter"] for c in result["chapters"]}]
    result["chapters"] = sorted(keep + result["chapters"], key=lambda c: c["chapter"])
    _record.write_record(path, result, to_markdown(result))
    print(to_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
