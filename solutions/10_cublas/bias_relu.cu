// bias_relu: c[i][j] = max(0, c[i][j] + bias[j]) in place, c a row-major m x n matrix (the epilogue
// of a matmul done as a separate pass). Launch: block (32, 8), grid-stride in both dimensions.
// x indexes columns: a warp reads 32 neighbouring floats of one row, and 32 neighbouring biases.
extern "C" __global__ void bias_relu(float* __restrict__ c, const float* __restrict__ bias, int m, int n)
{
    // ### BEGIN SOLUTION
    // Four columns a warp-width apart per thread: four independent coalesced loads in flight.
    const int bx = blockDim.x;
    const int col_step = gridDim.x * bx * 4;
    const int row_step = gridDim.y * blockDim.y;
    for (int i = blockIdx.y * blockDim.y + threadIdx.y; i < m; i += row_step) {
        float* row = c + (long long)i * n;             // 64-bit: m * n may exceed 2^31
        for (int j = blockIdx.x * bx * 4 + threadIdx.x; j < n; j += col_step) {
            float v[4];
            #pragma unroll
            for (int k = 0; k < 4; ++k)
                if (j + k * bx < n)
                    v[k] = row[j + k * bx] + bias[j + k * bx];
            #pragma unroll
            for (int k = 0; k < 4; ++k)
                if (j + k * bx < n)
                    row[j + k * bx] = fmaxf(v[k], 0.0f);
        }
    }
    // ### END SOLUTION
}
