// requires: sm_80
// C (M x N) = A (M x K, bf16) @ B (K x N, bf16), every matrix row-major, FP32 accumulation; C is float
// (OUT_BF16 = 0, the graded form) or bf16 (OUT_BF16 = 1, what cuBLAS's BF16 GEMM writes).
// Tensor cores through mma.sync.m16n8k16 with operands fetched by ldmatrix (A as is, B with .trans),
// tiles streamed in by a STAGES-deep cp.async pipeline into XOR-swizzled shared memory, the result
// written back through shared memory as 16-byte row segments, and blocks ordered GROUP_M tile-rows at a
// time so that neighbours in time share A and B panels in L2.
// Contract: any M; N and K multiples of 8 (every row starts on a 16-byte boundary for cp.async).
// A, B and C_out must be 16-byte aligned, as cudaMalloc's are (cp.async moves 16 bytes): no scalar path.
// Launch: 1-D grid of ceil(M / BM) * ceil(N / BN) blocks of 32 * WARPS_M * WARPS_N threads and
// max(STAGES * (BM + BN) * BK * 2, BM * (BN + 8) * 2) bytes of dynamic shared memory (98304 with the
// defaults: 256 x 128 tiles, 8 warps of 64 x 64, 4 stages), which fits every sm_80+ GPU, sm_86/89 too.
#ifndef BM
#define BM 256
#endif
#ifndef BN
#define BN 128
#endif
#ifndef WARPS_M
#define WARPS_M 4
#endif
#ifndef WARPS_N
#define WARPS_N 2
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef SWIZZLE
#define SWIZZLE 1           // 0 shows the 4-way (A) and 8-way (B) ldmatrix bank conflicts it removes
#endif
#ifndef OUT_BF16
#define OUT_BF16 0
#endif
#ifndef SMEM_EPILOGUE
#define SMEM_EPILOGUE 1     // bf16 out only; 0: each lane stores its 4-byte pairs straight to global memory
#endif
#ifndef GROUP_M
#define GROUP_M 8           // 1: plain row-by-row block order
#endif
#ifndef BK
#define BK 32               // k-depth of one stage: a row of A holds BK / 8 chunks of 16 bytes
#endif
#ifndef FRAG_DB
#define FRAG_DB 1           // fragments of the next k16 step loaded while this step's MMAs run
#endif
#define KI (BK / 16)        // k16 steps per stage
#define THREADS (32 * WARPS_M * WARPS_N)
#define WM (BM / WARPS_M)
#define WN (BN / WARPS_N)
#define MI (WM / 16)        // m16 tiles per warp
#define NI (WN / 8)         // n8 tiles per warp
#define C_LD (BN + 8)       // padded row of the epilogue's staging tile: lanes g = 0..7 hit distinct banks

typedef unsigned short bf16;

static_assert(WM % 16 == 0 && WN % 16 == 0, "each warp needs whole 16 x 16 pieces");
static_assert(BK == 32 || BK == 64, "the A swizzle below is written for 64- and 128-byte rows");
static_assert((BM * BK / 8) % THREADS == 0 && (BK * BN / 8) % THREADS == 0, "tile loads must split evenly");

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without passing through registers; src_bytes = 0 writes zeros (edge tiles)
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// two neighbouring outputs (columns c, c + 1) of one lane: 8 bytes as floats, 4 as packed bf16
__device__ __forceinline__ void store_pair(float* p, float lo, float hi)
{
    *reinterpret_cast<float2*>(p) = make_float2(lo, hi);
}

__device__ __forceinline__ void store_pair(bf16* p, float lo, float hi)
{
    unsigned packed;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));   // hi -> upper half
    *reinterpret_cast<unsigned*>(p) = packed;
}

// Element offset of 16-byte chunk c of row r inside one stage. With BK = 32 an A row is 64 bytes, so
// rows r and r + 2 share banks: XOR the chunk with bits 1-2 of the row. Rows of 128 bytes or more (A
// with BK = 64, every B row) all start on bank 0: XOR with the row's low 3 bits. ldmatrix's 8 row
// addresses of one phase then cover all 32 banks.
__device__ __forceinline__ int a_off(int r, int c)
{
    return r * BK + ((SWIZZLE ? (c ^ (BK == 32 ? ((r >> 1) & 3) : (r & 7))) : c) << 3);
}
__device__ __forceinline__ int b_off(int k, int j) { return k * BN + ((SWIZZLE ? (j ^ (k & 7)) : j) << 3); }

