// expect: status=slow points=4 reason~="slower than needed"
// The notebook's starter (row_means_starter), renamed: right at every size, and slow. A thread per row
// makes each warp load touch 32 rows, 32 sectors per request, and under this launch (a warp's worth of
// threads per row) only one thread in 32 has a row. Correctness points only.
extern "C" __global__ void row_means(const float* __restrict__ inp, float* __restrict__ means,
                                             int rows, int cols)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
        const float* row = inp + (long long)r * cols;
        float s = 0.0f;
        for (int c = 0; c < cols; ++c)
            s += row[c];
        means[r] = s / (float)cols;
    }
}
