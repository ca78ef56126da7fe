#!/usr/bin/env python3
"""Grading and notebook checks for chapters 04-06, run by tools/gpu_checks/ch04_06.sh on a GPU machine.

    python3 tools/gpu_checks/ch04_06/checks.py grade       references full marks, stubs zero, calibration corpus
    python3 tools/gpu_checks/ch04_06/checks.py notebooks   run the three lessons and exercise notebooks
    python3 tools/gpu_checks/ch04_06/checks.py sweeps      record the lessons' widget sweeps for CPU replay

Each prints one line per item and exits 1 if any item misses its expectation.
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))
CHAPTERS = ("04_coalescing", "05_bank_conflicts", "06_building_blocks")
CORPUS = Path(__file__).resolve().parent / "corpus"
EXPECT = re.compile(r"^//\s*expect:\s*(full|correct|zero|info)\s+(\d\d_\w+)/(\w+)")


def stub(source: str) -> str:
    """What nbgrader's ClearSolutions leaves of a solution: each region becomes `// YOUR CODE HERE`."""
    out, skipping = [], False
    for line in source.split("\n"):
        if "BEGIN SOLUTION" in line:
            out.append(re.match(r"\s*", line).group(0) + "// YOUR CODE HERE")
            skipping = True
        elif "END SOLUTION" in line:
            skipping = False
        elif not skipping:
            out.append(line)
    return "\n".join(out)


def _verdict(rep) -> str:
    if rep.points >= rep.max_points - 1e-9:
        return "full"
    if rep.points <= 1e-9:
        return "zero"
    return "correct"


def _line(label, rep, expect) -> tuple:
    got = _verdict(rep)
    ratio = f"{rep.speed.ratio:.2f}x ref (needs {rep.speed.threshold:.2f})" if rep.speed else "no timing"
    ok = expect == "info" or got == expect
    reason = "" if ok else f"  <- expected {expect}: {rep.reason.splitlines()[0][:120] if rep.reason else ''}"
    print(f"{'ok  ' if ok else 'FAIL'} {label:55s} {rep.points:5.1f}/{rep.max_points:<4g} {got:8s} {ratio}{reason}")
    return ok, f"{label}: {rep.points:g}/{rep.max_points:g}, {ratio}"


def grade() -> int:
    from autograder import grade_source, load_chapter
    oks, lines = [], []
    for chapter in CHAPTERS:
        for ex in load_chapter(chapter):
            src = (REPO / "solutions" / chapter / ex.source_file).read_text()
            for label, text, expect in ((f"{chapter}/{ex.name} reference", src, "full"),
                                        (f"{chapter}/{ex.name} stub", stub(src), "zero")):
                ok, line = _line(label, grade_source(chapter, ex.name, text), expect)
                oks.append(ok)
                lines.append(line)
    for path in sorted(CORPUS.glob("*.cu")):
        text = path.read_text()
        m = EXPECT.match(text)
        if not m:
            print(f"FAIL {path.name}: no '// expect: <verdict> NN_topic/exercise' first line")
            oks.append(False)
            continue
        expect, chapter, exercise = m.groups()
        ok, line = _line(f"corpus {path.stem}", grade_source(chapter, exercise, text), expect)
        oks.append(ok)
        lines.append(line)
    print(f"\ngrading: {sum(oks)} of {len(oks)} as expected")
    return 0 if all(oks) else 1


def notebooks(timeout: int = 1800) -> int:
    import nbclient
    import nbformat
    import os
    paths = [REPO / "chapters" / f"{c}.ipynb" for c in CHAPTERS]
    if os.environ.get("EXERCISE_NOTEBOOKS") == "1":
        paths += [REPO / "exercises" / "source" / c / f"{c}.ipynb" for c in CHAPTERS]
    bad = 0
    for p in paths:
        nb = nbformat.read(p, as_version=4)
        t0 = time.monotonic()
        nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout, allow_errors=True,
                                resources={"metadata": {"path": str(p.parent)}}).execute()
        problems = []
        for i, cell in enumerate(nb.cells):
            for out in cell.get("outputs", []):
                text = out.get("text", "") if out["output_type"] == "stream" else "".join(
                    str(v) for k, v in out.get("data", {}).items() if k.startswith("text/"))
                if out["output_type"] == "error":
                    problems.append(f"cell {i}: {out['ename']}: {out['evalue']}")
                elif "Traceback" in text:
                    problems.append(f"cell {i}: traceback in output")
                elif "[no GPU]" in text:
                    problems.append(f"cell {i}: ran as if there were no GPU")
        print(f"{'ok  ' if not problems else 'FAIL'} {p.relative_to(REPO)} ({time.monotonic() - t0:.0f} s)")
        for q in problems:
            print("     ", q)
        bad += bool(problems)
        executed = Path("/tmp/gpu_checks_ch04_06") / f"executed_{p.name}"
        executed.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, executed)  # outputs kept out of the repository, for reading
    return 1 if bad else 0


def sweeps() -> int:
    from course.lessons import ch04, ch05, ch06
    bad = 0
    for build in (ch04.stride_offset_sweep, ch05.smem_stride_sweep, ch06.reduce_sweep, ch06.hist_sweep):
        t0 = time.monotonic()
        s = build(record=True)
        missing = [k for k, (v, _note) in s.results.items() if v is None]
        print(f"{'ok  ' if s.recorded.exists() and not missing else 'FAIL'} {s.name}: {len(s.results)} points "
              f"-> {s.recorded.relative_to(REPO)} ({time.monotonic() - t0:.0f} s)"
              + (f"; {len(missing)} invalid: {missing[:3]}" if missing else ""))
        bad += bool(missing) or not s.recorded.exists()
    return 1 if bad else 0


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    steps = {"grade": grade, "notebooks": notebooks, "sweeps": sweeps}
    if what not in steps:
        print(__doc__)
        sys.exit(2)
    sys.exit(steps[what]())
