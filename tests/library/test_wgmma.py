"""course.wgmma against the hardware: one warpgroup multiplies a 64 x 64 BF16 tile by a 64 x 64 one (four
m64n64k16 steps along K) from tiles the TMA wrote with the 128-byte swizzle, through descriptors whose fixed
bits come from `course.wgmma.descriptor`; the 32 accumulator registers of each thread, written out raw, must
be the product at the places `accumulator_coords` names. CPU: the models' own properties and the compile."""
from __future__ import annotations

import numpy as np
import pytest

from hopper_kernels import TMA_PRELUDE
from repo_helpers import import_course

course = import_course()

_OUTS = ", ".join(f'"+f"(d[{i}])' for i in range(32))
_REGS = ", ".join(f"%{i}" for i in range(32))
TILE_KERNEL = TMA_PRELUDE + r'''
__device__ __forceinline__ void mma_64x64x16(float* d, unsigned long long da, unsigned long long db, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {REGS}, %32, %33, p, 1, 1, 0, 0;\n}"
                 : OUTS : "l"(da), "l"(db), "r"(acc));
}

// d = a (64 x 64, K-major) times b^T (b: 64 x 64, K-major), one warpgroup; every thread writes its 32
// registers raw, so the host decides which element each one is
extern "C" __global__ void __launch_bounds__(128) wgmma_tile(const __grid_constant__ TensorMap map_a,
                                                             const __grid_constant__ TensorMap map_b,
                                                             unsigned long long desc_bits, float* out)
{
    __shared__ alignas(1024) unsigned short a[64 * 64];
    __shared__ alignas(1024) unsigned short b[64 * 64];
    __shared__ alignas(8) unsigned long long bar;
    if (threadIdx.x == 0)
        barrier_init(&bar);
    __syncthreads();
    if (threadIdx.x == 0) {
        barrier_expect(&bar, 2 * 8192);
        tma_load_2d(a, &map_a, 0, 0, &bar);
        tma_load_2d(b, &map_b, 0, 0, &bar);
    }
    barrier_wait(&bar, 0);
    float d[32];
    for (int r = 0; r < 32; ++r) d[r] = 0.0f;
    const unsigned long long da = desc_bits | ((smem(a) & 0x3FFFF) >> 4);
    const unsigned long long db = desc_bits | ((smem(b) & 0x3FFFF) >> 4);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    #pragma unroll
    for (int k = 0; k < 4; ++k)            // 16 BF16 values along K are 32 bytes: 2 in the descriptor
        mma_64x64x16(d, da + 2 * k, db + 2 * k, k);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int r = 0; r < 32; ++r)
        out[threadIdx.x * 32 + r] = d[r];
}
'''.replace("REGS", _REGS).replace("OUTS", _OUTS)


def test_accumulator_coords_cover_the_tile_once():
    for n in (8, 64, 256):
        c = course.wgmma.accumulator_coords(n).reshape(-1, 2)
        assert len({tuple(x) for x in c}) == 64 * n and c[:, 0].max() == 63 and c[:, 1].max() == n - 1


def test_descriptor_bits():
    d = course.wgmma.descriptor(0x4A0, 16, 1024, "128B")
    assert d & 0x3FFF == 0x4A and (d >> 16) & 0x3FFF == 1 and (d >> 32) & 0x3FFF == 64 and d >> 62 == 1
    with pytest.raises(ValueError, match="multiple of 16"):
        course.wgmma.descriptor(8, 16, 1024)


def test_the_tile_kernel_compiles_to_hgmma():
    prog = course.compile_for_arch(TILE_KERNEL, "sm_90a")
    assert "HGMMA.64x64x16.F32.BF16" in prog.sass() and "UTMALDG" in prog.sass()
    assert "serializ" not in prog.log          # ptxas did not fall back to serialized wgmma


@pytest.mark.gpu
def test_wgmma_multiplies_where_the_models_say():
    if not course.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    if course.device_info().cc != (9, 0):
        pytest.skip("wgmma is sm_90a: a Hopper GPU")
    pytest.importorskip("cuda.bindings", reason="tensor maps need cuda-python")
    import cupy
    rng = np.random.default_rng(3)
    a, bt = (rng.integers(-3, 4, size=(64, 64)).astype(np.float32) for _ in range(2))   # exact in BF16 and FP32

    def bf16_bits(m):
        return cupy.asarray((m.view(np.uint32) >> 16).astype(np.uint16))
    ga, gb = bf16_bits(a), bf16_bits(bt)
    maps = [course.tma.tensor_map(g, (64, 64), swizzle="128B") for g in (ga, gb)]
    out = cupy.full(128 * 32, np.nan, dtype=cupy.float32)
    k = course.compile(TILE_KERNEL, arch="sm_90a").kernel("wgmma_tile")
    k(1, 128, maps[0], maps[1], np.uint64(course.wgmma.descriptor(0, 16, 1024, "128B")), out)
    got = np.full((64, 64), np.nan, np.float32)
    c = course.wgmma.accumulator_coords(64)
    got[c[..., 0], c[..., 1]] = out.get().reshape(128, 32)
    assert (got == a @ bt.T).all(), np.argwhere(got != a @ bt.T)[:5]
