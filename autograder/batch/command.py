"""`python -m autograder grade-class`: the instructor's batch command (parser and handler)."""
from __future__ import annotations

import argparse
import sys

__all__ = ["add_parser", "run"]

_EPILOG = """\
examples:
  python -m autograder grade-class submitted/ --chapter 01_first_kernel --gradebook sqlite:///gradebook.db
  python -m autograder grade-class submitted/ --report grading-report/      # every assignment found
  python -m autograder grade-class submitted/ --scheduler tcp://head:8786   # a running Dask cluster

Results are committed one by one to the results store; run the same command again after a crash or
Ctrl-C and it grades only what is missing or changed (kernel, spec version, GPU model).
See docs/INSTRUCTOR.md, "Grade a whole class".
"""


def add_parser(sub) -> None:
    g = sub.add_parser("grade-class", help="grade every submission of a class in parallel on every GPU, "
                                           "resumably, into nbgrader's gradebook",
                       epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("path", help="nbgrader's submitted/ folder (submitted/<student>/<assignment>/) or a flat folder")
    g.add_argument("--chapter", action="append", dest="chapters", metavar="NN_topic",
                   help="grade only this assignment (repeatable; default: every assignment found)")
    g.add_argument("--exercise", help="grade only this exercise")
    g.add_argument("--gradebook", metavar="URL", help="nbgrader database URL to write the points into, such as "
                   "sqlite:///gradebook.db or postgresql://user@host/course (default: none)")
    g.add_argument("--results", metavar="FILE", help="the results store (default: grading/results.sqlite "
                   "beside the submissions folder)")
    g.add_argument("--report", metavar="DIR", help="write results.json, results.csv, summary.txt and "
                   "distributions.png there")
    g.add_argument("--scheduler", metavar="ADDRESS", help="a running Dask scheduler (default: start one worker "
                   "per GPU of this host)")
    g.add_argument("--gpus", help="comma-separated GPU indices or UUIDs for the local workers (default: all)")
    g.add_argument("--per-gpu", type=int, default=None, help="gradings at a time on each GPU; correctness checks "
                   "overlap, timed runs have the GPU alone (default: one per 6 GiB of the smallest GPU's "
                   "memory, at most 8: a grading needs up to 8 GiB at chapter 01's timing size)")
    g.add_argument("--no-speed", action="store_true", help="correctness only (no speed points)")
    g.add_argument("--regrade", action="store_true", help="grade everything again, stored results or not")
    g.add_argument("--reset-overrides", action="store_true", help="clear manual scores set in the formgrader "
                   "where the grader now gives different points (default: keep them and list them)")
    g.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def run(args) -> int:
    from ..report import EXIT_NEEDS_GPU, EXIT_OK
    from .engine import grade_class
    from .summary import exercise_table
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else None
    result = grade_class(args.path, chapters=args.chapters, exercise=args.exercise, results=args.results,
                         gradebook=args.gradebook, report_dir=args.report, scheduler=args.scheduler, gpus=gpus,
                         per_gpu=None if args.per_gpu is None else max(1, args.per_gpu), speed=not args.no_speed, progress=not args.quiet,
                         reset_overrides=args.reset_overrides, regrade=args.regrade)
    for line in result.ignored:
        print(f"not graded: {line}")
    print(exercise_table(result.rows))
    print(f"graded {result.graded} job(s) in {result.elapsed_s:.1f} s ({result.per_minute:.1f} per minute), "
          f"{result.reused} reused from the results store, {result.lost} lost")
    if result.gradebook is not None:
        print("\n".join(result.gradebook.lines()))
    if args.report:
        print(f"report: {args.report}/summary.txt, results.csv, results.json, distributions.png")
    if result.interrupted:
        print("interrupted: everything finished so far is stored; run the same command to go on", file=sys.stderr)
        return 130
    needs_gpu = [r for r in result.rows if r["status"] == "needs a GPU"]
    if needs_gpu:
        print(f"{len(needs_gpu)} job(s) need a GPU: compile errors were found and stored; run the same command "
              "on a machine with a GPU to grade the rest", file=sys.stderr)
        return EXIT_NEEDS_GPU
    return EXIT_OK
