"""The cooperative launch (`Kernel.__call__(..., cooperative=True)`): the co-residency check on the CPU, the
launch path with a fake CuPy function, and (GPU) a grid-wide barrier that only a cooperative launch makes
correct, plus a grid one block too large refused with a LaunchError."""
from __future__ import annotations

import pytest

from repo_helpers import import_course

course = import_course()
from course._launch import Kernel, cooperative_problem  # noqa: E402


def test_cooperative_problem_counts_blocks_per_sm_times_sms():
    """Is a grid up to blocks-per-SM x SMs accepted, one more refused with both numbers and the way out?"""
    assert cooperative_problem("k", 1056, 256, 0, per_sm=8, sm_count=132) is None
    msg = cooperative_problem("k", 1057, 256, 0, per_sm=8, sm_count=132)
    assert msg and "1057" in msg and "1056" in msg and "8 per SM" in msg and "132 SMs" in msg
    assert "max_cooperative_grid" in msg
    zero = cooperative_problem("k", 1, 1024, 200_000, per_sm=0, sm_count=132)
    assert zero and "does not fit on an SM" in zero


class _FakeFunction:
    """Stands in for CuPy's Function: records how it was called."""

    def __init__(self):
        self.calls = []

    def __call__(self, grid, block, args, shared_mem=0, stream=None, **kw):
        self.calls.append((grid, block, kw))


def _fake_kernel(monkeypatch, per_sm=4, sms=10):
    fn = _FakeFunction()
    k = Kernel(fn, "k", None, None, None)
    monkeypatch.setattr(k, "_attr", lambda attr: 1024)
    monkeypatch.setattr(k, "occupancy", lambda block, shared_mem=0: per_sm)
    import course._env as env
    monkeypatch.setattr(env, "device_info", lambda: type("Info", (), {"sm_count": sms})())
    return k, fn


def test_cooperative_call_checks_then_launches_cooperatively(monkeypatch):
    """Does cooperative=True reach CuPy as enable_cooperative_groups=True when the grid fits, and is a grid
    too large refused before CuPy sees it (CuPy would shrink it with a warning)?"""
    k, fn = _fake_kernel(monkeypatch)
    k(40, 128, cooperative=True)
    k(41, 128)                                   # an ordinary launch is not limited
    assert fn.calls == [((40, 1, 1), (128, 1, 1), {"enable_cooperative_groups": True}),
                        ((41, 1, 1), (128, 1, 1), {})]
    with pytest.raises(course.LaunchError, match="at most 40 fit"):
        k((41, 1), 128, cooperative=True)
    assert len(fn.calls) == 2
    assert k.max_cooperative_grid(128) == 40


GRID_SYNC = r'''
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
// phase 1: block b writes b + 1; grid-wide barrier; phase 2: every block reads its right neighbour's value
extern "C" __global__ void neighbours(unsigned int* a, unsigned int* b)
{
    if (threadIdx.x == 0)
        a[blockIdx.x] = blockIdx.x + 1;
    cg::this_grid().sync();
    if (threadIdx.x == 0)
        b[blockIdx.x] = a[(blockIdx.x + 1) % gridDim.x];
}
'''


@pytest.mark.gpu
def test_grid_sync_under_a_cooperative_launch():
    """On a GPU, does a full cooperative grid see every other block's phase-1 write after grid.sync(), and is
    a grid one block too large refused with the occupancy numbers?"""
    import cupy
    import numpy as np
    k = course.compile(GRID_SYNC).kernel("neighbours")
    grid = k.max_cooperative_grid(128)
    assert grid >= course.device_info().sm_count
    a, b = cupy.zeros(grid + 1, dtype=cupy.uint32), cupy.zeros(grid + 1, dtype=cupy.uint32)
    k(grid, 128, a, b, cooperative=True)
    want = (np.arange(grid) + 1) % grid + 1
    assert np.array_equal(b[:grid].get(), want)
    with pytest.raises(course.LaunchError, match="cooperative launch"):
        k(grid + 1, 128, a, b, cooperative=True)
