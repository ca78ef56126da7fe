// expect: status=failed points=0 reason~="never written"
// Chapter 14's softmax_safe cell (one block of 256 threads per row, three passes), renamed. Under this exercise's
// launch (a warp per row: ceil(rows / 8) blocks) block b computes row b only, so at 257 x 1 rows 33 to 256 keep
// the grader's NaN. That is why the threshold rule for lesson kernels (SPEC_FORMAT.md) does not apply to it.
// online_softmax: y[r][c] = exp(x[r][c] - m) / sum_j exp(x[r][j] - m), m the largest x[r][j], for each row of a
// row-major rows x cols float matrix. One block per row (grid = rows, 256 threads a block), three passes over
// the row: its max, the sum of exp(x - max), the output.
//
// Why subtract the max: expf overflows float32 past x = 88.7, and attention scores can get there. Softmax is
// unchanged by a shift of the whole row (e^-m cancels above and below the fraction), and with the max
// subtracted the largest term is exp(0) = 1: nothing overflows, and the sum is at least 1, never 0.
#define NEG_INF __int_as_float(0xff800000)   // -inf: NVRTC has no <math.h>, so no INFINITY

// The block's values combined into one that every thread gets: a shuffle tree inside each warp, then each
// thread combines the warps' results from shared memory itself (at most 32 reads, all the same address for
// the whole warp: a broadcast), so every thread adds in the same order and holds the same bits.
__device__ float block_max(float v, float* red)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < (blockDim.x >> 5); ++w)
        v = fmaxf(v, red[w]);
    __syncthreads();            // red is written again by the next reduction: wait until all have read it
    return v;
}

__device__ float block_sum(float v, float* red)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < (blockDim.x >> 5); ++w)
        v += red[w];
    __syncthreads();
    return v;
}

extern "C" __global__ void online_softmax(const float* x, float* y, int rows, int cols)
{
    __shared__ float red[32];                   // one value per warp; blocks of up to 1024 threads
    const int r = blockIdx.x;
    if (r >= rows)
        return;                                 // the whole block leaves: no thread waits at a barrier alone
    const float* xr = x + (long long)r * cols;  // 64-bit: rows * cols may exceed 2^31
    float* yr = y + (long long)r * cols;

    // Pass 1: the max. Threads read neighbouring floats (coalesced); -inf is where a max starts, so a thread
    // with no element (cols < 256) hands the reduction something that changes nothing.
    float m = NEG_INF;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        m = fmaxf(m, xr[c]);
    m = block_max(m, red);

    // Pass 2: the sum of exp(x - m), x read again.
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        s += expf(xr[c] - m);
    s = block_sum(s, red);

    // Pass 3: x read a third time, y written. One division per row, a multiply per element.
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        yr[c] = expf(xr[c] - m) * inv;
}
