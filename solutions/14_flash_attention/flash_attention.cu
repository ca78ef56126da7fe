// requires: sm_80
// The graded fused attention forward (chapter 14): FlashAttention-2 on mma.sync, for grouped-query attention
// in the (batch, sequence, heads, head dim) layout. q and o: (batch, n, heads, d); k and v: (batch, n,
// kv_heads, d), each group of heads / kv_heads query heads sharing one K/V head. BF16 bits in, float out.
// Grid (ceil(n / 128), heads, batch), 128 threads, 256 d BF16 values (Q's 128 rows, K's and V's 64) of
// dynamic shared memory.
#define BR 128
#define BC 64
#define WARPS 4

// Chapter 08's tensor-core parts, as the attention kernels of this chapter use them. BF16 values travel as
// their 16-bit patterns (unsigned short), two to a 32-bit register, which is how mma.sync takes them.
typedef unsigned short bf16;

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared without passing through registers. ok == false copies zero bytes and fills the
// 16 with zeros: rows past the end of the sequence become zero rows, so no later step needs a bounds check
// on what it reads from shared memory.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// A tile of `rows` x D BF16 values is stored as rows of D/8 16-byte chunks, chunk c of row r at slot
// c ^ (r % 8): the eight rows one ldmatrix phase reads then sit in eight different bank groups (chapter 08).
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) { return (row * (D / 8) + (chunk ^ (row & 7))) * 8; }

// Copy rows row0 .. row0 + ROWS - 1 of an n-row matrix (D values a row, rows `ld` values apart) into a
// swizzled tile, THREADS threads sharing the 16-byte chunks. Thread i keeps chunk column i % (D / 8) and takes
// rows i / (D / 8) + STEP u: its swizzle (row % 8) never changes, and every later copy sits a fixed distance
// from its first in both memories, so a copy costs one instruction with a constant offset. (A loop that
// worked out row, column and swizzle afresh for each chunk cost about 25 instructions per copy.)
template <int D, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(bf16* tile, const bf16* g, int row0, int n, int ld) {
    constexpr int STEP = THREADS / (D / 8);
    static_assert(STEP % 8 == 0 && ROWS % STEP == 0, "THREADS / (D / 8) must be a multiple of 8 dividing ROWS");
    const int r = threadIdx.x / (D / 8), c = threadIdx.x % (D / 8);
    bf16* dst = tile + swz<D>(r, c);
    const bf16* src = g + static_cast<size_t>(row0 + r) * ld + c * 8;
    const size_t step = static_cast<size_t>(STEP) * ld;
    if (row0 + ROWS <= n) {                    // every tile but the sequence's last: no row tests
#pragma unroll
        // src + u * step, not chapter 14's src += step: with a runtime ld the increments made ptxas spill
        // 12 bytes for sm_80 (NVRTC 13.0), this form none on sm_80 and sm_90
        for (int u = 0; u < ROWS / STEP; ++u) cp_async_16(dst + u * STEP * D, src + u * step, true);
    } else {
#pragma unroll
        for (int u = 0; u < ROWS / STEP; ++u, src += step) {
            const bool ok = row0 + r + u * STEP < n;
            cp_async_16(dst + u * STEP * D, ok ? src : g, ok);
        }
    }
}

