"""course.multi_gpu: the ring's arithmetic (CPU tier), the rings and NCCL on one GPU and on all of them (GPU tier;
the multi-GPU tests skip on a machine with one), and the course timer's flush of every GPU a callable uses."""
import numpy as np
import pytest

from course import multi_gpu as mg


@pytest.mark.parametrize("n,world,chunk", [(0, 1, 0), (1, 1, 4), (1, 8, 4), (33, 3, 12), (4097, 2, 2052),
                                           (1_000_003, 8, 125_004)])
def test_chunks_are_a_multiple_of_4_covering_n(n, world, chunk):
    assert mg.ring_chunk(n, world) == chunk
    bounds = [mg.ring_chunk_bounds(n, world, c) for c in range(world)]
    covered = [i for lo, hi in bounds for i in range(lo, hi)]
    assert covered == list(range(n))                        # each element in exactly one chunk, in order
    assert all(lo % 4 == 0 or lo == n for lo, _ in bounds)  # every chunk starts 16-byte aligned (or is empty)


def test_a_bad_ring_size_is_refused():
    with pytest.raises(ValueError, match="world >= 1"):
        mg.ring_chunk(10, 0)


def test_schedule_adds_then_copies_and_every_rank_touches_every_chunk_once_per_phase():
    for world in range(1, 9):
        sched = mg.ring_schedule(world)
        assert len(sched) == 2 * (world - 1) * world
        for r in range(world):
            adds = [c for s, q, c, op in sched if q == r and op == "add"]
            copies = [c for s, q, c, op in sched if q == r and op == "copy"]
            assert len(adds) == len(copies) == world - 1
            assert len(set(adds)) == world - 1 and (r % world) not in adds   # its own chunk is never added into
            # the chunk a rank completes last in reduce-scatter is the one it never receives in all-gather
            if world > 1:
                assert set(range(world)) - set(copies) == {adds[-1]}


def test_bus_bandwidth_is_algbw_times_two_n_minus_one_over_n():
    assert mg.algorithm_bandwidth(1e9, 1.0) == pytest.approx(1000.0)
    assert mg.bus_bandwidth(1e9, 1.0, 2) == pytest.approx(1000.0)
    assert mg.bus_bandwidth(1e9, 1.0, 8) == pytest.approx(1750.0)
    assert mg.ring_bytes(8 << 20, 4) == pytest.approx(1.5 * (8 << 20))


# --- GPU tier --------------------------------------------------------------------------------------------------

def _reference():
    import course
    return course.compile(course.solution_source("16_multi_gpu", "ring_step.cu")).kernel("ring_step")


def _add_into():
    import course
    return course.lesson_cell("16_multi_gpu", "add_into").kernel("add_into")   # the lesson's cell, its one home


def _exact(ranks, n, run, seed=0):
    bufs = mg.fill_ranks(ranks, n, seed=seed, integers=True)
    want = mg.host_sum(bufs)
    run(bufs)
    ranks.sync()
    return mg.check_allreduce(want, bufs, exact=True)


@pytest.mark.gpu
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_the_reference_ring_on_one_gpu_gives_the_exact_sum(world):
    ranks = mg.ranks_on([0] * world, _reference())
    for n in (1, 33, 4097, 1_000_003):
        assert _exact(ranks, n, lambda b: mg.ring_allreduce(ranks, b)) == ""


@pytest.mark.gpu
@pytest.mark.parametrize("pieces", [1, 3, 8])
def test_the_copy_ring_on_one_gpu_gives_the_exact_sum(pieces):
    import cupy
    ranks = mg.ranks_on([0, 0, 0])
    n = 1_000_003
    scratch = [cupy.empty(n, dtype=cupy.float32) for _ in range(3)]
    adds = [_add_into()] * 3
    assert _exact(ranks, n, lambda b: mg.copy_ring_allreduce(ranks, b, scratch, adds, pieces=pieces)) == ""


@pytest.mark.gpu
def test_a_wrong_sum_is_reported_with_where():
    ranks = mg.ranks_on([0, 0], _reference())
    bufs = mg.fill_ranks(ranks, 100, integers=True)
    want = mg.host_sum(bufs)
    mg.ring_allreduce(ranks, bufs)
    ranks.sync()
    assert mg.check_allreduce(want, bufs, exact=True) == ""
    bufs[1][7] += 1
    assert mg.check_allreduce(want, bufs, exact=True).startswith("rank 1: 1 of 100 values wrong, first at [7]")


def _two_or_more():
    if mg.gpu_count() < 2:
        pytest.skip("needs two or more GPUs")
    return list(range(mg.gpu_count()))


