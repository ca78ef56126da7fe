"""Every reference kernel passes the technique checks its own spec holds students to (issue #17), compiled
for sm_75, sm_80 and sm_90 as the grader would (each arch the reference and its exercise support; an exercise
with an arch-specific target, `arch="sm_90a"`, for exactly that one)."""
import pytest

from autograder import techniques
from autograder.loader import chapters, load_chapter
from autograder.spec import Exercise, reference_source

ARCHS = ("sm_75", "sm_80", "sm_90")


def checked_exercises():
    return [ex for ch in chapters() for ex in load_chapter(ch)
            if isinstance(ex, Exercise) and (ex.techniques or ex.required_techniques or ex.required_sass)]


def cases():
    out = []
    for ex in checked_exercises():
        for arch in ARCHS:
            out.append(pytest.param(ex, arch, id=f"{ex.chapter}/{ex.name}/{arch}"))
    return out


def test_there_are_references_to_check():
    assert len({ex.chapter for ex in checked_exercises()}) >= 3


@pytest.mark.parametrize("ex,arch", cases())
def test_reference_passes_its_own_checks(ex, arch):
    course = pytest.importorskip("course")
    source = reference_source(ex)
    if course.arch_cc(arch) < tuple(ex.min_cc):
        pytest.skip(f"{ex.name} needs sm_{ex.min_cc[0]}{ex.min_cc[1]}")
    for need in (course.declared_arch(source), getattr(ex, "arch", None)):
        target = course.target_for(arch, need)   # an sm_90a reference compiles for sm_90a, on Hopper only
        if target is None:
            pytest.skip(f"{ex.name} needs {need}")
        arch = target
    if ex.language == "triton":
        verdicts = _triton_verdicts(ex, source, arch)
    else:
        verdicts = _cuda_verdicts(course, ex, source, arch)
    undecided = [v for v in verdicts if v.passed is None and techniques.CHECKS.get(v.name, None) is not None
                 and techniques.CHECKS[v.name].where == "sass" and "no SASS to read" in v.message]
    if undecided:
        pytest.skip(undecided[0].message)
    failed = [v for v in verdicts if v.passed is False]
    assert not failed, "\n\n".join(f"{v.name}: {v.message}" for v in failed)
    for v in verdicts:   # on sm_90 every SASS and log check is decided (distributed_shared is known there)
        check = techniques.CHECKS.get(v.name)
        if arch.startswith("sm_90") and (check is None or check.where in ("sass", "log")):
            assert v.passed is True, v.message


def _triton_verdicts(ex, source, arch):
    """A Triton reference compiled by the grader's own code, and its checks read from each variant's SASS."""
    pytest.importorskip("triton")
    from autograder.launchcfg import merge_launch
    from autograder.triton_build import all_keys, compile_program, reference_task
    from autograder.triton_source import launch_from_python
    prog = compile_program(source, ex, merge_launch(ex, launch_from_python(source)), arch, all_keys(ex), "ref")
    out = reference_task({"student": prog, "arch": arch}, ex)
    assert out["status"] == "ok", out.get("message")
    return [techniques.Verdict(**v) for v in out["techniques"]]


def _cuda_verdicts(course, ex, source, arch):
    try:
        prog = course.compile_for_arch(source, arch, options=tuple(ex.options), name=ex.source_file)
    except course.CompileError as exc:
        if "could not be loaded" in str(exc):
            pytest.skip("NVRTC is not installed here")
        raise
    return techniques.evaluate(ex, prog)
