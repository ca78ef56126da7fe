"""course.occupancy: blocks per SM from the hardware rules, against hand-computed cases (CPU), and against the
CUDA occupancy API for compiled kernels (GPU)."""
from __future__ import annotations

import sys

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from repo_helpers import import_course  # noqa: E402

course = import_course()
occ = course.occupancy


# (cc, threads, regs, smem) -> (blocks per SM, occupancy, limiter). Worked by hand from the rules: registers per
# warp = regs x 32 rounded up to 256; each of the 4 sub-partitions holds 16384 / that many warps; shared memory
# per block = smem + 1 KB (8.0+) rounded up to 128 B (256 B on 7.5), divided into the SM's 64/164/100/228 KB.
CASES = [
    # 256 x 64 regs: 2048 regs/warp, 8 warps per sub-partition, 32 warps = 4 blocks of 8 warps
    ((9, 0), 256, 64, 0, 4, 32 / 64, "registers"),
    ((8, 0), 256, 64, 0, 4, 32 / 64, "registers"),
    ((8, 6), 256, 64, 0, 4, 32 / 48, "registers"),
    ((7, 5), 256, 64, 0, 4, 1.0, "warps"),        # 32 warps is also all a Turing SM holds: a tie, warps named
    # 1024 x 32 regs: 1024 regs/warp, 16 per sub-partition = 64 warps = 2 blocks of 32
    ((9, 0), 1024, 32, 0, 2, 1.0, "warps"),
    ((7, 5), 1024, 32, 0, 1, 1.0, "warps"),
    ((8, 6), 1024, 32, 0, 1, 32 / 48, "warps"),   # 48 warps: one block of 32 fits, two do not
    ((8, 9), 1024, 32, 0, 1, 32 / 48, "warps"),
    # 128 threads x 37 regs: 1184 -> 1280 regs/warp, 12 warps per sub-partition, 48 warps = 12 blocks of 4
    ((9, 0), 128, 37, 0, 12, 48 / 64, "registers"),
    # 1024 x 64 regs: exactly the 64K register file, one block
    ((9, 0), 1024, 64, 0, 1, 32 / 64, "registers"),
    # 1024 x 72 regs: 2304 x 32 warps > 65536 registers: the block cannot launch at all
    ((9, 0), 1024, 72, 0, 0, 0.0, "registers"),
    # shared memory: 48 KiB + 1 KiB reserved = 50176 B; 233472 // 50176 = 4 (H100), 167936 // 50176 = 3 (A100)
    ((9, 0), 128, 32, 48 * 1024, 4, 16 / 64, "shared memory"),
    ((8, 0), 128, 32, 48 * 1024, 3, 12 / 64, "shared memory"),
    ((7, 5), 128, 32, 48 * 1024, 1, 4 / 32, "shared memory"),   # no reservation on 7.5: 65536 // 49152
    ((7, 5), 128, 32, 32 * 1024, 2, 8 / 32, "shared memory"),
    # the 1 KB reservation decides: 113 KiB + 1 KiB fits twice into 228 KiB, 114 KiB + 1 KiB does not
    ((9, 0), 256, 32, 113 * 1024, 2, 16 / 64, "shared memory"),
    ((9, 0), 256, 32, 114 * 1024, 1, 8 / 64, "shared memory"),
    ((8, 0), 256, 32, 82 * 1024, 1, 8 / 64, "shared memory"),   # 2 x 82 KiB = 164 KiB, but + 2 KiB reserved
    # more than a block may have at all (99 KiB on 8.6)
    ((8, 6), 128, 32, 100 * 1024, 0, 0.0, "shared memory"),
    # tiny blocks: the 32-blocks-per-SM cap
    ((9, 0), 32, 16, 0, 32, 32 / 64, "blocks"),
    ((7, 5), 32, 16, 0, 16, 16 / 32, "blocks"),
]


