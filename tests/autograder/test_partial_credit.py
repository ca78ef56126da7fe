"""Partial credit by size group, end to end: the runner's real order of sizes and crash recovery (with the
fake harness in the grading children, no GPU), the spec field's validation, and what the exercise notebooks
tell students. The scoring rule itself is tested in test_policy.py."""
import dataclasses
import json

import pytest

from autograder import CallExercise, SpecError, Status, chapters, get_exercise, grade_source, load_chapter
from autograder.loader import SPECS_DIR, validate
from repo_helpers import REPO

CH, EX = "01_first_kernel", "saxpy"
SAXPY = get_exercise(CH, EX)
LARGE = next(i for i, c in enumerate(SAXPY.sizes) if SAXPY.is_large_case(c))  # step index of the L2 case


def src(base, flags):
    return base + f"\n// FAKE: {flags}\n"


def test_wrong_only_at_the_large_size_gets_the_partial_points(fake_harness, saxpy_source):
    """Through the runner: the large case fails, the hidden cases after it still run and pass, so the
    kernel gets the spec's partial points, is not timed, and the feedback says so."""
    r = grade_source(CH, EX, src(saxpy_source, f"fail@{LARGE}"))
    assert (r.status, r.points) == (Status.FAILED, SAXPY.partial_points) and r.speed is None
    assert [s.status for s in r.sizes if s.hidden] == [Status.PASSED] * SAXPY.hidden_sizes
    assert r.reason.startswith(f"Correctness {SAXPY.partial_points:g}/{SAXPY.points.correctness:g} points")


def test_a_crash_at_the_large_size_still_grades_the_hidden_sizes(fake_harness, saxpy_source):
    """An illegal address poisons the child's context; the hidden sizes run in a fresh child and pass, so
    the small group is complete: partial points, status 'crashed'."""
    r = grade_source(CH, EX, src(saxpy_source, f"fatal@{LARGE}"))
    assert (r.status, r.points) == (Status.CRASHED, SAXPY.partial_points)
    assert [s.status for s in r.sizes if s.hidden] == [Status.PASSED] * SAXPY.hidden_sizes


def test_a_hang_at_the_large_size_leaves_the_hidden_sizes_unrun_and_scores_zero(fake_harness, saxpy_source):
    """The runner stops after a timeout; the hidden sizes come after the large one, never ran, and a size
    that never ran earns nothing."""
    r = grade_source(CH, EX, src(saxpy_source, f"hang@{LARGE}"))
    assert (r.status, r.points) == (Status.TIMED_OUT, 0)
    assert [s.status for s in r.sizes if s.hidden] == [Status.NOT_RUN] * SAXPY.hidden_sizes
    assert "stopped the sizes after it" in r.reason


def test_a_failing_hidden_size_scores_zero(fake_harness, saxpy_source):
    r = grade_source(CH, EX, src(saxpy_source, f"fail@{len(SAXPY.sizes)}"))
    assert (r.status, r.points) == (Status.FAILED, 0)
    assert "No partial credit" in r.reason and "drawn at random" in r.reason


def test_the_untouched_stub_still_scores_zero(fake_harness):
    stub = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)\n{\n    // YOUR CODE HERE\n}\n'
    r = grade_source(CH, EX, src(stub, "ok"))
    assert (r.status, r.points) == (Status.FAILED, 0)


# -- the spec field --------------------------------------------------------------------------------

def validate_copy(ex, **changes):
    validate(dataclasses.replace(ex, **changes), SPECS_DIR / f"{ex.chapter}.py")


@pytest.mark.parametrize("value,says", [
    (1.0, "between 0 and 1"), (0, "between 0 and 1"), (-0.5, "between 0 and 1"), ("half", "between 0 and 1"),
    (True, "between 0 and 1"), (0.05, "rounds down to 0"),
])
def test_a_bad_partial_fraction_is_refused_at_load(value, says):
    with pytest.raises(SpecError) as info:
        validate_copy(SAXPY, partial=value)
    msg = str(info.value)
    assert "exercise 'saxpy', field 'partial'" in msg and says in msg


def test_partial_none_and_fractions_load():
    validate_copy(SAXPY, partial=None)
    validate_copy(SAXPY, partial=0.25)


def test_a_library_call_refuses_partial():
    call = next(e for ch in chapters() for e in load_chapter(ch) if isinstance(e, CallExercise))
    with pytest.raises(SpecError, match="field 'partial'.*all-or-nothing"):
        validate_copy(call, partial=0.5)


# -- what students read ----------------------------------------------------------------------------

def intro(stem: str) -> str:
    nb = json.loads((REPO / "exercises" / "source" / stem / f"{stem}.ipynb").read_text(encoding="utf-8"))
    first = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    text = "".join(first["source"])
    assert "**Partial credit.**" in text, f"{stem}: the introduction does not state the partial-credit rule"
    return " ".join(text.split("**Partial credit.**", 1)[1].split())


NOTEBOOKS = sorted(p.name for p in (REPO / "exercises" / "source").iterdir() if p.is_dir())


@pytest.mark.parametrize("stem", NOTEBOOKS)
def test_each_notebook_states_its_specs_rule(stem):
    """Does the introduction's partial-credit paragraph say what the chapter's specs do: the fraction, what
    else is lost, any exercise that opts out, and that library calls are all-or-nothing?"""
    text = intro(stem)
    exercises = load_chapter(stem)
    kernels = [e for e in exercises if not isinstance(e, CallExercise)]
    fractions = {e.partial for e in kernels if e.partial is not None}
    words = {0.5: "half"}
    for f in fractions:
        assert f"{words.get(f, f'{f:.0%}')} its correctness points" in text, (stem, f)
    for e in kernels:
        if e.partial is None:
            assert e.name in text and "all-or-nothing" in text, (stem, e.name)
    assert ("no speed" in text) == any(e.points.speed for e in kernels), stem
    assert ("no overlap" in text) == any(e.pipeline is not None for e in kernels), stem
    calls = [e for e in exercises if isinstance(e, CallExercise)]
    assert ("calls are all-or-nothing" in text) == bool(calls), stem
    assert "drawn at random" in text and "larger than L2" in text
