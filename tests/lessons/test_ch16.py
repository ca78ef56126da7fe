"""Chapter 16 (several GPUs): the schedule table (CPU tier), the lesson's ring on one GPU and its tables on all of
them (GPU tier; the multi-GPU tests skip on one GPU)."""
import pytest

from course import multi_gpu as mg
from course.lessons import ch16


def test_schedule_table_of_four():
    rows = ch16.schedule_table(4)
    assert [r["phase"] for r in rows] == ["reduce-scatter"] * 3 + ["all-gather"] * 3
    assert rows[0] == {"step": 0, "phase": "reduce-scatter", "rank 0": "+3", "rank 1": "+0", "rank 2": "+1", "rank 3": "+2"}
    assert rows[3]["rank 0"] == "=0"   # after reduce-scatter rank 3 holds chunk 0 complete; rank 0 copies it first


def test_the_lesson_cells_are_the_kernels_the_module_names():
    import course
    cells = course.lesson_cells("16_multi_gpu")
    for name in ("read_peer4", "read_peer1", "add_into", "ring_step_1"):
        assert name in cells, name


@pytest.mark.gpu
@pytest.mark.parametrize("world", [1, 2, 5])
def test_the_lessons_one_per_thread_ring_is_exact_on_one_gpu(world):
    k = ch16.lesson_kernels(("ring_step_1",))["ring_step_1"]
    for n in (1, 33, 1_000_003):
        assert ch16.simulate(k, world, n, one_per_thread=True, seed=n) == ""


@pytest.mark.gpu
def test_a_ring_kernel_missing_the_tail_is_caught_by_the_simulation():
    import course
    bad = course.compile(course.lesson_cell("16_multi_gpu", "ring_step_1").source.replace(
        "i >= n) return;", "i >= n - 1) return;")).kernel("ring_step_1")
    assert "wrong" in ch16.simulate(bad, 2, 33, one_per_thread=True)


@pytest.mark.gpu
def test_the_all_reduce_table_checks_and_times_every_ring_against_nccl():
    if mg.gpu_count() < 2:
        pytest.skip("needs two or more GPUs")
    table = ch16.allreduce_table(64 << 20, verbose=False)
    names = [r["name"] for r in table]
    assert names[0] == "NCCL all-reduce" and "direct ring, ring_step_1" in names
    assert all(r["rate"] > 0 for r in table)
    o = ch16.overlap(64 << 20, size=4096, reps=2)
    assert 0.0 <= o["hidden"] <= 1.0 and o["both_ms"] <= 1.1 * o["serial_ms"]
