// expect: status=failed points=0 reason~="values wrong"
// Off by one at the end of each row: the loop over the floats after the last whole float4 stops at
// cols - 1, so the last float of every row is never added (wrong wherever that float is not 0). The
// alignment peel and the float4 body are right.
extern "C" __global__ void row_means(const float* __restrict__ inp, float* __restrict__ means, int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int warps = blockDim.x >> 5;
    for (int r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps) {
        const float* row = inp + (long long)r * cols;
        const unsigned long long addr = reinterpret_cast<unsigned long long>(row);
        const int head = min(cols, (int)(((16 - (addr & 15)) & 15) >> 2));
        float s = lane < head ? row[lane] : 0.0f;
        const float4* body = reinterpret_cast<const float4*>(row + head);
        const int n4 = (cols - head) >> 2;
        for (int i = lane; i < n4; i += 32) {
            const float4 p = body[i];
            s += (p.x + p.y) + (p.z + p.w);
        }
        for (int c = head + 4 * n4 + lane; c < cols - 1; c += 32)
            s += row[c];
        for (int offset = 16; offset > 0; offset >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, offset);
        if (lane == 0)
            means[r] = s / (float)cols;
    }
}
