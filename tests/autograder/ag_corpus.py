"""The submission corpus: files under corpus/<chapter>/<exercise>/ whose first line states the verdict.

    // expect: status=failed points=0 reason~="out of bounds"

`key=value` must match exactly (status, points; quote values with spaces: status="timed out");
`key~="regex"` must be found (status, reason, printf). A calibration case, whose speed may land either
side of the threshold, states only that it is correct: `status~="^(passed|slow)$"` (no points).

A `.mutant` file is a submission written as edits of a reference solution, for attacks that differ from a long
kernel in a line or two: the expect line, `// from: solutions/<chapter>/<file>.cu`, comments, then one or more
edits (``# from:`` for a Triton reference, a .py file), each `<<<<` (lines of the reference, found exactly once), `====`, the lines that replace them, `>>>>`.
`corpus_source` gives the submission's text (the expect line first, as in a .cu case).
"""
import re
import shlex
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
ROOT = HERE.parent.parent


def parse_expect(path) -> dict:
    first = Path(path).read_text().splitlines()[0]
    m = re.match(r"\s*(?://|#)\s*expect:\s*(.*)$", first)   # a kernel's // comment, a schedule's #
    if not m:
        raise ValueError(f"{path}: the first line should be // expect: status=... points=... (# in a .py schedule)")
    out = {}
    for tok in shlex.split(m.group(1)):
        if "~=" in tok:
            k, v = tok.split("~=", 1)
            out[k + "~"] = v
        else:
            k, v = tok.split("=", 1)
            out[k] = float(v) if k == "points" else v
    if not ("status" in out and "points" in out) and "status~" not in out:
        raise ValueError(f"{path}: the expect line needs status= and points= (or status~= for a calibration case)")
    return out


TRITON_CHAPTERS = ("15_triton",)   # Python submissions: tests/autograder/test_triton_corpus.py grades them


def corpus_files():
    """The CUDA cases (.cu, and .mutant edits of a .cu reference)."""
    return sorted(p for p in [*CORPUS.glob("*/*/*.cu"), *CORPUS.glob("*/*/*.mutant")]
                  if p.parent.parent.name not in TRITON_CHAPTERS)


def triton_files():
    """The Triton cases (.py, and .mutant edits of a .py reference)."""
    return sorted(p for ch in TRITON_CHAPTERS for p in [*CORPUS.glob(f"{ch}/*/*.py"), *CORPUS.glob(f"{ch}/*/*.mutant")])


def corpus_source(path) -> str:
    """The submission a corpus file stands for: a .cu file's text, or a .mutant's reference with its edits."""
    path = Path(path)
    text = path.read_text()
    if path.suffix != ".mutant":
        return text
    lines = text.splitlines()
    m = re.fullmatch(r"(?://|#)\s*from:\s*(\S+)", lines[1].strip()) if len(lines) > 1 else None
    if not m:
        raise ValueError(f"{path}: the second line should be // from: solutions/<chapter>/<file>.cu")
    source = (ROOT / m.group(1)).read_text()
    edits = re.findall(r"^<<<<\n(.*?)\n====\n(.*?)\n?>>>>$", text, re.S | re.M)
    if not edits:
        raise ValueError(f"{path}: no edit (<<<< reference lines ==== new lines >>>>)")
    for old, new in edits:
        if source.count(old) != 1:
            raise ValueError(f"{path}: the reference holds {source.count(old)} copies of {old!r}, not one")
        source = source.replace(old, new)
    return lines[0] + "\n" + source


def solution_cases(suffixes=(".cu",)):
    """The reference solutions of chapters with corpus folders (.cu; ``(".py",)``: the Triton ones): full marks."""
    out = []
    for ch in sorted(p.name for p in CORPUS.iterdir() if p.is_dir()):
        for ex_dir in sorted(p for p in (CORPUS / ch).iterdir() if p.is_dir()):
            for suffix in suffixes:
                sol = ROOT / "solutions" / ch / f"{ex_dir.name}{suffix}"
                if sol.exists():
                    out.append(sol)
    return out


def expectation(path) -> dict:
    path = Path(path)
    if path.is_relative_to(ROOT / "solutions"):
        from autograder import get_exercise
        ex = get_exercise(path.parent.name, path.stem)
        return {"status": "passed", "points": float(ex.max_points)}
    return parse_expect(path)


def case_id(path) -> str:
    path = Path(path)
    return ("solution/" if path.is_relative_to(ROOT / "solutions") else "") + f"{path.parent.name}/{path.stem}"


def check_report(e, exp) -> list:
    """Differences between an ExerciseReport and an expectation (empty when it matches)."""
    problems = []
    if "status" in exp and e.status != exp["status"]:
        problems.append(f"status {e.status!r}, expected {exp['status']!r}")
    if "status~" in exp and not re.search(exp["status~"], e.status):
        problems.append(f"status {e.status!r} does not match {exp['status~']!r}")
    if "points" in exp and abs(e.points - exp["points"]) > 1e-9:
        problems.append(f"points {e.points}, expected {exp['points']}")
    for key, field in (("reason~", "reason"), ("printf~", "printf")):
        if key in exp and not re.search(exp[key], getattr(e, field) or "", re.S):
            problems.append(f"{field} does not match {exp[key]!r}")
    return problems
