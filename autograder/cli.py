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
    c = sub.add_parser("check-specs", help="check specs against their reference kernels, NumPy references and "
                                           "exercise notebooks (no GPU needed); exit 2 on any problem")
    c.add_argument("chapters", nargs="*", help="chapter stems (default: all)")
    c.add_argument("--no-compile", action="store_true", help="do not compile the reference kernels (no NVRTC here)")
    from .sync import add_parser as add_sync
    add_sync(sub)
    from .batch.command import add_parser as add_grade_class
    add_grade_class(sub)
    s = sub.add_parser("grade-source",
                       help="(used by notebooks) grade JSON {source, launch, first_line} from stdin")
    s.add_argument("--chapter", required=True)
    s.add_argument("--exercise", required=True)
    s.add_argument("--no-speed", action="store_true")
    f = sub.add_parser("freeze", help="grade chapters with a snapshot of their current specs and reference "
                                      "solutions until frozen again (freezing again = a deliberate regrade)")
    f.add_argument("chapters", nargs="*", help="chapter stems (default: every chapter with a spec)")
    f.add_argument("--term", help="a label for the lock entry, such as fall-2026 (default: kept from before)")
    u = sub.add_parser("unfreeze", help="grade chapters with their live specs again")
    u.add_argument("chapters", nargs="+", help="chapter stems")
    from .lms_import import add_arguments as _import_arguments
    _import_arguments(sub.add_parser("import-submissions", help=(
        "put an LMS download folder's notebooks (Canvas, Moodle, Blackboard, or one per student) into "
        "nbgrader's submitted/<student>/<assignment>/ with timestamp.txt")))
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
    _print_freeze_notes({e.chapter for e in report.exercises}, changes_only=True)
    if any(e.status == Status.NEEDS_GPU for e in report.exercises):
        print(_NO_GPU_HELP, file=sys.stderr)
        reason = next(e.reason for e in report.exercises if e.status == Status.NEEDS_GPU)
        print(printable(reason), file=sys.stderr)
        return EXIT_NEEDS_GPU
    return EXIT_OK


def _cmd_check_specs(args) -> int:
    from .loader import chapters, load_chapter
    from .spec_checks import check_chapter
    names = args.chapters or chapters()
    found = 0
    for ch in names:
        problems = check_chapter(ch, compile=not args.no_compile)
        found += len(problems)
        if problems:
            print(f"{ch}: {len(problems)} problem(s):")
            for p in problems:
                print(printable("  - " + str(p).replace("\n", "\n    ")))
            continue
        exercises = load_chapter(ch)
        print(f"{ch}: {len(exercises)} exercise(s) ok: "
              + ", ".join(f"{e.name} ({e.max_points:g} pts)" for e in exercises))
    _print_freeze_notes(set(names), stream=sys.stdout)
    if found:
        print(f"{found} problem(s) in the specs, reference solutions or exercise notebooks: each says what to fix. "
              "`python -m autograder sync` writes the ones marked as written from the spec.", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _cmd_sync(args) -> int:
    from .sync import run
    return run(args)


def _print_freeze_notes(chapters: set, *, changes_only: bool = False, stream=None) -> None:
    """Which chapters are graded with a frozen spec, and whether their live spec changed since."""
    from .freezing import notes
    for line in notes(chapters, changes_only=changes_only):
        print(printable(line), file=stream or sys.stderr)


def _cmd_freeze(args) -> int:
    from .freezing import freeze
    for line in freeze(args.chapters, term=args.term):
        print(printable(line))
    return EXIT_OK


def _cmd_unfreeze(args) -> int:
    from .freezing import unfreeze
    for line in unfreeze(args.chapters):
        print(printable(line))
    return EXIT_OK


def _cmd_grade_source(args) -> int:
    from .runner import grade_source
    payload = json.loads(sys.stdin.read() or "{}")
    report = grade_source(args.chapter, args.exercise, payload.get("source"), launch=payload.get("launch"),
                          speed=not args.no_speed, first_line=int(payload.get("first_line") or 1))
    print(json.dumps(report.to_dict(), default=str))
    return EXIT_NEEDS_GPU if report.status == Status.NEEDS_GPU else EXIT_OK


def _cmd_import_submissions(args) -> int:
    from .lms_import import run
    return run(args)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from .batch.command import run as grade_class
    handler = {"grade-class": grade_class, "grade": _cmd_grade, "check-specs": _cmd_check_specs, "grade-source": _cmd_grade_source,
               "freeze": _cmd_freeze, "unfreeze": _cmd_unfreeze, "import-submissions": _cmd_import_submissions,
               "sync": _cmd_sync}
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

