// expect: status=slow points=4 reason~="serializ"
// Right, but it reads an accumulator between issuing its wgmmas and waiting for them: ptxas serializes every
// wgmma (C7511), the technique check withholds the speed points.
// hopper_gemm: c = a b^T in FP32, a (m x k) and b (n x k) BF16 and c (m x n) FP32, all three reached only through
// their TMA maps (boxes 128 x 64 for a and b, 64 x 32 for c, 128-byte swizzle, encoded by the grader); m any, n
// and k multiples of 8.
// Chapter 13's step 6: a persistent grid of clusters of two blocks, each block a producer warpgroup (one
// thread issues the TMA copies) and two consumer warpgroups (wgmma m64n256k16, 128 accumulators a thread)
// around a ring of STAGES slots with full/empty mbarriers; the two blocks of a cluster compute tiles one
// above the other and share B's rows through TMA multicast; each consumer writes its result in 64 x 32 pieces
// through shared memory and TMA stores (chapter 13's step 7, in FP32).
// Launch: `blocks` blocks (even; default 132) of 384 threads, STAGES x 48 KiB + 32 KiB of store buffers + 1 KiB
// of dynamic shared memory.
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
// an arrival on the barrier at the same place in block `rank` of this cluster (release at CTA scope: whoever
// arrives has finished reading the slot; a cluster-scope release here halves the speed)
__device__ __forceinline__ void bar_arrive_cluster(unsigned long long* bar, unsigned rank)
{
    asm volatile("{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
                 " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}"
                 :: "r"(smem(bar)), "r"(rank) : "memory");
}
// the same box written to the same shared offset of every block in `mask`, each counting it on its own `bar`
__device__ __forceinline__ void tma_load_multicast(void* dst, const TensorMap* map, int col, int row,
                                                   unsigned long long* bar, unsigned short mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;"
                 :: "r"(smem(dst)), "l"(map), "r"(col), "r"(row), "r"(smem(bar)), "h"(mask) : "memory");
}
// ---- blocks: a 1024-byte aligned start (the 128-byte swizzle repeats every 1024 bytes), cluster rank and
// barrier, a barrier of one warpgroup (ids 1..15; 0 is __syncthreads)
__device__ __forceinline__ unsigned char* align_1024(unsigned char* p)
{
    return p + ((1024 - (smem(p) & 1023)) & 1023);
}
__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void warpgroup_sync(int id) { asm volatile("bar.sync %0, 128;" :: "r"(id) : "memory"); }

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
// setmaxnreg: hand registers from the producer warpgroup to the consumers (all warps of a warpgroup run it)
template <int R> __device__ __forceinline__ void regs_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(R));
}
template <int R> __device__ __forceinline__ void regs_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(R));
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

// D (64 x 256, FP32, 128 registers a thread) += A (64 x 16) B^T (256 x 16), both K-major in shared memory
__device__ __forceinline__ void wgmma_n256(float (&d)[128], unsigned long long da, unsigned long long db,
                                           int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}"
        : WG_OUT128(d) : "l"(da), "l"(db), "r"(acc));
}

// the 64 x 16 K step `kk` of a 64-row A slab and a BN-row B tile, both 64 BF16 wide
template <int BN>
__device__ __forceinline__ void mma_k64(float (&d)[BN / 2], const void* a, const void* b, int acc)
{
    const unsigned long long da = desc_sw128(a), db = desc_sw128(b);
    #pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        if constexpr (BN == 256) wgmma_n256(d, da + 2 * kk, db + 2 * kk, acc || kk);
        else                     wgmma_n128(d, da + 2 * kk, db + 2 * kk, acc || kk);
    }
}


// shared -> global; the copy engine clips the box at the matrix's edges
__device__ __forceinline__ void tma_store(const TensorMap* map, const void* src, int col, int row)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(map), "r"(col), "r"(row), "r"(smem(src)) : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
__device__ __forceinline__ void tma_store_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }
// every thread that wrote a tile with st.shared runs this before the TMA (another proxy) may read it
__device__ __forceinline__ void fence_for_tma() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// all but the newest N store groups have read their shared memory: it may be written again
template <int N> __device__ __forceinline__ void tma_store_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// The 64 x 256 FP32 result of one consumer warpgroup, as eight 64 x 32 pieces (128-byte rows) through two
// shared buffers and TMA stores. Register r of thread t is row 16 (t / 32) + (t % 32) / 4 + 8 ((r / 2) % 2),
// column 8 (r / 4) + 2 (t % 4) + r % 2; piece j holds columns 32 j .. 32 j + 31, registers 16 j .. 16 j + 15.
// In a piece's rows the 16-byte chunk q of row `row` sits at chunk q ^ (row % 8), the map's 128-byte swizzle.
__device__ __forceinline__ void store_f32(const float (&d)[128], float* buffers, const TensorMap* c_map,
                                          int row0, int col0, int wg)
{
    const int t = threadIdx.x % 128;
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        float* buf = buffers + (j % 2) * 64 * 32;
        if (t == 0) tma_store_wait_read<1>();   // the store before last, from this buffer, has read it
        warpgroup_sync(wg);
        #pragma unroll
        for (int r = 16 * j; r < 16 * j + 16; r += 2) {
            const int row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((r / 2) % 2);
            const int col = 8 * (r / 4 - 4 * j) + 2 * (t % 4);
            const int chunk = (col / 4) ^ (row % 8);
            *reinterpret_cast<float2*>(buf + row * 32 + chunk * 4 + col % 4) = make_float2(d[r], d[r + 1]);
        }
        fence_for_tma();
        warpgroup_sync(wg);
        if (t == 0) tma_store(c_map, buf, col0 + 32 * j, row0);
    }
}

