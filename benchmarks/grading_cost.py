"""What grading one notebook costs, per chapter, on a named GPU: `python -m benchmarks.grading_cost`.

For every chapter in exercises/source/ this builds a throwaway nbgrader course (the chapter's source notebook
and exercises/nbgrader_config.py; `nbgrader generate_assignment`) with one submission, the released notebook
with every solution cell taken from the source notebook (a student who wrote the reference solutions). Then,
one chapter at a time on the GPU, it times in wall seconds

  python -m autograder grade submitted/ref/<ch>/<ch>.ipynb --chapter <ch> --json ...   (the grader alone)
  nbgrader autograde <ch>     (the grader again, then nbgrader runs the notebook in its sandbox)

`grade` runs first, so both find the compile caches warm, as every notebook after a class's first does.
Each figure includes starting its command (Python, imports, nbgrader's gradebook): the cost of grading
one notebook with that command. The rows go into benchmarks/results/grading-cost-<gpu>.{json,md}; a run of
some chapters keeps the other chapters' recorded rows.

  python -m benchmarks.grading_cost [--chapters 01_first_kernel ...] [--out DIR] [--budget-s 480]

`--budget-s` starts no chapter that would not fit in what is left (judged by the dearest chapter so far)
and stops a command at the budget's end; what finished is recorded. Without a GPU it measures nothing,
writes nothing and exits 2.
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures
import copy
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import _record

__all__ = ["STEM", "COLUMNS", "chapters", "solution_ids", "reference_notebook", "child_env", "build_course",
           "make_row", "should_start", "measure", "merge_rows", "docs_table", "to_markdown", "main"]

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "exercises" / "source"
CONFIG = ROOT / "exercises" / "nbgrader_config.py"
STEM = "grading-cost"
STUDENT = "ref"
# The table docs/INSTRUCTOR.md quotes (tests/test_grading_cost.py reads it by these headers).
COLUMNS = ("chapter", "kernel exercises", "grade (s)", "autograde (s)", "points")
EXIT_NO_GPU = 2


def chapters() -> list[str]:
    """Every chapter with an exercise notebook: exercises/source/<ch>/<ch>.ipynb."""
    return sorted(p.name for p in SOURCE.iterdir() if (p / f"{p.name}.ipynb").is_file())


def solution_ids(nb: dict) -> dict:
    """grade_id -> cell index of each nbgrader solution cell."""
    return {c["metadata"]["nbgrader"]["grade_id"]: i for i, c in enumerate(nb["cells"])
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def reference_notebook(source: dict, released: dict) -> dict:
    """The released notebook with every solution cell's source from the source notebook."""
    nb = copy.deepcopy(released)
    src = solution_ids(source)
    for gid, i in solution_ids(nb).items():
        if gid not in src:
            raise ValueError(f"the released notebook has a solution cell {gid!r} that the source notebook lacks: "
                             "generate the assignment again from this source")
        nb["cells"][i]["source"] = source["cells"][src[gid]]["source"]
    return nb


