"""`python -m autograder`: grade submissions, check specs.

Exit codes: 0 graded (whatever the points), 2 usage or spec error, 3 needs a GPU, 1 grader bug.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from .report import EXIT_NEEDS_GPU, EXIT_OK, EXIT_USAGE, Status, printable
from .spec import SpecError

__all__ = ["main", "build_parser"]

_NO_GPU_HELP = ("No usable NVIDIA GPU here, so nothing was graded (exit code 3). Specs and notebooks were read "
                "and checked; run the same command on a machine with a GPU (for example a Colab GPU runtime).")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m autograder", description=(
        "Grade CUDA kernel exercises for correctness and speed in isolated child processes."))
    sub = p.add_subparsers(dest="command", required=True)
    g = sub.add_parser("grade", help="grade a notebook, a .cu file, or a folder of submissions")
    g.add_argument("path", help="an exercise notebook, a submitted notebook, a .cu file named like the "
                                "exercise, or a folder (nbgrader's submitted/<student>/<assignment>/, or flat)")
    g.add_argument("--chapter", help="chapter stem such as 01_first_kernel (default: from the file names)")
    g.add_argument("--exercise", help="grade only this exercise")
    g.add_argument("--json", metavar="OUT", help="write the full report as JSON to OUT ('-' for stdout)")
    g.add_argument("--no-speed", action="store_true", help="correctness only (no speed points are awarded)")
    g.add_argument("--seed", type=int, help=argparse.SUPPRESS)  # reproduce a run while debugging the grader
    g.add_argument("--verbose", "-v", action="store_true", help="print each exercise's full feedback")
    c = sub.add_parser("check-specs", help="load and validate spec files (no GPU needed)")
    c.add_argument("chapters", nargs="*", help="chapter stems (default: all)")
    s = sub.add_parser("grade-source", help="(used by notebooks) grade JSON {source, launch} from stdin")
    s.add_argument("--chapter", required=True)
    s.add_argument("--exercise", required=True)
    s.add_argument("--no-speed", action="store_true")
    return p


def _cmd_grade(args) -> int:
    from .runner import grade_path
    report = grade_path(args.path, chapter=args.chapter, exercise=args.exercise, progress=True,
                        seed=args.seed, speed=not args.no_speed)
    if args.json == "-":
        print(report.to_json())
    else:
        print(report.table())
        if args.verbose:
            for e in report.exercises:
                print()
                print(f"== {printable(e.submission or '-', one_line=True)} / {e.exercise}")
                print(e.feedback())
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                f.write(report.to_json())
            print(f"wrote {args.json}")
    if any(e.status == Status.NEEDS_GPU for e in report.exercises):
        print(_NO_GPU_HELP, file=sys.stderr)
        reason = next(e.reason for e in report.exercises if e.status == Status.NEEDS_GPU)
        print(printable(reason), file=sys.stderr)
        return EXIT_NEEDS_GPU
    return EXIT_OK


def _cmd_check_specs(args) -> int:
    from .loader import chapters, load_chapter
    names = args.chapters or chapters()
    for ch in names:
        exercises = load_chapter(ch)
        print(f"{ch}: {len(exercises)} exercise(s) ok: "
              + ", ".join(f"{e.name} ({e.max_points:g} pts)" for e in exercises))
    return EXIT_OK


def _cmd_grade_source(args) -> int:
    from .runner import grade_source
    payload = json.loads(sys.stdin.read() or "{}")
    report = grade_source(args.chapter, args.exercise, payload.get("source"), launch=payload.get("launch"),
                          speed=not args.no_speed)
    print(json.dumps(report.to_dict(), default=str))
    return EXIT_NEEDS_GPU if report.status == Status.NEEDS_GPU else EXIT_OK


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    handler = {"grade": _cmd_grade, "check-specs": _cmd_check_specs, "grade-source": _cmd_grade_source}
    try:
        return handler[args.command](args)
    except (SpecError, FileNotFoundError) as exc:
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if os.environ.get("AUTOGRADER_DEBUG"):
            raise
        print(f"internal grader error: {type(exc).__name__}: {exc} (set AUTOGRADER_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1