extern "C" __global__ void __launch_bounds__(THREADS)
mma_gemm(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B, float* __restrict__ C_out,
         int M, int N, int K)
{
    // one signature for both outputs: with OUT_BF16 the caller passes its bf16 buffer viewed as floats
#if OUT_BF16
    bf16* C = reinterpret_cast<bf16*>(C_out);
#else
    float* C = C_out;
#endif
    extern __shared__ __align__(128) unsigned char smem[];
    // ### BEGIN SOLUTION
    // a stage is its A tile followed by its B tile, so one byte offset walks both around the ring
    constexpr unsigned A_TILE_BYTES = BM * BK * 2, STAGE_BYTES = (BM + BN) * BK * 2;
    const unsigned smem0 = smem_addr(smem);

    // grouped block order: GROUP_M tile-rows sweep the tile-columns together
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP_M * tiles_n;
    const int group = blockIdx.x / per_group;
    const int first_m = group * GROUP_M;
    const int rows_here = min(tiles_m - first_m, GROUP_M);
    const int tile_m = first_m + (blockIdx.x % per_group) % rows_here;
    const int tile_n = (blockIdx.x % per_group) / rows_here;
    const int m0 = tile_m * BM, n0 = tile_n * BN;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;

    // Each thread copies the same chunks of every stage: NA of A (rows a_r + i * A_STEP, chunk a_c) and
    // NB of B (rows b_k + i * B_STEP, chunk b_j). The steps are multiples of 8 rows, so the swizzle is
    // the same for all i and the shared offsets differ by constants.
    constexpr int NA = BM * (BK / 8) / THREADS, A_STEP = THREADS / (BK / 8);
    constexpr int NB = BK * (BN / 8) / THREADS, B_STEP = THREADS / (BN / 8);
    static_assert(A_STEP % 8 == 0 && B_STEP % 8 == 0, "copy rows must keep the swizzle phase");
    const int a_r = tid / (BK / 8), a_c = tid % (BK / 8);
    const int b_k = tid / (BN / 8), b_j = tid % (BN / 8);
    const unsigned a_dst = smem0 + a_off(a_r, a_c) * 2, b_dst = smem0 + A_TILE_BYTES + b_off(b_k, b_j) * 2;

    // Every source address stays inside its matrix without a select per copy: rows of A past M and
    // columns of B past N are clamped onto the last ones (their products only reach outputs nobody
    // stores), and k past K is clamped too but copied as zeros (src_bytes = 0), which also covers the
    // tiles the pipeline issues past the end. Addresses are formed in bytes from unsigned row indices,
    // so each one is a single wide multiply-add; and no branches, so the copies share the MMAs' basic
    // block and the scheduler interleaves them.
    unsigned a_row[NA];
#pragma unroll
    for (int i = 0; i < NA; ++i) a_row[i] = min(m0 + a_r + i * A_STEP, M - 1);
    const char* b_col = reinterpret_cast<const char*>(B + min(n0 + b_j * 8, N - 8));
    const unsigned a_pitch = 2u * K, b_pitch = 2u * N;
    auto load_stage = [&](unsigned stage, int k0) {
        const int ka = k0 + a_c * 8;
        const char* a_col = reinterpret_cast<const char*>(A + min(ka, K - 8));
#pragma unroll
        for (int i = 0; i < NA; ++i)
            cp_async_16(a_dst + stage + i * A_STEP * BK * 2, a_col + (size_t)a_row[i] * a_pitch, ka < K);
#pragma unroll
        for (int i = 0; i < NB; ++i) {
            const int kb = k0 + b_k + i * B_STEP;
            cp_async_16(b_dst + stage + i * B_STEP * BN * 2, b_col + (size_t)(unsigned)min(kb, K - 1) * b_pitch,
                        kb < K);
        }
    };
    auto next_stage = [](unsigned s) { return s + STAGE_BYTES == STAGES * STAGE_BYTES ? 0u : s + STAGE_BYTES; };

    // Fragment addresses. Lane l reads row l & 15 of each 16-row piece at chunk 2 kk + (l >> 4); the
    // pieces start on multiples of 8 rows, so the swizzle term depends on the lane alone and the chunk
    // is (2 kk) ^ xa: one base per k16 step, with the m16 pieces (and B's k16 steps) at constant
    // offsets that ldmatrix takes as immediates. Fewer live addresses is what lets BK = 64 keep both
    // fragment buffers without spilling.
    const int hi = lane >> 4;
#if SWIZZLE
    const int xa = hi ^ (BK == 32 ? (lane >> 1) & 3 : lane & 7), xb = hi ^ (lane & 7);
#else
    const int xa = hi, xb = hi;
#endif
    const unsigned a_frag = smem0 + (wm0 + (lane & 15)) * BK * 2;
    const unsigned b_frag = smem0 + A_TILE_BYTES + (lane & 15) * BN * 2;
    unsigned b_chunk[NI / 2];
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) b_chunk[nj] = ((wn0 / 8 + 2 * nj) ^ xb) << 4;

    auto load_a = [&](unsigned (&a)[MI][4], unsigned stage, int kk) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)   // lanes 0-15: rows at k 0-7, lanes 16-31: the same rows at k 8-15
            ldmatrix_x4(a[mi], a_frag + stage + mi * 16 * BK * 2 + (((2 * kk) ^ xa) << 4));
    };
    auto load_b = [&](unsigned (&b)[NI][2], unsigned stage, int kk) {
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {   // one x4.trans = k 0-15 of two n8 tiles
            unsigned t4[4];
            ldmatrix_x4_trans(t4, b_frag + stage + kk * 16 * BN * 2 + b_chunk[nj]);
            b[2 * nj][0] = t4[0]; b[2 * nj][1] = t4[1];
            b[2 * nj + 1][0] = t4[2]; b[2 * nj + 1][1] = t4[3];
        }
    };

    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    auto mma_step = [&](const unsigned (&a)[MI][4], const unsigned (&b)[NI][2]) {
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) mma_bf16(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
    };

    const int k_tiles = (K + BK - 1) / BK;
    // prologue: STAGES - 1 tiles in flight. A group is committed even when empty, so that "at most
    // STAGES - 2 groups pending" always means "the oldest tile still needed has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        load_stage(s * STAGE_BYTES, s * BK);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    unsigned rd = 0, wr = (STAGES - 1) * STAGE_BYTES;   // byte offsets of the stage read and the one refilled
    int k_next = (STAGES - 1) * BK;

