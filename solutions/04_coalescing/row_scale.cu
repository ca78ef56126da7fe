// row_scale: out[r][c] = in[r][c] * scale[r] for a row-major rows x cols matrix.
// Launch: block (32, 8), grid-stride in both dimensions, so any grid covers the matrix.
// x indexes columns: the 32 lanes of a warp read 32 neighbouring floats of one row (128 bytes).
extern "C" __global__ void row_scale(const float* __restrict__ in, const float* __restrict__ scale,
                                     float* __restrict__ out, int rows, int cols)
{
    // ### BEGIN SOLUTION
    // Each thread takes four columns a warp-width apart: four independent coalesced loads in flight
    // per thread, which is what keeps enough bytes moving to cover DRAM latency.
    const int bx = blockDim.x;
    const int col_step = gridDim.x * bx * 4;
    const int row_step = gridDim.y * blockDim.y;
    for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += row_step) {
        const float s = scale[r];                       // one value per row: a broadcast, cached
        const float* src = in + (long long)r * cols;    // 64-bit: rows * cols may exceed 2^31
        float* dst = out + (long long)r * cols;
        for (int c = blockIdx.x * bx * 4 + threadIdx.x; c < cols; c += col_step) {
            float v[4];
            #pragma unroll
            for (int k = 0; k < 4; ++k)
                if (c + k * bx < cols)
                    v[k] = src[c + k * bx];
            #pragma unroll
            for (int k = 0; k < 4; ++k)
                if (c + k * bx < cols)
                    dst[c + k * bx] = v[k] * s;
        }
    }
    // ### END SOLUTION
}
