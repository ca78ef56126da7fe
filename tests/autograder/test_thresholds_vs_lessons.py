"""Thresholds against the lessons' own kernels (autograder/SPEC_FORMAT.md, "Setting speed thresholds"): a
lesson kernel that runs under the exercise's launch as it is must stay at least 5% below the exercise's full
speed threshold, in the recorded H100 results; the reference earns full points with room."""
import pytest

from autograder import get_exercise
from repo_helpers import recorded_rows

MARGIN = 0.05
# (chapter, exercise, the lesson kernel's recorded row, the graded reference's recorded row): pairs recorded
# in the same run of the benchmark suite, where the lesson kernel can be submitted as it is (renamed)
PAIRS = [
    ("07_staged_gemm", "sgemm_regtile", "stage 5: register tiles 2D (8 x 8 outputs/thread)",
     "stage 6: float4 loads, transposed A, double buffer"),
    ("06_building_blocks", "histogram256", "histogram, lesson hist_shared, 2^26 uniform ints",
     "reference histogram256 (privatized), 2^26 uniform ints"),
    ("09_convolution", "conv_blocked", "16 outputs per thread, sliding register window (ch09 variant 5)",
     "register-blocked convolution (graded conv_blocked reference), F=2^23, G=512"),
]


def _ratio(chapter, lesson_row, reference_row):
    rows, _ceil = recorded_rows(chapter)
    missing = [n for n in (lesson_row, reference_row) if n not in rows]
    if missing:
        pytest.fail(f"benchmarks/results has no row {missing} for {chapter}: the pair names rows that are no "
                    "longer recorded; update PAIRS or re-record", pytrace=False)
    return rows[lesson_row]["value"] / rows[reference_row]["value"]


@pytest.mark.parametrize("chapter,exercise,lesson_row,reference_row", PAIRS, ids=[p[1] for p in PAIRS])
def test_copying_the_lesson_does_not_earn_full_speed_points(chapter, exercise, lesson_row, reference_row):
    ex = get_exercise(chapter, exercise)
    ratio = _ratio(chapter, lesson_row, reference_row)
    assert ratio <= ex.speed_threshold * (1 - MARGIN), (
        f"{exercise}: the lesson's {lesson_row!r} recorded {ratio:.3f} of the reference, within {MARGIN:.0%} of "
        f"(or above) the full-points threshold {ex.speed_threshold}: raise the threshold or add a tier")


def _speed_graded():
    from autograder import chapters, load_chapter
    return [(ch, e.name) for ch in chapters() for e in load_chapter(ch)
            if getattr(getattr(e, "points", None), "speed", 0)]


@pytest.mark.parametrize("chapter,exercise", _speed_graded(), ids=lambda v: v)
def test_the_reference_clears_its_threshold_with_room(chapter, exercise):
    """Is every full-points threshold at least 10% below the reference's own ratio (1.0)?"""
    assert get_exercise(chapter, exercise).speed_threshold <= 0.9


def test_the_rule_can_fail():
    """With chapter 07's old threshold (0.6), would the pair have been caught (stage 5 measured 0.64)?"""
    ratio = _ratio(*(PAIRS[0][i] for i in (0, 2, 3)))
    assert not ratio <= 0.6 * (1 - MARGIN)


# Lesson kernels with an exercise's signature that cannot run under it as they are, so the rule above does not
# apply to them (examined; their recorded ratios would otherwise sit at the reference's): chapter 06's
# reduce5_grid_stride (1.02 of the reduce_sum reference) adds its block totals into *out with atomicAdd, and the
# grader poisons *out (NaN) before every call, so the sum comes out NaN; tests/autograder/corpus/06_building_blocks/
# reduce_sum/atomic.cu is that kernel's verdict on the GPU.
ATOMIC_INTO_OUTPUT = [("06_building_blocks", "reduce_sum", "out")]


@pytest.mark.parametrize("chapter,exercise,output", ATOMIC_INTO_OUTPUT, ids=[p[1] for p in ATOMIC_INTO_OUTPUT])
def test_lesson_kernels_that_accumulate_into_the_output_start_from_poison(chapter, exercise, output):
    from autograder.spec import Out, POISON_DEFAULT
    (p,) = [p for p in get_exercise(chapter, exercise).params if isinstance(p, Out) and p.name == output]
    assert p.fill is POISON_DEFAULT, (
        f"{exercise}: {output} is filled with {p.fill!r} before each call, so the lesson's atomicAdd reduction "
        "would run as it is and earn the reference's speed: poison it again or add the pair to PAIRS")
    import re
    from ag_corpus import CORPUS, parse_expect
    case = CORPUS / chapter / exercise / "atomic.cu"
    assert re.search(r"atomicAdd\(\s*out", case.read_text()) and parse_expect(case)["status"] == "failed"
