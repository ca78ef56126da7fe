// expect: status=failed points=0 reason~="wrong output\. out: \d+ of \d+ values wrong"
// Chapter 05's transpose_pad as the lesson shows it (one element a thread, block (32, 32)), renamed.
// Under the exercise's block (32, 8) it stores rows 0-7 of each tile and writes out columns 0-7 only:
// three quarters of the output are never written, and most of the rest comes from tile rows nobody
// stored. Copying the lesson's kernel earns nothing; the exercise asks for four elements a thread.
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out,
                                     int rows, int cols)
{
    __shared__ float tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    if (r0 + ty < rows && c0 + tx < cols)
        tile[ty][tx] = in[(long long)(r0 + ty) * cols + c0 + tx];
    __syncthreads();                      // outside the guards: every thread of the block reaches it
    if (c0 + ty < cols && r0 + tx < rows)
        out[(long long)(c0 + ty) * rows + r0 + tx] = tile[tx][ty];
}
