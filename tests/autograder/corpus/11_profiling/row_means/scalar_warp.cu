// expect: status=passed points=10
// Calibration: the profile's fix without float4, a warp per row reading one float per lane and load (128
// contiguous bytes per warp), partial sums added with shuffles. Measured at 1.00 of the reference on an H200
// (2026-11-28): once the loads are coalesced, the reference's float4 loads add nothing at this size.
extern "C" __global__ void row_means(const float* __restrict__ inp, float* __restrict__ means, int rows, int cols)
{
    const int lane = threadIdx.x % 32;
    const int warps = blockDim.x / 32;
    for (int r = blockIdx.x * warps + threadIdx.x / 32; r < rows; r += gridDim.x * warps) {
        const float* row = inp + (long long)r * cols;
        float s = 0.0f;
        for (int c = lane; c < cols; c += 32)
            s += row[c];
        for (int offset = 16; offset > 0; offset /= 2)
            s += __shfl_down_sync(0xffffffffu, s, offset);
        if (lane == 0)
            means[r] = s / cols;
    }
}
