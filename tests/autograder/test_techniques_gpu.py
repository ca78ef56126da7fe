"""GPU tier of the technique checks: the verdict end to end through the grader (compile child, run child,
policy) on the corpus cases that a check catches, and the references that pass them.

Run on a GPU machine:  python -m pytest tests/autograder/test_techniques_gpu.py -m gpu -v -s
"""
import pytest

from ag_corpus import CORPUS, ROOT
from ag_helpers import gpu_present
from autograder import Status, get_exercise, grade_path

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _needs_gpu():
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")


def grade(path):
    report = grade_path(path)
    assert len(report.exercises) == 1
    e = report.exercises[0]
    print(f"\n{path.name}: {e.status} {e.points:g}/{e.max_points:g}\n{e.reason}\nnotes: {e.notes}")
    return e


def test_local_memory_withholds_speed_points_only():
    e = grade(CORPUS / "05_bank_conflicts" / "transpose" / "local_tile.cu")
    ex = get_exercise("05_bank_conflicts", "transpose")
    assert (e.status, e.points) == (Status.SLOW, ex.points.correctness), e.feedback()
    assert "speed points are withheld" in e.reason and "STL" in e.reason
    assert all(s.status == Status.PASSED for s in e.sizes)
    assert e.speed is not None        # timed anyway: the reason shows its speed
    assert any("no_bank_conflicts" in n for n in e.notes) or "bank conflicts" in e.reason


def _counters_readable(e) -> bool:
    """Did the grader read ncu's counters for this grading (ncu installed, counters permitted)?"""
    said = [n for n in e.notes if "no_bank_conflicts was not checked" in n]
    # only a missing ncu or refused counters excuse it; a profile that failed to start is the grader's bug
    assert all("not installed" in n or "ERR_NVGPUCTRPERM" in n for n in said), said
    return not said


@pytest.mark.parametrize("name", ["conflicted.cu", "forged_counters.cu", "size_keyed.cu"])
def test_bank_conflicts_withhold_the_speed_points_where_ncu_reads_them(name):
    """Where the grading machine's ncu may read the counters, does a 32-way conflicted tile lose its speed
    points to the counter check, also when the kernel prints rows that pose as ncu's CSV with no conflicts, and
    when it pads its tile only at the public size a profile could be expected at?"""
    e = grade(CORPUS / "05_bank_conflicts" / "transpose" / name)
    ex = get_exercise("05_bank_conflicts", "transpose")
    assert (e.status, e.points) == (Status.SLOW, ex.points.correctness), e.feedback()
    if not _counters_readable(e):
        pytest.skip("; ".join(n for n in e.notes if "was not checked" in n))
    assert "speed points are withheld" in e.reason and "extra wavefronts" in e.reason, e.reason


@pytest.mark.parametrize("path", [ROOT / "solutions" / "05_bank_conflicts" / "transpose.cu",
                                  CORPUS / "05_bank_conflicts" / "transpose" / "swizzle.cu"], ids=lambda p: p.name)
def test_conflict_free_tiles_pass_the_counter_check(path):
    """Do the padded reference and the swizzled tile keep full marks, the check noted as passed?"""
    e = grade(path)
    assert (e.status, e.points) == (Status.PASSED, e.max_points), e.feedback()
    if not _counters_readable(e):
        pytest.skip("; ".join(n for n in e.notes if "was not checked" in n))
    assert "no_bank_conflicts: checked with Nsight Compute, passed." in e.notes


def test_cuda_core_gemm_fails_the_required_tensor_cores():
    e = grade(CORPUS / "08_tensor_cores" / "mma_gemm" / "cuda_cores.cu")
    assert (e.status, e.points) == (Status.FAILED, 0.0), e.feedback()
    assert "multiplies on the tensor cores" in e.reason and not e.sizes


@pytest.mark.parametrize("chapter,name", [("05_bank_conflicts", "transpose"), ("06_building_blocks", "reduce_sum"),
                                          ("06_building_blocks", "scan_inclusive"), ("08_tensor_cores", "mma_gemm")])
def test_references_keep_full_marks_under_their_checks(chapter, name):
    ex = get_exercise(chapter, name)
    e = grade(ROOT / "solutions" / chapter / ex.source_file)
    assert (e.status, e.points) == (Status.PASSED, ex.max_points), e.feedback()
    assert "withheld" not in e.reason
