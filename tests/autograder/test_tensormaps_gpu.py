"""GPU tier (Hopper): `TensorMap` params through the real harness. The grader encodes each map from the device view
a run uses (the guarded one in the correctness runs, each timed set's own in the speed step), with the box of the
launch the kernel runs with, and the kernel reads and writes the arrays with TMA copies only:

- a kernel that loads 128B-swizzled boxes of a bf16 matrix passes every size, at the reference's box and at the
  student's own (LAUNCH bm=64), and is timed on fresh maps;
- an output written by TMA stores through its map (role "out") is poisoned before and checked after every run;
- a kernel that writes its input through the input's map (a TMA store) is caught: "changed its input".

Run on an H100 or H200:  python -m pytest tests/autograder/test_tensormaps_gpu.py -m gpu -v
"""
import numpy as np
import pytest

from ag_helpers import gpu_present
from autograder import Exercise, Out, Points, Scalar, TensorMap
from autograder.spec import cdiv
from hopper_kernels import TMA_PRELUDE

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _needs_hopper():
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")
    import course
    if course.device_info().cc != (9, 0):
        pytest.skip(f"needs an sm_90 GPU (H100, H200); this one is {course.device_info().arch}")
    pytest.importorskip("cuda.bindings", reason="tensor maps need cuda-python")


def bf16_bits(rng, shape, dtype):
    x = rng.uniform(-2.0, 2.0, size=shape).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def to_f32(bits):
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


# One block per box: thread 0 has the TMA load the box (128B swizzle) into shared memory, every thread reads it
# back through the swizzle and writes the floats; the box is (BM, 64), BM a compile-time constant that the
# LAUNCH's bm matches (as a student's template parameters would).
WIDEN = TMA_PRELUDE + r'''
#ifndef BM
#define BM 128
#endif
#define BK 64
extern "C" __global__ void widen(const __grid_constant__ TensorMap a, float* c, int m, int k)
{
    __shared__ alignas(1024) unsigned short tile[BM * BK];
    __shared__ alignas(8) unsigned long long bar;
    int row0 = blockIdx.y * BM, col0 = blockIdx.x * BK;
    if (threadIdx.x == 0) barrier_init(&bar);
    __syncthreads();
    if (threadIdx.x == 0) { barrier_expect(&bar, BM * BK * 2); tma_load_2d(tile, &a, col0, row0, &bar); }
    barrier_wait(&bar, 0);
    for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) {
        int r = i / BK, j = i % BK;
        if (row0 + r < m && col0 + j < k) {
            unsigned o = (unsigned)i * 2, s = o ^ ((o >> 3) & 0x70);   // where the 128B swizzle put byte o
            c[(size_t)(row0 + r) * k + col0 + j] = __uint_as_float((unsigned)tile[s / 2] << 16);
        }
    }
    WRITE_BACK
}
'''
# the attack: after the right answer, a box of zeros stored over the input through its own map
STORE_INTO_A = r'''
    __syncthreads();
    for (int i = threadIdx.x; i < BM * BK; i += blockDim.x) tile[i] = 0;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                     :: "l"(&a), "r"(0), "r"(0), "r"(smem(tile)) : "memory");
        asm volatile("cp.async.bulk.commit_group;");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
'''

# A box copied from a to c by the TMA both ways: c is a map too (role "out"), written by TMA stores only.
COPY = TMA_PRELUDE + r'''
extern "C" __global__ void copy(const __grid_constant__ TensorMap a, const __grid_constant__ TensorMap c, int m,
                                int k)
{
    __shared__ alignas(1024) unsigned short tile[64 * 64];
    __shared__ alignas(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        barrier_init(&bar);
        barrier_expect(&bar, 64 * 64 * 2);
        tma_load_2d(tile, &a, blockIdx.x * 64, blockIdx.y * 64, &bar);
    }
    __syncthreads();
    barrier_wait(&bar, 0);
    if (threadIdx.x == 0) {   // the TMA writes only the part of the box inside c
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                     :: "l"(&c), "r"(blockIdx.x * 64), "r"(blockIdx.y * 64), "r"(smem(tile)) : "memory");
        asm volatile("cp.async.bulk.commit_group;");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}
'''
SIZES = [{"m": 1, "k": 8}, {"m": 131, "k": 72}, {"m": 300, "k": 264}, {"m": 2049, "k": 1032}]
WIDEN_EX = Exercise(
    name="widen", kernel="widen", source_file="-", chapter="test", arch="sm_90a",
    params=[TensorMap("a", np.uint16, ("m", "k"), ("bm", "bk"), swizzle="128B", gen=bf16_bits),
            Out("c", np.float32, ("m", "k")), Scalar("m", "int", "m"), Scalar("k", "int", "k")],
    sizes=SIZES, launch=lambda s, c: ((cdiv(s["k"], c["bk"]), cdiv(s["m"], c["bm"])), 128, 0),
    launch_defaults={"bm": 128, "bk": 64}, reference=lambda v: {"c": to_f32(v["a"])}, tolerance="exact",
    points=Points(6, 4), floor_bytes=lambda s: 6 * s["m"] * s["k"], speed_size={"m": 4096, "k": 4096},
    size_multiples={"k": 8})