def child_env(work: Path) -> dict:
    """The environment of every command: this Python first on PATH, this checkout first on PYTHONPATH, and
    a `python3` kernelspec that starts this same Python (so the notebook runs where the grader runs, with
    the same CuPy and wheelhouse)."""
    spec = work / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    env = dict(os.environ)

    def first(name, value):
        env[name] = os.pathsep.join([value] + [p for p in env.get(name, "").split(os.pathsep) if p and p != value])
    first("PATH", os.path.dirname(sys.executable))
    first("PYTHONPATH", str(ROOT))
    first("JUPYTER_PATH", str(work / "jupyter"))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(cmd, cwd, env, timeout=None):
    """(wall seconds, exit code or None when stopped at ``timeout``, output). A stopped command is ended
    with everything it started (the grader's children, the notebook's kernel): its own process group."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return time.perf_counter() - t0, p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return time.perf_counter() - t0, None, out + f"\n(stopped after {timeout:.0f} s: the budget was spent)"


def build_course(chapter: str, work: Path, env: dict) -> Path:
    """A course folder with the chapter generated and one submission, submitted/ref/<ch>/<ch>.ipynb."""
    course = work / chapter
    shutil.copytree(SOURCE / chapter, course / "source" / chapter,
                    ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy(CONFIG, course / "nbgrader_config.py")
    _, rc, log = _run([sys.executable, "-m", "nbgrader", "generate_assignment", chapter], course, env, 600)
    if rc != 0:
        raise RuntimeError(f"nbgrader generate_assignment {chapter} failed (exit {rc}) in {course}:\n{log[-3000:]}")
    name = f"{chapter}.ipynb"
    nb = reference_notebook(json.loads((course / "source" / chapter / name).read_text()),
                            json.loads((course / "release" / chapter / name).read_text()))
    sub = course / "submitted" / STUDENT / chapter
    sub.mkdir(parents=True)
    (sub / name).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    (sub / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")  # no due date is set: never late
    return course


def _gradebook_points(course: Path, chapter: str):
    """(score, max score) of the submission in the course's gradebook, or None where it has none."""
    from nbgrader.api import Gradebook, MissingEntry
    try:
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            s = gb.find_submission(chapter, STUDENT)
            return float(s.score), float(s.max_score)
    except MissingEntry:
        return None


def make_row(chapter: str, exercises: int, grade_s: float, grade_rc, report: dict | None,
             autograde_s: float | None = None, autograde_rc=None, gradebook=None, log: str = "") -> dict:
    """One chapter's record. ``grade_rc``/``autograde_rc`` are exit codes (None: stopped at the budget);
    ``report`` is the grader's JSON; ``gradebook`` (score, max score) after autograde."""
    if grade_rc is None:
        status = "grade stopped at the budget"
    elif grade_rc == 3:
        status = "needs a GPU"
    elif grade_rc != 0 or report is None:
        status = f"grade failed (exit {grade_rc})"
    elif autograde_s is None:
        status = "autograde not run"
    elif autograde_rc is None:
        status = "autograde stopped at the budget"
    elif autograde_rc != 0 or gradebook is None:
        status = f"autograde failed (exit {autograde_rc})"
    else:
        status = "ok"
    exs = (report or {}).get("exercises", [])
    row = {"chapter": chapter, "exercises": exercises, "grade_s": round(grade_s, 1),
           "autograde_s": None if autograde_s is None else round(autograde_s, 1),
           "points": (report or {}).get("points"), "max_points": (report or {}).get("max_points"),
           "gradebook_points": gradebook[0] if gradebook else None,
           "gradebook_max": gradebook[1] if gradebook else None, "status": status,
           "statuses": dict(collections.Counter(e.get("status") for e in exs)),
           "date": _record.utc_now()}
    if status != "ok":
        row["log"] = log[-3200:]
    return row


def should_start(elapsed: float, budget_s: float | None, costs: list) -> bool:
    """Start another chapter only when the dearest chapter so far would still end inside the budget."""
    return budget_s is None or elapsed + max(costs, default=0.0) <= budget_s


