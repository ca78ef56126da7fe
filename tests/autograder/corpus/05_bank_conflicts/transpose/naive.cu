// expect: status=slow points=4 reason~="slower than needed"
// No shared memory, 32-sector writes.
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    const int c = blockIdx.x * 32 + threadIdx.x;
    for (int k = 0; k < 32; k += 8) {
        const int r = blockIdx.y * 32 + threadIdx.y + k;
        if (r < rows && c < cols)
            out[(long long)c * rows + r] = in[(long long)r * cols + c];
    }
}
