"""Class-scale grading throughput and agreement: `python -m benchmarks.class_batch`.

Builds a synthetic class from the grader's test corpus and the reference solutions (right, slow, wrong,
crashing, hanging, non-compiling and untouched kernels in fixed proportions), grades it with the batch
grader (`autograder.grade_class`, Dask, one worker per GPU), and compares every verdict with the serial
grading of the same kernel (`autograder.grade_source`, one at a time). Reports submissions per minute per
GPU and the verdict changes, and records them in benchmarks/results/class-batch-<gpu>.{json,md}.

  python -m benchmarks.class_batch --chapter 01_first_kernel --students 300 --repeats 3
"""
from __future__ import annotations

import argparse
import collections
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


def run(chapter: str, students: int, repeats: int, per_gpu: int | None, known: dict | None = None, trace: bool = False,
        log=print) -> dict:
    work = Path(tempfile.mkdtemp(prefix="class-batch-"))
    try:
        root = work / "submitted"
        kinds = build_class(chapter, students, root)
        t0 = time.monotonic()
        serial = serial_verdicts(chapter, root, known)
        serial_s = time.monotonic() - t0
        log(f"{chapter}: {len(serial)} distinct kernels, {len(serial) - len(known or {})} graded serially in "
            f"{serial_s:.0f} s")
        sources = {}
        for nb in root.glob(f"*/{chapter}/{chapter}.ipynb"):
            for cell in json.loads(nb.read_text())["cells"]:
                m = re.match(r"%%cuda --name (\w+) --no-run\n", cell["source"])
                if m:
                    sources[(nb.parent.parent.name, m.group(1))] = cell["source"][m.end():]
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
            def alone(row):
                return serial[kernel_key(row["exercise"], sources[(row["student"], row["exercise"])])]
            changes = [(row["student"], row["exercise"], alone(row), (row["status"], row["points"]),
                        row["feedback"][:4000]) for row in res.rows if alone(row) != (row["status"], row["points"])]
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.class_batch", description=__doc__.splitlines()[0])
    ap.add_argument("--chapter", action="append", help="default: 01_first_kernel and 07_staged_gemm")
    ap.add_argument("--students", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--per-gpu", type=int, default=None, help="default: grade-class's (from GPU memory)")
    ap.add_argument("--out", default=str(_record.RESULTS))
    ap.add_argument("--append", action="store_true", help="add these repeats to the recorded ones of the same "
                    "class (same students and per-GPU count, same GPU model), reusing their serial verdicts: "
                    "a device call has a time limit, a class of 300 does not")
    ap.add_argument("--note", default="", help="what this run's grader was (for the table of every run)")
    ap.add_argument("--trace", action="store_true", help="record where each batch's time went (autograder/trace.py)")
    args = ap.parse_args(argv)
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
