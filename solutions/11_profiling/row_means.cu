// row_means: means[r] = (inp[r][0] + inp[r][1] + ... + inp[r][cols-1]) / cols for a row-major rows x cols
// matrix of floats.
// Launch: blocks of `block` threads (a multiple of 32), grid ceil(rows / (block / 32)): one warp per row.
// The row loop strides by every warp of the grid, so any grid covers every row.
extern "C" __global__ void row_means(const float* __restrict__ inp, float* __restrict__ means, int rows, int cols)
{
    // ### BEGIN SOLUTION
    const int lane = threadIdx.x & 31;
    const int warps = blockDim.x >> 5;
    for (int r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps) {
        const float* row = inp + (long long)r * cols;     // 64-bit: rows * cols may exceed 2^31
        float a = 0.0f, b = 0.0f;
        const unsigned long long addr = reinterpret_cast<unsigned long long>(row);
        if (addr & 3) {
            // not even float-aligned (a pointer into bytes): no wide loads at all, one float per lane
            for (int c = lane; c < cols; c += 32)
                a += row[c];
        } else {
            // A row starts on a 16-byte boundary only when cols % 4 == 0, so the floats before the first
            // boundary (0 to 3 of them) are read one per lane; from there on each lane reads float4s, and a
            // warp's load covers 512 contiguous bytes: 4 sectors per 128 bytes, the least there is.
            const int head = min(cols, (int)(((16 - (addr & 15)) & 15) >> 2));
            if (lane < head)
                a += row[lane];
            const float4* body = reinterpret_cast<const float4*>(row + head);
            const int n4 = (cols - head) >> 2;
            int i = lane;
            for (; i + 32 < n4; i += 64) {                  // two float4 loads in flight per lane
                const float4 p = body[i], q = body[i + 32];
                a += (p.x + p.y) + (p.z + p.w);
                b += (q.x + q.y) + (q.z + q.w);
            }
            if (i < n4) {
                const float4 p = body[i];
                a += (p.x + p.y) + (p.z + p.w);
            }
            for (int c = head + 4 * n4 + lane; c < cols; c += 32)    // the last (cols - head) % 4 floats
                b += row[c];
        }
        // the 32 lanes' partial sums, added in registers: after the xor butterfly every lane holds the total
        float s = a + b;
        for (int offset = 16; offset > 0; offset >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, offset);
        if (lane == 0)
            means[r] = s / (float)cols;
    }
    // ### END SOLUTION
}
