"""Multi-GPU exercises (autograder/ring.py): the spec's contract, skipping with too few GPUs, and (GPU tier) the
reference's verdict. The corpus's verdicts run in tests/autograder/test_corpus_gpu.py on a machine with two or
more GPUs."""
import dataclasses

import numpy as np
import pytest

from autograder import Ring, Status, get_exercise, grade_source, policy
from autograder.ring import RING_PARAMS, gpus_needed, ring_spec_problem, skipped_reason
from course import multi_gpu as mg
from ag_corpus import ROOT

CH, EX = "16_multi_gpu", "ring_step"


def _ex(**changes):
    return dataclasses.replace(get_exercise(CH, EX), **changes)


def test_the_chapter_spec_is_a_ring_of_two_or_more():
    ex = get_exercise(CH, EX)
    assert isinstance(ex.ring, Ring) and gpus_needed(ex) == 2 and ring_spec_problem(ex) == ("", "")
    assert tuple(p.name for p in ex.params) == RING_PARAMS
    assert gpus_needed(get_exercise("01_first_kernel", "saxpy")) == 1


@pytest.mark.parametrize("changes,field,words", [
    ({"ring": Ring(gpus=1)}, "ring", "from 2 to 8"),
    ({"ring": Ring(nbytes=1000)}, "ring", "at least 1 MiB"),
    ({"ring": "two GPUs"}, "ring", "Ring(gpus=2"),
    ({"language": "triton"}, "ring", "CUDA kernels"),
])
def test_a_ring_that_does_not_fit_is_refused_by_name(changes, field, words):
    got_field, problem = ring_spec_problem(_ex(**changes))
    assert got_field == field and words in problem, problem


def test_a_ring_kernel_must_take_the_drivers_parameters_in_order():
    ex = get_exercise(CH, EX)
    swapped = [ex.params[1], ex.params[0], *ex.params[2:]]
    field, problem = ring_spec_problem(_ex(params=swapped))
    assert field == "params" and "mine, left, n, rank, world, step" in problem


def test_skipped_with_one_gpu_leaves_the_points_out_and_says_how_many_it_needs():
    r = policy.skipped_report(get_exercise(CH, EX), "sm_90", gpu_count=1)
    assert r.status == Status.SKIPPED and r.points == 0 and r.counted_max_points == 0 and r.max_points == 10
    assert "needs 2 GPUs of one host (this machine has 1)" in r.reason and "regrade" in r.reason
    assert r.reason == skipped_reason(get_exercise(CH, EX), 1)
    # an exercise for one GPU is never skipped for the count, and an old GPU keeps its own reason
    saxpy = get_exercise("01_first_kernel", "saxpy")
    assert "GPUs" not in policy.skipped_report(dataclasses.replace(saxpy, min_cc=(9, 0)), "sm_75", gpu_count=1).reason


def test_the_grader_skips_a_ring_on_a_one_gpu_machine_before_compiling(fake_harness, monkeypatch):
    monkeypatch.setenv("FAKE_GPUS", "1")
    source = (ROOT / "solutions" / CH / "ring_step.cu").read_text()
    r = grade_source(CH, EX, source + "\n// FAKE: ok\n")
    assert r.status == Status.SKIPPED and r.counted_max_points == 0, r.reason
    assert "needs 2 GPUs" in r.reason


def test_the_grader_grades_a_ring_on_a_two_gpu_machine(fake_harness, monkeypatch):
    monkeypatch.setenv("FAKE_GPUS", "2")
    source = (ROOT / "solutions" / CH / "ring_step.cu").read_text()
    r = grade_source(CH, EX, source + "\n// FAKE: ok\n")
    assert r.status == Status.PASSED and r.points == 10, r.feedback()


def test_two_gpus_that_cannot_time_a_ring_skip_it_with_the_reason(fake_harness, monkeypatch):
    """Through the run child: two GPUs without peer access (or without NCCL) skip the exercise with the reason the
    machine gave, before any student kernel runs on a peer pointer it cannot read."""
    why = "GPU 1 cannot reach GPU 0's memory (no peer access between them)"
    monkeypatch.setenv("FAKE_GPUS", "2")
    monkeypatch.setenv("FAKE_RING_PROBLEM", why)
    source = (ROOT / "solutions" / CH / "ring_step.cu").read_text()
    r = grade_source(CH, EX, source + "\n// FAKE: ok\n")
    assert r.status == Status.SKIPPED and r.counted_max_points == 0 and why in r.reason, r.reason


def _ring_on_host(step, n, world, rng, integers=False):
    """Every rank's buffer after the whole ring, each step applied by ``step`` (the spec's NumPy reference)."""
    bufs = [rng.integers(-1000, 1000, n).astype(np.float32) if integers else rng.random(n, dtype=np.float32)
            for _ in range(world)]
    want = np.sum([b.astype(np.float64) for b in bufs], axis=0)
    for s in range(2 * (world - 1)):
        new = []
        for r in range(world):   # every rank reads its neighbour's buffer as the step before left it
            v = {"mine": bufs[r], "left": bufs[(r - 1) % world], "n": n, "rank": r, "world": world, "step": s}
            new.append(step(v)["mine"])
        bufs = new
    return bufs, want


@pytest.mark.parametrize("world", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("n", [1, 3, 33, 4097])
def test_the_specs_step_makes_the_exact_sum_through_the_whole_ring(world, n):
    """Is the spec's NumPy reference, applied step by step as the driver does, the all-reduce (exact for
    integer-valued floats)? A reference that got the chunk or the phase wrong would fail here."""
    ex = get_exercise(CH, EX)
    bufs, want = _ring_on_host(ex.reference, n, world, np.random.default_rng(world * 1000 + n), integers=True)
    for r, b in enumerate(bufs):
        assert np.array_equal(b.astype(np.float64), want), (r, np.flatnonzero(b != want)[:5])


def test_no_step_reads_a_chunk_that_another_rank_writes_in_the_same_step():
    """The driver runs a step on every rank at once: rank r writes chunk c of its buffer while rank r + 1 reads
    chunk c' of it, so c != c' must hold for every world size (else the ring races)."""
    for world in range(2, 9):
        by = {(s, r): c for s, r, c, _ in mg.ring_schedule(world)}
        for s in range(2 * (world - 1)):
            for r in range(world):
                assert by[s, r] != by[s, (r + 1) % world], (world, s, r)


def test_a_machine_that_cannot_time_the_ring_says_why():
    """Two GPUs without peer access between them, or no NCCL: skipped with the reason, not a crash of every
    student's kernel on a peer pointer it cannot read."""
    why = "GPU 1 cannot reach GPU 0's memory (no peer access between them: check nvidia-smi topo -m; ...)"
    r = policy.skipped_report(get_exercise(CH, EX), "sm_90", gpu_count=2, why=why)
    assert r.status == Status.SKIPPED and r.counted_max_points == 0 and r.reason.startswith(f"skipped: {why}: ")
