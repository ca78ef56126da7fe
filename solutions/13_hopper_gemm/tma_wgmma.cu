// requires: sm_90a
// tma_wgmma: c = a b^T in FP32, a (m x k) and b (n x k) BF16 reached only through their TMA maps (boxes of
// 64 x 64 and 128 x 64 with the 128-byte swizzle, encoded by the grader); m any, n and k multiples of 8.
// One warpgroup (128 threads) a block computes a 64 x 128 tile of c: for each 64-deep slice of K, thread 0
// starts the two TMA copies, all wait on the mbarrier they complete, and four wgmma m64n128k16 steps multiply.
// Launch: grid (ceil(n / 128), ceil(m / 64)), 128 threads, no dynamic shared memory.
// `c` is 16-byte aligned (the grader's buffers, as any cupy array) and n is even, so each float2 store is aligned.
#include <cuda_bf16.h>

struct alignas(64) TensorMap { unsigned long long opaque[16]; };   // the driver's CUtensorMap, 128 bytes

__device__ __forceinline__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// ---- mbarriers: a 64-bit counter in shared memory with a phase bit that flips when a phase completes
__device__ __forceinline__ void bar_init(unsigned long long* bar, int arrivals)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem(bar)), "r"(arrivals));
}
__device__ __forceinline__ void bar_fence_init()      // make the inits visible to the TMA and the cluster
{
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// one arrival that also says how many bytes of TMA copies this phase waits for
__device__ __forceinline__ void bar_expect(unsigned long long* bar, int bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_arrive(unsigned long long* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem(bar)) : "memory");
}
// wait until the phase with this parity has completed (a fresh barrier counts parity 1 as completed)
__device__ __forceinline__ void bar_wait(unsigned long long* bar, int parity)
{
    asm volatile("{\n .reg .pred done;\n WAIT_%=:\n"
                 " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra WAIT_%=;\n}" :: "r"(smem(bar)), "r"(parity) : "memory");
}

// ---- TMA: the box of `map` at (col, row), innermost coordinate first
__device__ __forceinline__ void tma_load(void* dst, const TensorMap* map, int col, int row, unsigned long long* bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem(dst)), "l"(map), "r"(col), "r"(row), "r"(smem(bar)) : "memory");
}
// ---- wgmma
// a K-major tile of 64 BF16 (128 bytes) a row, written by the TMA with the 128-byte swizzle: core matrices
// of 8 rows are 1024 bytes apart (SBO), LBO is unused (1), mode 1 = 128B. Steps along K add 32 bytes (2).
__device__ __forceinline__ unsigned long long desc_sw128(const void* tile)
{
    return (unsigned long long)((smem(tile) & 0x3FFFF) >> 4) | 1ull << 16 | (1024ull >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void wgmma_fence()  { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
#define WG_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_F16(d, i) WG_F4(d, i), WG_F4(d, i + 4), WG_F4(d, i + 8), WG_F4(d, i + 12)
#define WG_OUT64(d) WG_F16(d, 0), WG_F16(d, 16), WG_F16(d, 32), WG_F16(d, 48)
#define WG_OUT128(d) WG_OUT64(d), WG_F16(d, 64), WG_F16(d, 80), WG_F16(d, 96), WG_F16(d, 112)

// D (64 x 128, FP32, 64 registers a thread) += A (64 x 16) B^T (128 x 16), both K-major in shared memory
__device__ __forceinline__ void wgmma_n128(float (&d)[64], unsigned long long da, unsigned long long db,
                                           int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}"
        : WG_OUT64(d) : "l"(da), "l"(db), "r"(acc));
}


extern "C" __global__ void __launch_bounds__(128) tma_wgmma(const __grid_constant__ TensorMap a,
        const __grid_constant__ TensorMap b, float* c, int m, int n, int k)
{
    // ### BEGIN SOLUTION
    __shared__ alignas(1024) __nv_bfloat16 a_tile[64 * 64];
    __shared__ alignas(1024) __nv_bfloat16 b_tile[128 * 64];
    __shared__ alignas(8) unsigned long long full;
    const int row0 = blockIdx.y * 64, col0 = blockIdx.x * 128;
    if (threadIdx.x == 0) {
        bar_init(&full, 1);
        bar_fence_init();
    }
    __syncthreads();
    float d[64];
    for (int kt = 0; kt < (k + 63) / 64; ++kt) {
        if (threadIdx.x == 0) {
            bar_expect(&full, sizeof(a_tile) + sizeof(b_tile));
            tma_load(a_tile, &a, kt * 64, row0, &full);
            tma_load(b_tile, &b, kt * 64, col0, &full);
        }
        bar_wait(&full, kt % 2);
        wgmma_fence();
        const unsigned long long da = desc_sw128(a_tile), db = desc_sw128(b_tile);
        #pragma unroll
        for (int kk = 0; kk < 4; ++kk)                 // 16 values of K are 32 bytes: 2 in the descriptor
            wgmma_n128(d, da + 2 * kk, db + 2 * kk, kt || kk);
        wgmma_commit();
        wgmma_wait<0>();
        __syncthreads();                              // all have read the tiles before the next copy lands
    }
    // register r of thread t: row 16 (t / 32) + (t % 32) / 4 + 8 ((r / 2) % 2), column 8 (r / 4) + 2 (t % 4)
    const int t = threadIdx.x;
    #pragma unroll
    for (int r = 0; r < 64; r += 2) {
        const int row = row0 + 16 * (t / 32) + (t % 32) / 4 + 8 * ((r / 2) % 2);
        const int col = col0 + 8 * (r / 4) + 2 * (t % 4);
        if (row < m && col < n)                       // n is even: col + 1 < n too
            *reinterpret_cast<float2*>(c + (size_t)row * n + col) = make_float2(d[r], d[r + 1]);
    }
    // ### END SOLUTION
}