def measure(names: list, budget_s: float | None = None, log=print, jobs: int | None = None):
    """(rows, names not run for lack of budget): build every course (in parallel; this counts against the
    budget, not in any figure), then time one chapter at a time."""
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="grading-cost-"))
    try:
        env = child_env(work)
        jobs = jobs or max(1, min(4, (os.cpu_count() or 2) // 2))

        def build(ch):
            try:
                return build_course(ch, work, env)
            except Exception as exc:  # one broken chapter is one row, not a lost run
                return exc
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            courses = dict(zip(names, pool.map(build, names)))
        log(f"built {len(courses)} course(s) in {time.monotonic() - start:.0f} s")
        rows, costs, left = [], [], []
        import autograder
        for ch in names:
            elapsed = time.monotonic() - start
            if left or not should_start(elapsed, budget_s, costs):
                left.append(ch)
                continue
            if isinstance(courses[ch], Exception):
                rows.append(make_row(ch, len(autograder.load_chapter(ch)), 0.0, -1, None, log=str(courses[ch])))
                rows[-1]["status"] = "course not built"
                log(f"{ch}: the course could not be built: {courses[ch]}")
                continue
            remaining = None if budget_s is None else max(1.0, budget_s - elapsed)
            course, nb = courses[ch], f"submitted/{STUDENT}/{ch}/{ch}.ipynb"
            grade_s, grade_rc, glog = _run([sys.executable, "-m", "autograder", "grade", nb, "--chapter", ch,
                                            "--json", "grade.json"], course, env, remaining)
            report = json.loads((course / "grade.json").read_text()) if (course / "grade.json").is_file() else None
            ag_s = ag_rc = gradebook = None
            alog = ""
            if grade_rc is not None:
                remaining = None if budget_s is None else max(1.0, budget_s - (time.monotonic() - start))
                ag_s, ag_rc, alog = _run([sys.executable, "-m", "nbgrader", "autograde", ch], course, env, remaining)
                gradebook = _gradebook_points(course, ch) if ag_rc is not None else None
            rows.append(make_row(ch, len(autograder.load_chapter(ch)), grade_s, grade_rc, report, ag_s, ag_rc,
                                 gradebook, f"$ autograder grade:\n{glog[-1500:]}\n$ nbgrader autograde:\n{alog[-1500:]}"))
            # nbgrader's sandbox needs Landlock (gVisor and Colab have none; COURSE_ALLOW_UNCONFINED=1 opts out):
            # record which way the notebook ran, since confinement is part of its cost
            rows[-1]["notebook_kernel"] = ("confined" if "Student kernel confined" in alog
                                           else "unconfined" if "UNCONFINED" in alog else None)
            costs.append(grade_s + (ag_s or 0.0))
            r = rows[-1]
            log(f"{ch}: grade {r['grade_s']} s ({r['points']}/{r['max_points']} points), autograde "
                f"{r['autograde_s']} s ({r['gradebook_points']}/{r['gradebook_max']} in the gradebook): {r['status']}")
            if r["status"] not in ("ok", "needs a GPU"):
                log("  " + r["log"].replace("\n", "\n  "))
        return rows, left
    finally:
        shutil.rmtree(work, ignore_errors=True)


def merge_rows(old: list, new: list) -> list:
    """The new rows, and the old ones of chapters not measured again, by chapter."""
    fresh = {r["chapter"] for r in new}
    return sorted([r for r in old if r["chapter"] not in fresh] + list(new), key=lambda r: r["chapter"])


def _num(v) -> str:
    return "-" if v is None else f"{v:g}"


def docs_table(rows: list) -> list:
    """The table docs/INSTRUCTOR.md quotes: chapter, kernel exercises, grade and autograde seconds, points."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append(f"| {r['chapter']} | {r['exercises']} | {r['grade_s']:.1f} | "
                     f"{'-' if r['autograde_s'] is None else format(r['autograde_s'], '.1f')} | "
                     f"{_num(r['points'])}/{_num(r['max_points'])} |")
    return lines


def to_markdown(result: dict) -> str:
    d, v = result["device"], result["versions"]
    rows = result["rows"]
    lines = [f"# Grading cost per notebook on {d['name']}", "",
             f"{result['date']}; driver {d['driver']}, CuPy {v['cupy']}, nbgrader {v['nbgrader']}, Python "
             f"{v['python']}. `python -m benchmarks.grading_cost` (see its docstring): per chapter one "
             f"submission (the reference solutions in the released notebook); wall seconds of "
             "`python -m autograder grade` on it (the grader alone) and of `nbgrader autograde` (the grader "
             "and the notebook's run), each with its command's start-up.", ""]
    lines += docs_table(rows)
    odd = [r for r in rows if r["status"] != "ok" or r["points"] != r["max_points"]
           or r["gradebook_points"] is None or r["gradebook_points"] < (r["points"] or 0)]
    if odd:
        lines += ["", "Not as expected (the reference should get full points in both):"]
        lines += [f"- {r['chapter']}: {r['status']}; grader {_num(r['points'])}/{_num(r['max_points'])}, "
                  f"gradebook {_num(r['gradebook_points'])}/{_num(r['gradebook_max'])}; statuses {r['statuses']}"
                  for r in odd]
    kinds = collections.defaultdict(list)
    for r in rows:
        kinds[r.get("notebook_kernel") or "not started"].append(r["chapter"])
    if rows:
        lines += ["", "The notebook's kernel under `nbgrader autograde`: " + "; ".join(
            f"{k} ({', '.join(v)})" if len(kinds) > 1 else f"{k} in every chapter" for k, v in sorted(kinds.items()))
            + " (confined: nbgrader's Landlock sandbox; unconfined: no Landlock here, COURSE_ALLOW_UNCONFINED=1)."]
    if result.get("not_run"):
        lines += ["", "Not measured yet (left out by --chapters or --budget-s): " + ", ".join(result["not_run"])]
    if rows:
        total = sum(r["grade_s"] + (r["autograde_s"] or 0) for r in rows)
        lines += ["", f"Rows measured {', '.join(sorted({r['date'][:10] for r in rows}))}; {total:.0f} s of commands."]
    return "\n".join(lines) + "\n"


def _no_gpu_reason() -> str | None:
    import course
    if course.gpu_available():
        return None
    try:
        course.device_info()
    except course.NoGPUError as exc:
        return exc.reason
    return "CuPy sees no usable device"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.grading_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--chapters", nargs="+", metavar="CH", help="chapter stems (default: every exercises/source/ chapter)")
    ap.add_argument("--out", default=str(_record.RESULTS), help="results folder (default benchmarks/results)")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="seconds for the whole run; chapters that would not fit are left out and listed")
    args = ap.parse_args(argv)
    known = chapters()
    names = args.chapters or known
    unknown = [c for c in names if c not in known]
    if unknown:
        print(f"no exercise notebook for {', '.join(unknown)}: expected exercises/source/<ch>/<ch>.ipynb. "
              f"Chapters here: {', '.join(known)}", file=sys.stderr)
        return 2
    why = _no_gpu_reason()
    if why is not None:
        print(f"Nothing measured: this script times the real grader on an NVIDIA GPU, and none is usable here "
              f"({why}). No results were written. Run `python -m benchmarks.grading_cost` on a machine with an "
              "NVIDIA GPU (docs/INSTRUCTOR.md, 'What grading costs per chapter').", file=sys.stderr)
        return EXIT_NO_GPU
    import cupy
    import nbgrader
    device = _record.device()
    rows, left = measure(names, args.budget_s)
    later = left and (f"Not measured within --budget-s {args.budget_s}: {', '.join(left)}. Run "
                      f"`python -m benchmarks.grading_cost --chapters {' '.join(left)}` next (its rows join these).")
    if not rows:
        print(f"{later or ''} Nothing was measured, so nothing was written.".strip(), file=sys.stderr)
        return 1
    path = _record.record_path(args.out, STEM, device["name"])
    old = json.loads(path.read_text()) if path.exists() else {}
    merged = merge_rows(old.get("rows", []), rows)
    result = {"device": device, "date": _record.utc_now(),
              "versions": {"cupy": cupy.__version__, "nbgrader": nbgrader.__version__,
                           "python": platform.python_version()},
              "python": sys.executable, "budget_s": args.budget_s,
              "not_run": [c for c in known if c not in {r["chapter"] for r in merged}], "rows": merged}
    _record.write_record(path, result, to_markdown(result))
    print(to_markdown(result))
    print(f"wrote {path} and {path.with_suffix('.md').name}")
    if left:
        print(later, file=sys.stderr)
    return 0 if not left and all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
