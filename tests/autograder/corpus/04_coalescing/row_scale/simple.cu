// expect: status=passed points=10
// The plain fix, one float per thread per step, x along the row.
extern "C" __global__ void row_scale(const float* __restrict__ in, const float* __restrict__ scale,
                                     float* __restrict__ out, int rows, int cols)
{
    for (int r = blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += gridDim.y * blockDim.y)
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
            out[(long long)r * cols + c] = in[(long long)r * cols + c] * scale[r];
}
