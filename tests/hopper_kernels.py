"""Device code shared by the Hopper library tests (tests/library/test_tma.py, test_wgmma.py): a TMA map as a
kernel parameter, an mbarrier, a 2-D TMA load that completes on it, and the wait. Test code, not a lesson:
chapter 13's kernels live in its notebook."""

TMA_PRELUDE = r'''
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// one thread initializes the barrier for one arrival; the fence makes that visible to the copy engine
__device__ __forceinline__ void barrier_init(unsigned long long* bar)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem(bar)));
    asm volatile("fence.mbarrier_init.release.cluster;");
}

// the arrival that expects `bytes` of copies to complete on the barrier
__device__ __forceinline__ void barrier_expect(unsigned long long* bar, int bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem(bar)), "r"(bytes));
}

// the box of `map` at (col, row), innermost first, into shared `dst`, counted on `bar`
__device__ __forceinline__ void tma_load_2d(void* dst, const TensorMap* map, int col, int row,
                                            unsigned long long* bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem(dst)), "l"(map), "r"(col), "r"(row), "r"(smem(bar)) : "memory");
}

__device__ __forceinline__ void barrier_wait(unsigned long long* bar, int parity)
{
    asm volatile("{\n .reg .pred done;\n WAIT_%=:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT_%=;\n}" :: "r"(smem(bar)), "r"(parity) : "memory");
}
'''
