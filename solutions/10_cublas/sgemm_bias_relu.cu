// C (M x N) = max(0, A (M x K) @ B (K x N) + bias (N)), FP32, row-major, any sizes: a matmul whose
// bias + ReLU epilogue is applied to the accumulators before they leave the registers, so C is written
// once and never read back (the separate pass reads and writes all of C again: 8 bytes per output).
// It is chapter 07's register-tiled SGEMM (solutions/07_staged_gemm/sgemm_regtile.cu) with a new
// epilogue, on purpose: the exercise asks students to fuse into their own chapter 07 kernel.
// A block computes a 128 x 128 tile with 256 threads, 8 x 8 outputs each (four 4 x 4 quadrants); the
// K loop double-buffers BK = 8 slices of A (stored k-major) and B in shared memory.
// Launch: grid (ceil(N / 128), ceil(M / 128)), block 256.
#define BM 128
#define BN 128
#define BK 8
#define AS_LD (BM + 4)      // + 4 floats: the two k-halves written by neighbouring threads land on different banks

__device__ __forceinline__ float4 load4(const float* __restrict__ p, int row, int col, int rows, int cols, bool vec)
{
    // four consecutive elements of a row; zeros outside the matrix
    if (row >= rows) return make_float4(0.f, 0.f, 0.f, 0.f);
    const float* q = p + (size_t)row * cols + col;
    if (vec && col + 3 < cols) return *reinterpret_cast<const float4*>(q);
    float4 v;
    v.x = col < cols ? q[0] : 0.f;
    v.y = col + 1 < cols ? q[1] : 0.f;
    v.z = col + 2 < cols ? q[2] : 0.f;
    v.w = col + 3 < cols ? q[3] : 0.f;
    return v;
}

// (256, 2): at most 128 registers, so two blocks share an SM and one block's barrier wait hides behind the other's math
extern "C" __global__ void __launch_bounds__(256, 2)
sgemm_bias_relu(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
                float* __restrict__ C, int M, int N, int K)
{
    // ### BEGIN SOLUTION
    __shared__ __align__(16) float As[2][BK][AS_LD];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    // float4 global accesses need 16-byte aligned rows: the row length a multiple of 4 floats and the
    // matrix itself 16-byte aligned (cudaMalloc's are; a view such as A + 1 is not). Tested once, the
    // same in every thread: the aligned path pays no divergence.
    const bool vec_a = (K % 4) == 0 && (reinterpret_cast<unsigned long long>(A) & 15) == 0;
    const bool vec_b = (N % 4) == 0 && (reinterpret_cast<unsigned long long>(B) & 15) == 0;
    const bool vec_c = (N % 4) == 0 && (reinterpret_cast<unsigned long long>(C) & 15) == 0;

    // loader roles: A tile 128 x 8 -> row tid / 2, k (tid % 2) * 4; B tile 8 x 128 -> k tid / 32, col (tid % 32) * 4
    const int a_r = tid / 2, a_k = (tid % 2) * 4;
    const int b_k = tid / 32, b_c = (tid % 32) * 4;

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.f;

    float4 ra = load4(A, m0 + a_r, a_k, M, K, vec_a);
    float4 rb = load4(B, b_k, n0 + b_c, K, N, vec_b);
    As[0][a_k + 0][a_r] = ra.x; As[0][a_k + 1][a_r] = ra.y; As[0][a_k + 2][a_r] = ra.z; As[0][a_k + 3][a_r] = ra.w;
    *reinterpret_cast<float4*>(&Bs[0][b_k][b_c]) = rb;
    __syncthreads();

    int buf = 0;
    for (int k0 = 0; k0 < K; k0 += BK) {
        const bool more = k0 + BK < K;
        if (more) {   // next tile into registers; its latency hides behind the 512 FMAs below
            ra = load4(A, m0 + a_r, k0 + BK + a_k, M, K, vec_a);
            rb = load4(B, k0 + BK + b_k, n0 + b_c, K, N, vec_b);
        }
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            const float4 a0 = *reinterpret_cast<const float4*>(&As[buf][k][ty * 4]);
            const float4 a1 = *reinterpret_cast<const float4*>(&As[buf][k][64 + ty * 4]);
            const float4 b0 = *reinterpret_cast<const float4*>(&Bs[buf][k][tx * 4]);
            const float4 b1 = *reinterpret_cast<const float4*>(&Bs[buf][k][64 + tx * 4]);
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (more) {
            buf ^= 1;   // the other buffer was last read before the previous barrier: safe to fill
            As[buf][a_k + 0][a_r] = ra.x; As[buf][a_k + 1][a_r] = ra.y;
            As[buf][a_k + 2][a_r] = ra.z; As[buf][a_k + 3][a_r] = ra.w;
            *reinterpret_cast<float4*>(&Bs[buf][b_k][b_c]) = rb;
            __syncthreads();
        }
    }

    // the bias of this thread's 8 columns, read once for all 8 rows
    float bv[8];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = n0 + h * 64 + tx * 4 + j;
            bv[4 * h + j] = c < N ? bias[c] : 0.f;
        }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
        if (r >= M) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int c = n0 + h * 64 + tx * 4;
            float v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = fmaxf(acc[i][4 * h + j] + bv[4 * h + j], 0.f);
            float* out = C + (size_t)r * N + c;
            if (vec_c && c + 3 < N) {
                *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    if (c + j < N) out[j] = v[j];
            }
        }
    }
    // ### END SOLUTION
}
