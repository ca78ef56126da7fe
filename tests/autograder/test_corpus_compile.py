"""CPU tier for the corpus: every file states a valid verdict, and the ones expected to be compile
errors are caught (by the source check, the signature check or the grader's compile step: NVRTC and its checks
of the compiled code, which need no GPU, in the order the grader runs them), while the rest compile.
"""
import re

import pytest

from ag_corpus import case_id, corpus_files, corpus_source, parse_expect, solution_cases
from autograder import get_exercise
from autograder.signature import compare_signature
from autograder.source_check import check_source

FILES = corpus_files()


def test_corpus_covers_the_issue_list():
    """Are the kinds of submission the issue names all in the corpus?"""
    names = {p.stem for p in FILES}
    for needed in ("stub", "wrong_one_size", "off_by_one", "zero_output", "race", "half_precision", "slow",
                   "illegal_address", "infinite_loop", "changes_after_launches", "block_too_big", "reads_output",
                   # sources that would make the compiler read the grader's files, and a regex bomb
                   "include_solution", "include_stringize", "include_spliced", "include_digraph", "has_include",
                   "device_string_leak", "comment_bomb"):
        assert needed in names, needed
    assert solution_cases(), "the solutions must be graded alongside the corpus"


@pytest.mark.parametrize("path", FILES, ids=case_id)
def test_expect_line_and_compile_outcome(path):
    exp = parse_expect(path)
    assert exp.get("status", "passed") in ("passed", "slow", "flagged", "failed", "timed out", "crashed",
                                           "compile error")
    ex = get_exercise(path.parent.parent.name, path.parent.name)
    source = corpus_source(path)
    # the grader's order: the source check before anything reads the source as C++, then the signature
    problem = check_source(source) or compare_signature(ex, source)
    if problem:
        assert exp.get("status") == "compile error", problem
        assert re.search(exp["reason~"], problem, re.S), problem
        return
    course = pytest.importorskip("course")
    from autograder.compiling import compile_task
    # the grader's compile step itself (NVRTC, then what it checks in the compiled code), for sm_80, or the
    # exercise's newer min_cc (a cluster kernel does not compile below sm_90), or exactly its arch-specific
    # target (sm_90a: wgmma)
    arch = getattr(ex, "arch", None) or max("sm_80", f"sm_{ex.min_cc[0]}{ex.min_cc[1]}", key=course.arch_cc)
    result = compile_task({"chapter": ex.chapter, "exercise": ex.name, "source": source, "arch": arch})
    if result["status"] == "compile error":
        if "could not be loaded" in result["message"]:
            pytest.skip("NVRTC is not installed here")
        assert exp.get("status") == "compile error", result["message"]
        assert re.search(exp["reason~"], result["message"], re.S), result["message"]
        return
    if "loaded" in exp.get("reason~", ""):
        return  # compiles; only loading the module on a GPU fails (e.g. a 1 TiB __device__ array)
    assert exp.get("status") != "compile error", f"{path.name} compiled, but its expect line says compile error"


def test_a_mutant_is_its_reference_with_its_edits(tmp_path):
    """Does a .mutant stand for its reference with each edit made exactly once, its expect line first, and is an
    edit that no longer finds its lines in the reference an error rather than a silent copy of the reference?"""
    ref = "solutions/14_flash_attention/flash_attention.cu"
    good = tmp_path / "good.mutant"
    good.write_text(f'// expect: status=failed points=0\n// from: {ref}\n<<<<\n#define BC 64\n====\n#define BC 32\n>>>>\n')
    text = corpus_source(good)
    assert text.startswith("// expect: status=failed points=0\n// requires: sm_80")
    assert "#define BC 32" in text and "#define BC 64" not in text
    stale = tmp_path / "stale.mutant"
    stale.write_text(f"// expect: status=failed points=0\n// from: {ref}\n<<<<\nno such line\n====\nx\n>>>>\n")
    with pytest.raises(ValueError, match="0 copies"):
        corpus_source(stale)
