// expect: status=slow points=4 reason~="slower than needed"
// The exercise's column walk, right but below the threshold.
extern "C" __global__ void row_scale(const float* __restrict__ in, const float* __restrict__ scale,
                                     float* __restrict__ out, int rows, int cols)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x)
        for (int c = blockIdx.y * blockDim.y + threadIdx.y; c < cols; c += gridDim.y * blockDim.y)
            out[(long long)r * cols + c] = in[(long long)r * cols + c] * scale[r];
}