#define STAGES 4
#define GROUP 8

__device__ __forceinline__ void tile_of(int t, int tiles_m, int tiles_n, int& tm, int& tn)
{
    const int first = t / (GROUP * tiles_n) * GROUP, rows = min(GROUP, tiles_m - first);
    tm = first + t % (GROUP * tiles_n) % rows;
    tn = t % (GROUP * tiles_n) / rows;
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1) hopper_gemm(
        const __grid_constant__ TensorMap a, const __grid_constant__ TensorMap b,
        const __grid_constant__ TensorMap c, int m, int n, int k)
{
    constexpr int STAGE = (128 + 256) * 64;
    extern __shared__ unsigned char raw[];
    __nv_bfloat16* tiles = reinterpret_cast<__nv_bfloat16*>(align_1024(raw));
    float* staging = reinterpret_cast<float*>(tiles + STAGES * STAGE);     // 2 consumers x 2 buffers x 64 x 32
    __shared__ alignas(8) unsigned long long full[STAGES], empty[STAGES];
    const int wg = threadIdx.x / 128, kts = (k + 63) / 64;
    const unsigned rank = cluster_rank();
    // the cluster works on pairs of tiles one above the other: pair p is tiles (2 p_m + rank, p_n)
    const int pairs_m = (m + 255) / 256, tiles_n = (n + 255) / 256;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            bar_init(&full[s], 1);
            bar_init(&empty[s], 4);           // two consumer warpgroups in each of the two blocks
        }
        bar_fence_init();
    }
    cluster_sync();                            // the other block's barriers exist before we copy or arrive
    int it = 0;
    if (wg == 0) {
        regs_dec<40>();
        if (threadIdx.x == 0) {
            for (int p = blockIdx.x / 2; p < pairs_m * tiles_n; p += gridDim.x / 2) {
                int pm, tn;
                tile_of(p, pairs_m, tiles_n, pm, tn);
                for (int kt = 0; kt < kts; ++kt, ++it) {
                    const int s = it % STAGES;
                    __nv_bfloat16* slot = tiles + s * STAGE;
                    bar_wait(&empty[s], ((it / STAGES) % 2) ^ 1);
                    bar_expect(&full[s], STAGE * 2);   // our A, our half of B, the other block's half
                    tma_load(slot, &a, kt * 64, (2 * pm + rank) * 128, &full[s]);
                    tma_load_multicast(slot + (128 + 128 * rank) * 64, &b, kt * 64, tn * 256 + 128 * rank,
                                       &full[s], 0b11);
                }
            }
        }
    } else {
        regs_inc<232>();
        float d[128];
        for (int p = blockIdx.x / 2; p < pairs_m * tiles_n; p += gridDim.x / 2) {
            int pm, tn;
            tile_of(p, pairs_m, tiles_n, pm, tn);
            for (int kt = 0; kt < kts; ++kt, ++it) {
                const int s = it % STAGES;
                const __nv_bfloat16* slot = tiles + s * STAGE;
                bar_wait(&full[s], (it / STAGES) % 2);
                wgmma_fence();
                mma_k64<256>(d, slot + (wg - 1) * 64 * 64, slot + 128 * 64, kt);
                wgmma_commit();
                if (d[0] == 12345.0f) d[1] = 0.0f;   // an accumulator read while wgmma runs
                wgmma_wait<0>();
                if (threadIdx.x % 128 == 0) {
                    bar_arrive_cluster(&empty[s], 0);
                    bar_arrive_cluster(&empty[s], 1);
                }
            }
            store_f32(d, staging + (wg - 1) * 2 * 64 * 32, &c, (2 * pm + rank) * 128 + 64 * (wg - 1), tn * 256, wg);
        }
    }
    if (wg > 0 && threadIdx.x % 128 == 0) tma_store_wait();   // our stores are done before we leave
    cluster_sync();                            // no block leaves while the other may still arrive on its barriers
}
