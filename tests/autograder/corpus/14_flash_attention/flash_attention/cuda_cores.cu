// expect: status=failed points=0 reason~="Expected: flash_attention multiplies on the tensor cores\. Found: no tensor-core instruction"
// The chapter's one-row-per-thread kernel, moved to the exercise's layout and grouped K/V heads: correct,
// but every product on the FP32 CUDA cores. The exercise asks for tensor cores, so it fails without being timed.
// LAUNCH = {"br": 128, "threads": 128, "smem_rows": 384}
typedef unsigned short bf16;                     // BF16 values as their bits
#define NEG_INF (-__int_as_float(0x7f800000))   // -inf; NVRTC has no <math.h> and its INFINITY

// Fused attention, one query row per thread: scores, the online softmax and the weighted sum of V in one
// pass over the keys, nothing of size n x n ever written. A block of 128 threads shares each tile of 64
// keys (and their values) in shared memory, converted to FP32 once; every thread reads the same element
// at the same time, a broadcast. The query rows wait in shared memory too, transposed (element i of every
// row side by side), since D floats of accumulator already fill most of a thread's registers. All
// arithmetic on the CUDA cores, in FP32.
#define ROWS 128
#define KEYS 64

template <int D>
__device__ __forceinline__ void attn_row_body(const bf16* q, const bf16* k, const bf16* v, float* o, int n,
                                              int ldq, int ldkv, float scale, int causal, float* sk, float* sv,
                                              bf16* sq) {
    const int row = blockIdx.x * ROWS + threadIdx.x;
    for (int i = 0; i < D; ++i) sq[i * ROWS + threadIdx.x] = row < n ? q[static_cast<size_t>(row) * ldq + i] : 0;
    float acc[D];
#pragma unroll
    for (int i = 0; i < D; ++i) acc[i] = 0.f;
    float m = NEG_INF, l = 0.f;
    const int last = causal ? min(n, blockIdx.x * ROWS + ROWS) : n;   // keys any row of the block needs
    for (int k0 = 0; k0 < last; k0 += KEYS) {
        __syncthreads();
        for (int i = threadIdx.x; i < KEYS * D; i += ROWS) {
            const int key = k0 + i / D;
            const bool ok = key < n;
            const size_t at = static_cast<size_t>(key) * ldkv + i % D;
            sk[i] = ok ? __uint_as_float(static_cast<unsigned>(k[at]) << 16) : 0.f;
            sv[i] = ok ? __uint_as_float(static_cast<unsigned>(v[at]) << 16) : 0.f;
        }
        __syncthreads();
        const int keys = min(KEYS, (causal ? min(row + 1, n) : n) - k0);
        for (int j = 0; j < keys; ++j) {
            float s = 0.f;
#pragma unroll 16
            for (int i = 0; i < D; ++i)
                s = fmaf(__uint_as_float(static_cast<unsigned>(sq[i * ROWS + threadIdx.x]) << 16), sk[j * D + i], s);
            s *= scale;
            if (s > m) {               // a new maximum: rescale what was summed so far (rare after a while)
                const float c = __expf(m - s);
                l *= c;
#pragma unroll
                for (int i = 0; i < D; ++i) acc[i] *= c;
                m = s;
            }
            const float p = __expf(s - m);
            l += p;
#pragma unroll
            for (int i = 0; i < D; ++i) acc[i] = fmaf(p, sv[j * D + i], acc[i]);
        }
    }
    if (row < n) {
#pragma unroll
        for (int i = 0; i < D; ++i) o[static_cast<size_t>(row) * ldq + i] = acc[i] / l;
    }
}

extern "C" __global__ void __launch_bounds__(ROWS)
flash_attention(const bf16* q, const bf16* k, const bf16* v, float* o, int n, int heads, int kv_heads, int d,
                float scale, int causal) {
    extern __shared__ float tiles[];
    const size_t qo = (static_cast<size_t>(blockIdx.z) * n * heads + blockIdx.y) * d;
    const size_t kv = (static_cast<size_t>(blockIdx.z) * n * kv_heads + blockIdx.y / (heads / kv_heads)) * d;
    if (d == 64)
        attn_row_body<64>(q + qo, k + kv, v + kv, o + qo, n, heads * d, kv_heads * d, scale, causal, tiles,
                          tiles + KEYS * 64, reinterpret_cast<bf16*>(tiles + 2 * KEYS * 64));
    else
        attn_row_body<128>(q + qo, k + kv, v + kv, o + qo, n, heads * d, kv_heads * d, scale, causal, tiles,
                           tiles + KEYS * 128, reinterpret_cast<bf16*>(tiles + 2 * KEYS * 128));
}
