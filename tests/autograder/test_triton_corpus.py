"""The grader's Triton path, graded through its real children: every case of corpus/15_triton gets the verdict
its first line states. CPU tier (no GPU): the refused sources are refused, with their reason, by the parent's
check or by the compile child before any of their Python runs; the others compile (Triton, for the exercise's
oldest target) and come back "needs a GPU", or "failed" where the machine code lacks what the exercise requires.
GPU tier: the full verdict, and the references' full marks.
"""
import re
import time

import pytest

from ag_corpus import case_id, check_report, corpus_source, expectation, parse_expect, solution_cases, triton_files
from ag_helpers import gpu_present

triton = pytest.importorskip("triton", reason="Triton is an optional extra; its grader path is tested where installed")

FILES = triton_files()
SOLUTIONS = [p for p in solution_cases((".py",)) if p.parent.name == "15_triton"]


def _grade(path, chapter, exercise):
    from autograder import runner
    source = corpus_source(path)
    t0 = time.monotonic()
    report = runner.grade_source(chapter, exercise, source)
    print(f"\n{case_id(path)}: {report.status} {report.points:g}/{report.max_points:g} in "
          f"{time.monotonic() - t0:.1f} s; {(report.reason.splitlines() or [''])[0][:160]}")
    return report


def test_the_corpus_covers_right_wrong_slow_crashing_and_cheating():
    names = {p.stem for p in FILES}
    for needed in ("stub", "no_max", "tail_unmasked", "illegal_address", "hangs", "writes_input", "three_pass", "scalar_loop",
                   "import_os", "open_file", "dunder_escape", "builtins_chain", "module_alias", "jit_attribute",
                   "knobs", "autotune", "module_code", "cuda_cores", "bf16_accumulator", "tiny_tiles"):
        assert needed in names, needed
    assert {p.stem for p in SOLUTIONS} == {"softmax", "matmul"}


@pytest.mark.parametrize("path", FILES, ids=case_id)
def test_cpu_verdict(path):
    """Without a GPU: refused sources with their reason; the rest compile (or miss a required technique)."""
    if gpu_present():
        pytest.skip("the GPU tier grades these fully (test_gpu_verdict)")
    exp = parse_expect(path)
    report = _grade(path, path.parent.parent.name, path.parent.name)
    if exp.get("status") == "compile error":
        assert report.status == "compile error", report.reason
        assert re.search(exp["reason~"], report.reason, re.S), report.reason
    elif exp.get("status") == "failed" and "tensor" in exp.get("reason~", ""):
        assert report.status == "failed" and re.search(exp["reason~"], report.reason), report.reason
    else:
        assert report.status == "needs a GPU", report.reason
        assert "compiles (Triton, sm_" in report.reason


@pytest.mark.gpu
@pytest.mark.parametrize("path", SOLUTIONS + FILES, ids=case_id)
def test_gpu_verdict(path):
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")
    exercise = path.stem if path.suffix == ".py" and path.parent.name == "15_triton" else path.parent.name
    report = _grade(path, "15_triton", exercise)
    problems = check_report(report, expectation(path))
    if report.speed:
        print(f"  speed: ratio {report.speed.ratio:.3f} (student {report.speed.student_ms:.4f} ms, reference "
              f"{report.speed.reference_ms:.4f} ms, rounds {report.speed.rounds})")
    assert not problems, "; ".join(problems) + "\n\n" + report.feedback()
