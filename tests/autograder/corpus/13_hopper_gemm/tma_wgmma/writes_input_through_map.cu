// expect: status=failed points=0 reason~="changed its input a"
// Writes into its input through the input's own map. The kernel has what the exercise requires (a wgmma, a TMA
// load) and then stores a box of zeros over a[0:64, 0:64] with a TMA store through the map of a
// (cp.async.bulk.tensor ... .global.shared::cta). The map the grader passes describes its guarded copy of a,
// so the check that inputs come back unchanged sees the store: "your kernel changed its input a".
struct alignas(64) TensorMap { unsigned long long opaque[16]; };

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

extern "C" __global__ void __launch_bounds__(128) tma_wgmma(const __grid_constant__ TensorMap a,
        const __grid_constant__ TensorMap b, float* c, int m, int n, int k)
{
    // the 128-byte swizzle repeats every 1024 bytes: the box goes to a 1024-byte aligned address
    __shared__ alignas(1024) unsigned char tile[64 * 64 * 2];
    __shared__ alignas(8) unsigned long long bar;
    const int box_bytes = 64 * 64 * 2;                    // a's box: bm x 64 bf16 (launch_defaults bm = 64)

    // 1. a TMA load of a's first box, counted on an mbarrier
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(&bar)));
        asm volatile("fence.mbarrier_init.release.cluster;");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(&bar)), "r"(box_bytes));
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem_addr(tile)), "l"(&a), "r"(0), "r"(0), "r"(smem_addr(&bar)) : "memory");
    }
    __syncthreads();
    asm volatile("{\n .reg .pred done;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 " @!done bra WAIT_%=;\n}" :: "r"(smem_addr(&bar)) : "memory");

    // 2. one wgmma of the first warpgroup on that tile (descriptor: address >> 4, 128-byte swizzle)
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    if (threadIdx.x < 128) {
        unsigned long long desc = ((smem_addr(tile) & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
        asm volatile("wgmma.fence.sync.aligned;\n{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %4, p, 1, 1, 0, 0;\n}\n"
                     "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;"
                     : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(desc) : "memory");
    }
    for (long long i = blockIdx.x * 128ll + threadIdx.x; i < (long long)m * n; i += 128ll * gridDim.x)
        c[i] = d0 + d1 + d2 + d3;

    // 3. zeros into the tile, then the TMA store of that box over a[0:64, 0:64] through a's map
    __syncthreads();
    for (int i = threadIdx.x; i < box_bytes; i += blockDim.x)
        tile[i] = 0;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");   // the generic writes, visible to the TMA
    __syncthreads();
    if (threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0) {
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                     :: "l"(&a), "r"(0), "r"(0), "r"(smem_addr(tile)) : "memory");
        asm volatile("cp.async.bulk.commit_group;");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}