@pytest.mark.gpu
def test_the_reference_ring_nccl_and_the_copy_ring_on_every_gpu_give_the_exact_sum():
    import cupy
    devs = _two_or_more()
    n = (16 << 20) + 3
    ring = mg.ranks_on(devs, _reference())
    assert _exact(ring, n, lambda b: mg.ring_allreduce(ring, b)) == ""
    nccl = mg.Ranks(devs)
    assert _exact(nccl, n, lambda b: mg.nccl_allreduce(nccl, b)) == ""
    copy = mg.ranks_on(devs)
    scratch, adds = [], []
    for d in devs:
        with cupy.cuda.Device(d):
            scratch.append(cupy.empty(n, dtype=cupy.float32))
        adds.append(mg.load_kernel(_add_into(), d))
    assert _exact(copy, n, lambda b: mg.copy_ring_allreduce(copy, b, scratch, adds, pieces=4)) == ""


@pytest.mark.gpu
def test_peer_copies_and_a_timed_ring_across_gpus():
    """The copy matrix is positive with a faster diagonal, and the course's timer times a ring between one
    stream's two events (its samples positive and steady) while flushing every GPU's L2."""
    import course
    devs = _two_or_more()
    m = mg.copy_bandwidth_matrix(64 << 20)
    assert m.shape == (len(devs), len(devs)) and (m > 0).all()
    assert m[0, 0] > m[0, 1]
    ranks = mg.ranks_on(devs, _reference())
    bufs = mg.fill_ranks(ranks, 64 << 20)
    r = course.benchmark(lambda: mg.ring_allreduce(ranks, bufs), devices=devs)
    assert r.n >= 10 and r.median_ms > 0
    # the ring is limited by the link: its bus bandwidth cannot beat a peer copy's by much
    assert mg.bus_bandwidth(4 * (64 << 20), r.median_ms, len(devs)) < 1.2 * m[0, 1]


def _explore(world: int, wait: bool = True):
    """Every way the ranks' steps can run when each rank's step s + 1 waits only for its left neighbour's step s
    (`Ranks.barrier`): a step is an interval between its start and its end, reads and writes anywhere inside.
    Returns (races, wrong): steps that overlap a step of the right neighbour on the same chunk of the same buffer,
    and end states whose sums are wrong."""
    steps = 2 * (world - 1)
    chunk = {(s, r): c for s, r, c, _ in mg.ring_schedule(world)}
    start = (tuple([0] * world), tuple([False] * world), tuple(tuple(frozenset([(r, c)]) for c in range(world))
                                                            for r in range(world)))
    seen, todo, races, wrong = {start}, [start], set(), 0
    want = frozenset((r, c) for r in range(world) for c in range(world))
    while todo:
        done, running, vals = todo.pop()
        for r in range(world):   # rank r + 1 reads rank r's buffer while rank r writes it: the same chunk?
            q = (r + 1) % world
            if world > 1 and running[r] and running[q] and chunk[done[r], r] == chunk[done[q], q]:
                races.add((done[r], r, done[q], q))
        if all(d == steps for d in done):
            wrong += any(v != frozenset(c for c in want if c[1] == i) for b in vals for i, v in enumerate(b))
            continue
        for r in range(world):
            k = done[r]
            if running[r]:   # the step ends: it read the left buffer (unchanged while it ran: no race there)
                c, left = chunk[k, r], vals[(r - 1) % world][chunk[k, r]]
                new = list(map(list, vals))
                new[r][c] = (vals[r][c] | left) if k < world - 1 else left
                nxt = (done[:r] + (k + 1,) + done[r + 1:], running[:r] + (False,) + running[r + 1:],
                       tuple(tuple(b) for b in new))
            elif k < steps and (not wait or k == 0 or done[(r - 1) % world] >= k):
                nxt = (done, running[:r] + (True,) + running[r + 1:], vals)
            else:
                continue
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return races, wrong


@pytest.mark.parametrize("world", [2, 3, 4, 5])
def test_waiting_for_the_left_neighbour_alone_orders_the_ring(world):
    """Is `Ranks.barrier`'s one wait per rank enough? Over every interleaving it allows, no rank writes a chunk
    its right neighbour is reading at the same time, and every rank ends with every rank's values in every chunk."""
    races, wrong = _explore(world)
    assert not races and not wrong, (sorted(races)[:5], wrong)


def test_the_model_finds_the_races_of_a_ring_without_waits():
    """Without the wait, a rank may run ahead of its neighbours: the same exploration must then find a race or a
    wrong sum, or the test above could not fail."""
    races, wrong = _explore(3, wait=False)
    assert races and wrong