__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// The transposing form: V is stored key-major, but the second product needs it as the k-indexed operand.
__device__ __forceinline__ void ldmatrix_x4_t(unsigned r[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// c += a b for one 16 x 8 x 16 step, FP32 accumulators (layouts: chapter 08, section 2)
__device__ __forceinline__ void mma_16816(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two FP32 values rounded to BF16 (nearest even) in one register, `lo` in the low half as mma.sync expects
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

#define NEG_INF (-__int_as_float(0x7f800000))   // -inf; NVRTC has no <math.h> and its INFINITY

// 2^x in one MUFU.EX2 instruction. exp2f keeps denormal results, which costs a range test and two
// multiplies around every call; a probability below 2^-126 may as well be zero (-inf gives exactly 0).
__device__ __forceinline__ float exp2_fast(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

constexpr int MT = BR / WARPS / 16;            // 16-row MMA tiles per warp
static_assert(BR % (16 * WARPS) == 0 && BC % 16 == 0, "BR / WARPS and BC must be multiples of 16");

// wait for V_j (every warp then is done with K_j) and start loading K_{j+1} into K_j's place
template <int D>
__device__ __forceinline__ void next_k(bf16* sk, const bf16* k, int k0, bool more, int n, int ld) {
    cp_async_wait_all();
    __syncthreads();
    if (more) load_tile<D, BC, WARPS * 32>(sk, k, k0, n, ld);
    cp_async_commit();
}

// One head's query rows q0 .. q0 + BR - 1 against all of its keys; rows of q, o are ldq values apart, rows of
// k, v ldkv (a row of the sequence holds every head side by side).
template <int D>
__device__ __forceinline__ void flash_block(const bf16* q, const bf16* k, const bf16* v, float* o, int n,
                                            int heads, int kv_heads, float scale, int causal, bf16* smem) {
    // BEGIN SOLUTION
    constexpr float LOG2E = 1.4426950408889634f;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int q_blocks = (n + BR - 1) / BR;
    // causal blocks near the end of the sequence have the most tiles: start them first so that the short
    // ones fill the last wave instead of a few long ones running alone
    const int q0 = (causal ? q_blocks - 1 - blockIdx.x : blockIdx.x) * BR;
    bf16 *sq = smem, *sk = sq + BR * D, *sv = sk + BC * D;
    // Each lane's ldmatrix addresses for the first 16-column step, worked out once. The others differ only in
    // the 16-byte chunk field of the address: the chunk is (2 kk + h) ^ (row % 8) = ((h ^ row % 8) ^ 2 kk),
    // so the address of step kk is this one XOR 32 kk bytes (V: XOR 16 dt), and further rows add a constant.
    // That needs each tile to start at a multiple of its row length in bytes, hence smem's 1024-byte alignment.
    const unsigned qa = smem_addr(sq + swz<D>(warp * (BR / WARPS) + (lane & 15), lane >> 4));
    const unsigned ka = smem_addr(sk + swz<D>((lane >> 4) * 8 + (lane & 7), (lane >> 3) & 1));
    const unsigned va = smem_addr(sv + swz<D>(((lane >> 3) & 1) * 8 + (lane & 7), lane >> 4));

    int tiles = (n + BC - 1) / BC;
    if (causal) tiles = min(tiles, (q0 + BR + BC - 1) / BC);   // tiles wholly above the diagonal: skipped
    const int row_w = q0 + warp * (BR / WARPS);                  // this warp's first query row
    const float sl2 = scale * LOG2E;                             // exp(x s) = exp2(x s log2 e)

    load_tile<D, BR, WARPS * 32>(sq, q, q0, n, heads * D);
    load_tile<D, BC, WARPS * 32>(sk, k, 0, n, kv_heads * D);
    cp_async_commit();

    float acc[MT][D / 8][4] = {};
    float m[MT][2], l[MT][2];
    for (int i = 0; i < MT; ++i) m[i][0] = m[i][1] = NEG_INF, l[i][0] = l[i][1] = 0.f;

    for (int j = 0; j < tiles; ++j) {
        const int k0 = j * BC;
        cp_async_wait_all();
        __syncthreads();                       // K_j is here, and every warp is done with V_{j-1}
        load_tile<D, BC, WARPS * 32>(sv, v, k0, n, kv_heads * D);   // V_j arrives while S_j is computed
        cp_async_commit();

        float s[MT][BC / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            unsigned a[MT][4];                 // Q's fragments, re-read from shared memory every tile: kept in
#pragma unroll                                 // registers they would take 64 more than D = 128 leaves
            for (int t = 0; t < MT; ++t) ldmatrix_x4(a[t], (qa ^ (32 * kk)) + t * 16 * D * 2);
#pragma unroll
            for (int nt = 0; nt < BC / 8; nt += 2) {
                unsigned b[4];
                ldmatrix_x4(b, (ka ^ (32 * kk)) + nt * 8 * D * 2);
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    mma_16816(s[t][nt], a[t], b[0], b[1]);
                    mma_16816(s[t][nt + 1], a[t], b[2], b[3]);
                }
            }
        }

        // keys past the end, and (causal) keys after the query: -inf, so their exp is exactly 0. Only the
        // last tile and the tiles that cross this warp's diagonal pay for the test.
        if (k0 + BC > n || (causal && k0 + BC - 1 > row_w)) {
#pragma unroll
            for (int t = 0; t < MT; ++t)
#pragma unroll
                for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int row = row_w + t * 16 + (lane >> 2) + (e >> 1) * 8;
                        const int col = k0 + nt * 8 + 2 * (lane & 3) + (e & 1);
                        if (col >= n || (causal && col > row)) s[t][nt][e] = NEG_INF;
                    }
        }

        // V_j is waited for, and K_{j+1} requested, before the softmax (more time for K to land) when the
        // registers allow it: at D = 128 the earlier barrier makes ptxas spill (measured slower on the H200)
        if constexpr (D <= 64) next_k<D>(sk, k, k0 + BC, j + 1 < tiles, n, kv_heads * D);
        // the online softmax: a lane holds two rows (lane / 4 and lane / 4 + 8) of each MMA tile; the four
        // lanes of a row meet through two shuffles. Tile 0 always has key 0, so m is finite from then on.
#pragma unroll
        for (int t = 0; t < MT; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float mx = m[t][h];
#pragma unroll
                for (int nt = 0; nt < BC / 8; ++nt) mx = fmaxf(mx, fmaxf(s[t][nt][2 * h], s[t][nt][2 * h + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const float corr = exp2_fast((m[t][h] - mx) * sl2);   // 0 on the first tile (m was -inf)
                m[t][h] = mx;
                const float base = mx * sl2;
                float sum = 0.f;
#pragma unroll
                for (int nt = 0; nt < BC / 8; ++nt)
#pragma unroll
                    for (int e = 2 * h; e < 2 * h + 2; ++e) {
                        s[t][nt][e] = exp2_fast(fmaf(s[t][nt][e], sl2, -base));
                        sum += s[t][nt][e];
                    }
                l[t][h] = l[t][h] * corr + sum;    // this lane's share; the four are added at the end
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt) acc[t][dt][2 * h] *= corr, acc[t][dt][2 * h + 1] *= corr;
            }

        if constexpr (D > 64) next_k<D>(sk, k, k0 + BC, j + 1 < tiles, n, kv_heads * D);

        // O += P V. The accumulators of S for keys 16 kk .. 16 kk + 15 (n-tiles 2 kk and 2 kk + 1) are, lane
        // for lane, the A operand of the next mma: P never leaves the registers.
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            unsigned a[MT][4];
#pragma unroll
            for (int t = 0; t < MT; ++t) {
                a[t][0] = pack_bf16(s[t][2 * kk][0], s[t][2 * kk][1]);
                a[t][1] = pack_bf16(s[t][2 * kk][2], s[t][2 * kk][3]);
                a[t][2] = pack_bf16(s[t][2 * kk + 1][0], s[t][2 * kk + 1][1]);
                a[t][3] = pack_bf16(s[t][2 * kk + 1][2], s[t][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dt = 0; dt < D / 8; dt += 2) {
                unsigned b[4];
                ldmatrix_x4_t(b, (va ^ (16 * dt)) + kk * 16 * D * 2);
#pragma unroll
                for (int t = 0; t < MT; ++t) {
                    mma_16816(acc[t][dt], a[t], b[0], b[1]);
                    mma_16816(acc[t][dt + 1], a[t], b[2], b[3]);
                }
            }
        }
    }

#pragma unroll
    for (int t = 0; t < MT; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float sum = l[t][h];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = 1.f / sum;
            const int row = row_w + t * 16 + (lane >> 2) + 8 * h;
            if (row < n) {
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt)
                    *reinterpret_cast<float2*>(o + static_cast<size_t>(row) * (heads * D) + dt * 8 + 2 * (lane & 3)) =
                        make_float2(acc[t][dt][2 * h] * inv, acc[t][dt][2 * h + 1] * inv);
            }
        }
    // END SOLUTION
}

// grid (ceil(n / BR), heads, batch): query block blockIdx.x of head blockIdx.y in batch blockIdx.z
extern "C" __global__ void __launch_bounds__(WARPS * 32)
flash_attention(const bf16* q, const bf16* k, const bf16* v, float* o, int n, int heads, int kv_heads, int d,
                float scale, int causal) {
    extern __shared__ __align__(1024) bf16 smem[];
    // BEGIN SOLUTION
    const int kvh = blockIdx.y / (heads / kv_heads);     // the K/V head this query head's group shares
    const size_t qo = (static_cast<size_t>(blockIdx.z) * n * heads + blockIdx.y) * d;
    const size_t kv = (static_cast<size_t>(blockIdx.z) * n * kv_heads + kvh) * d;
    if (d == 64) flash_block<64>(q + qo, k + kv, v + kv, o + qo, n, heads, kv_heads, scale, causal, smem);
    else flash_block<128>(q + qo, k + kv, v + kv, o + qo, n, heads, kv_heads, scale, causal, smem);
    // END SOLUTION
}
