// expect: status=crashed points=0 reason~="misaligned"
// Reads every row as float4s from its first float, without checking the row's address: right while cols is
// a multiple of 4 (every row then starts on a 16-byte boundary) and for a single row, but at 1009 x 37 row
// 1 starts 148 bytes in, and its first float4 load faults with a misaligned address.
extern "C" __global__ void row_means(const float* __restrict__ inp, float* __restrict__ means, int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int warps = blockDim.x >> 5;
    for (int r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps) {
        const float* row = inp + (long long)r * cols;
        const float4* row4 = reinterpret_cast<const float4*>(row);
        const int n4 = cols / 4;
        float s = 0.0f;
        for (int i = lane; i < n4; i += 32) {
            const float4 p = row4[i];
            s += (p.x + p.y) + (p.z + p.w);
        }
        for (int c = 4 * n4 + lane; c < cols; c += 32)
            s += row[c];
        for (int offset = 16; offset > 0; offset >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, offset);
        if (lane == 0)
            means[r] = s / (float)cols;
    }
}