#if FRAG_DB
    // The copies for tile kt + STAGES - 1 go out after the fragment loads of step COPY_STEP: a shared
    // write may not be hoisted above a shared read, so copies issued first would hold those loads back
    // behind their address arithmetic. Step 1 rather than 0 (when there is one before the last) also
    // lets the first MMAs start at once (~2% faster with BK = 64). It must come before step KI - 1,
    // whose wait counts this iteration's group as committed.
    constexpr int COPY_STEP = KI > 2 ? 1 : 0;
    // fragments for one k16 step: A of MI m16 tiles, B of NI n8 tiles
    unsigned a[2][MI][4], b[2][NI][2];
    asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
    __syncthreads();
    load_a(a[0], 0, 0);
    load_b(b[0], 0, 0);

    for (int kt = 0; kt < k_tiles; ++kt) {
        const unsigned rd_next = next_stage(rd);
#pragma unroll
        for (int kk = 0; kk < KI; ++kk) {
            // fragments for the next k16 step are fetched while this step's MMAs run; at the last step
            // they come from tile kt + 1, which must have landed and be visible to every warp first
            // (after the last tile they are read and never used)
            if (kk == KI - 1) {
                asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
                __syncthreads();
                load_a(a[(kk + 1) & 1], rd_next, 0);
                load_b(b[(kk + 1) & 1], rd_next, 0);
            } else {
                load_a(a[(kk + 1) & 1], rd, kk + 1);
                load_b(b[(kk + 1) & 1], rd, kk + 1);
            }
            // the slot refilled is the one tile kt - 1 used: every warp read its last fragments
            // before the barrier of iteration kt - 1
            if (kk == COPY_STEP) {
                load_stage(wr, k_next);
                asm volatile("cp.async.commit_group;\n" ::);
                wr = next_stage(wr);
                k_next += BK;
            }
            mma_step(a[kk & 1], b[kk & 1]);
        }
        rd = rd_next;
    }

#else
    for (int kt = 0; kt < k_tiles; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(STAGES - 2));
        __syncthreads();
        load_stage(wr, k_next);
        asm volatile("cp.async.commit_group;\n" ::);
        wr = next_stage(wr);
        k_next += BK;
#pragma unroll
        for (int kk = 0; kk < KI; ++kk) {
            unsigned a[MI][4], b[NI][2];
            load_b(b, rd, kk);
            load_a(a, rd, kk);
            mma_step(a, b);
        }
        rd = next_stage(rd);
    }
#endif

    // accumulator layout: lane = 4 g + t holds (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)
    const int g = lane >> 2, t = lane & 3;
#if OUT_BF16 && SMEM_EPILOGUE
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();                       // the pipeline's buffers become the staging tile
    bf16* Cs = reinterpret_cast<bf16*>(smem);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                store_pair(Cs + (wm0 + mi * 16 + g + 8 * h) * C_LD + wn0 + ni * 8 + 2 * t,
                           acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
    __syncthreads();
#pragma unroll 4
    for (int id = tid; id < BM * BN / 8; id += THREADS) {
        const int r = id / (BN / 8), j = id % (BN / 8);
        if (m0 + r < M && n0 + j * 8 < N)
            *reinterpret_cast<uint4*>(C + (size_t)(m0 + r) * N + n0 + j * 8) =
                *reinterpret_cast<const uint4*>(Cs + r * C_LD + j * 8);
    }
#else
    // straight from the accumulators: float pairs are 8 bytes a lane, so a warp's stores already fill
    // whole 32-byte sectors; bf16 pairs (4 bytes) fill half of each, which the staging above avoids
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = m0 + wm0 + mi * 16 + g + 8 * h, c = n0 + wn0 + ni * 8 + 2 * t;
                if (r < M && c < N)
                    store_pair(C + (size_t)r * N + c, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
            }
#endif
    // ### END SOLUTION
}
