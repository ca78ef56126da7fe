// expect: status=slow points=4 reason~="slower than needed"
// Tile[32][32], 32-way conflicts on the column reads.
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