@pytest.mark.parametrize("cc, threads, regs, smem, blocks, occupancy, limiter", CASES)
def test_prediction_matches_hand_computed(cc, threads, regs, smem, blocks, occupancy, limiter):
    """Does the prediction give the hand-worked blocks per SM, occupancy and limiter?"""
    p = occ.predict(threads, regs, smem, cc)
    assert (p["blocks_per_sm"], p["limiter"]) == (blocks, limiter), p
    assert p["occupancy"] == pytest.approx(occupancy)
    assert p["warps_per_sm"] == blocks * -(-threads // 32)


def test_allocation_units():
    """Are registers rounded per warp to 256 and shared memory to 256 B (7.5) or 128 B plus 1 KB (8.0+)?"""
    assert occ.predict(128, 37, 0, (9, 0))["regs_per_block"] == 4 * 1280
    assert occ.predict(128, 32, 100, (7, 5))["smem_allocated"] == 256
    assert occ.predict(128, 32, 100, (9, 0))["smem_allocated"] == 1152  # 100 + 1024 -> 9 x 128
    assert occ.predict(128, 32, 0, (9, 0))["smem_allocated"] == 1024  # the reservation alone


def test_each_limit_is_reported():
    """Are all four limits returned, and the tied ones listed together?"""
    p = occ.predict(256, 64, 0, (7, 5))
    assert (p["by_warps"], p["by_blocks"], p["by_registers"]) == (4, 16, 4)
    assert p["limiters"] == ["warps", "registers"]
    assert occ.limiter_of({"registers": 2, "warps": 2, "shared memory": 5}) == "warps"
    assert occ.limiter_of({"registers": 1, "warps": 2}) == "registers"
    assert occ.limiter_of({}) == ""


def test_impossible_inputs_are_refused():
    """Are a 0 or 1025-thread block, 256 registers, and an unknown compute capability refused with the range?"""
    for bad in ((0, 32, 0), (1025, 32, 0), (256, 256, 0), (256, 32, -1)):
        with pytest.raises(ValueError):
            occ.predict(*bad)
    with pytest.raises(ValueError, match="7.5"):
        occ.predict(256, 32, 0, (6, 1))


def test_sweep_rows_follow_predict():
    """Does the sweep cover 32..1024 threads in warps, each row agreeing with predict?"""
    rows = occ.sweep(64, 0, (9, 0))
    assert [r["threads"] for r in rows] == list(range(32, 1025, 32))
    r256 = next(r for r in rows if r["threads"] == 256)
    assert (r256["blocks/SM"], r256["limiter"], r256["occupancy %"]) == (4, "registers", 50.0)


def test_widget_without_ipywidgets_prints_the_table(monkeypatch, capsys):
    """Without ipywidgets, does the widget print the block-size table for the given registers instead?"""
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    assert occ.widget(cc=(8, 0), regs=64) is None
    out = capsys.readouterr().out
    assert "ipywidgets is not available" in out and "sm_80" in out and "registers" in out


def test_widget_has_three_sliders():
    """With ipywidgets, are there sliders for threads, registers and shared memory, above the plot?"""
    pytest.importorskip("ipywidgets")
    box = occ.widget(cc=(9, 0))
    names = [c.description for c in box.children[:3]]
    assert names == ["threads", "registers", "smem KiB"]
    assert box.children[2].max == 227  # KiB a block may opt in to on sm_90


# --- GPU -------------------------------------------------------------------------------------------------

KERNELS = r'''
extern "C" __global__ void light(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
extern "C" __global__ void tiled(const float* x, float* y, int n) {
    __shared__ float tile[4096];  // 16 KiB of static shared memory
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = tile[(threadIdx.x + 1) % blockDim.x];
}
extern "C" __global__ void heavy(const float* x, float* y, int n) {
    float acc[40];
    #pragma unroll
    for (int j = 0; j < 40; ++j) acc[j] = x[(threadIdx.x + 37 * j) % n];
    #pragma unroll
    for (int r = 0; r < 6; ++r)
        #pragma unroll
        for (int j = 0; j < 40; ++j) acc[j] = acc[j] * acc[(j + r + 1) % 40] + 1.0f;
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < 40; ++j) s += acc[j];
    y[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
'''


@pytest.mark.gpu
@pytest.mark.parametrize("name, smem", [("light", 0), ("light", 40 * 1024), ("tiled", 0), ("tiled", 20 * 1024),
                                        ("heavy", 0), ("heavy", 8 * 1024)])
def test_prediction_equals_the_occupancy_api(name, smem):
    """For compiled kernels (few and many registers, static and dynamic shared memory), does the prediction equal
    Kernel.occupancy at every block size?"""
    cc = course.device_info().cc
    if tuple(cc) not in occ.LIMITS:
        pytest.skip(f"no occupancy table for compute capability {cc[0]}.{cc[1]}")
    k = course.compile(KERNELS).kernel(name)
    rows = occ.compare(k, sizes=(32, 64, 96, 128, 256, 384, 512, 768, 1024), smem=smem)
    wrong = [r for r in rows if not r["match"]]
    assert not wrong, wrong
    m = occ.measured(k, 256, smem)
    assert m["blocks_per_sm"] == occ.predict(256, m["registers"], m["smem_per_block"], cc)["blocks_per_sm"]


def test_unknown_gpus_get_sm90s_rules_and_launch_limits_follow_the_gpu(monkeypatch):
    """Does a compute capability without a table fall back to sm_90's (sm_100, sm_120), and does `fits` refuse
    a reservation above this GPU's per-block limit (100 KiB on an sm_86's 99 KiB) while allowing anything
    without a GPU (recordings only)?"""
    import types
    from course import _env, occupancy
    assert occupancy.table_cc((8, 6)) == (8, 6) and occupancy.table_cc((12, 0)) == (9, 0)
    monkeypatch.setattr(_env, "gpu_available", lambda: True)
    monkeypatch.setattr(_env, "device_info", lambda: types.SimpleNamespace(smem_per_block_optin=99 * 1024))
    assert occupancy.fits(64 << 10) and not occupancy.fits(100 << 10)
    monkeypatch.setattr(_env, "gpu_available", lambda: False)
    assert occupancy.fits(200 << 10)
