// expect: status=slow points=4 reason~="slower than needed|bank conflicts"
// Attack on the counter check: a 32-way conflicted tile everywhere except at 33 x 2047, the largest public size
// that fits the profiled cap, where the rows are padded to 33 floats. Profiled at that public size it would
// count no conflicts; the grader profiles one of the grading's hidden sizes instead (autograder/counters.py),
// drawn from a seed the student never sees, so the real tile is what is counted.
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[32 * 33];
    const int pitch = (rows == 33 && cols == 2047) ? 33 : 32;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    for (int k = 0; k < 32; k += 8)
        if (r0 + ty + k < rows && c0 + tx < cols)
            tile[(ty + k) * pitch + tx] = in[(long long)(r0 + ty + k) * cols + c0 + tx];
    __syncthreads();
    for (int k = 0; k < 32; k += 8)
        if (c0 + ty + k < cols && r0 + tx < rows)
            out[(long long)(c0 + ty + k) * rows + r0 + tx] = tile[tx * pitch + ty + k];
}
