// expect: status=slow points=4 reason~="slower than needed|bank conflicts"
// Tile[32][32], 32-way conflicts on the column reads. Where the grading machine's ncu may read the counters,
// the no_bank_conflicts check fails it (speed points withheld); elsewhere its speed alone (about 0.62x at
// 8192 x 8192 on the H100) keeps it below full points.
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[32][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    for (int k = 0; k < 32; k += 8)
        if (r0 + ty + k < rows && c0 + tx < cols)
            tile[ty + k][tx] = in[(long long)(r0 + ty + k) * cols + c0 + tx];
    __syncthreads();
    for (int k = 0; k < 32; k += 8)
        if (c0 + ty + k < cols && r0 + tx < rows)
            out[(long long)(c0 + ty + k) * rows + r0 + tx] = tile[tx][ty + k];
}