COPY_EX = Exercise(
    name="copy", kernel="copy", source_file="-", chapter="test", arch="sm_90a",
    params=[TensorMap("a", np.uint16, ("m", "k"), (64, 64), swizzle="128B", gen=bf16_bits),
            TensorMap("c", np.uint16, ("m", "k"), (64, 64), swizzle="128B", role="out"),
            Scalar("m", "int", "m"), Scalar("k", "int", "k")],
    sizes=SIZES, launch=lambda s, c: ((cdiv(s["k"], 64), cdiv(s["m"], 64)), 128, 0),
    reference=lambda v: {"c": v["a"]}, points=Points(6, 0), size_multiples={"k": 8})


def kernel(source, name, options=()):
    import course
    return course.Module(course.compile_for_arch(source, "sm_90a", options=options)).kernel(name)


def context(ex, student, reference, cfg=None):
    import course
    from autograder import harness as H
    ctx = H.Context(ex, {}, cfg or dict(ex.launch_defaults), 4321, {"l2_bytes": course.device_info().l2_bytes},
                    lambda timeout, what: None)
    ctx.student, ctx.reference = student, reference
    return ctx


def statuses(ctx):
    from autograder import harness as H
    res = [H.correctness_step(ctx, i) for i in range(len(ctx.ex.sizes))]
    return [r["status"] for r in res], res


def test_a_tma_kernel_passes_at_every_size_with_its_own_box():
    ref = kernel(WIDEN.replace("WRITE_BACK", ""), "widen")
    got, res = statuses(context(WIDEN_EX, ref, ref))
    assert got == ["passed"] * 4, res
    # the student's LAUNCH: bm=64, so the grader's map of a has 64-row boxes, as this kernel expects
    small = kernel(WIDEN.replace("WRITE_BACK", ""), "widen", options=("-DBM=64",))
    got, res = statuses(context(WIDEN_EX, small, ref, cfg={"bm": 64, "bk": 64}))
    assert got == ["passed"] * 4, res


def test_a_tma_kernel_is_timed_on_fresh_maps():
    from autograder import harness as H
    ref = kernel(WIDEN.replace("WRITE_BACK", ""), "widen")
    r = H.timing_step(context(WIDEN_EX, ref, ref))
    assert r["status"] == "ok", r
    assert 0.5 < r["speed"]["ratio"] < 2.0, r["speed"]


def test_writing_the_input_through_its_map_is_caught():
    ref = kernel(WIDEN.replace("WRITE_BACK", ""), "widen")
    attack = kernel(WIDEN.replace("WRITE_BACK", STORE_INTO_A), "widen")
    got, res = statuses(context(WIDEN_EX, attack, ref))
    assert got == ["failed"] * 4, res
    assert all("changed its input a" in r["message"] for r in res), res


def test_an_output_written_by_tma_stores_is_poisoned_and_checked():
    k = kernel(COPY, "copy")
    got, res = statuses(context(COPY_EX, k, k))
    assert got == ["passed"] * 4, res
    # a kernel that stores nothing leaves the poison: the output map's array is the checked one
    idle = kernel(COPY.replace("if (threadIdx.x == 0) {   // the TMA", "if (threadIdx.x == 999) {   // the TMA"),
                  "copy")
    got, res = statuses(context(COPY_EX, idle, k))
    assert got == ["failed"] * 4 and "wrong output" in res[1]["message"], res
