// gather_rows: out[r, :] = table[rows[r], :] for r < n_rows; table may live in mapped (zero-copy) host memory
// Only the rows asked for cross the link, so a sparse lookup into a huge host table never copies it whole.
extern "C" __global__ void gather_rows(const float* __restrict__ table,
                                       const int* __restrict__ rows,
                                       float* __restrict__ out,
                                       int n_rows, int dim)
{
    // ### BEGIN SOLUTION
    // one warp per output row: the 32 lanes read consecutive floats of one table row, so every
    // transaction (over PCIe for a mapped table) is fully used; warps stride over the rows
    const int lane = threadIdx.x % 32;
    const int warps_per_block = blockDim.x / 32;
    const int first = blockIdx.x * warps_per_block + threadIdx.x / 32;
    for (int r = first; r < n_rows; r += gridDim.x * warps_per_block) {
        const size_t src = (size_t)rows[r] * dim;  // 64-bit: rows * dim overflows int for big tables
        const size_t dst = (size_t)r * dim;
        for (int j = lane; j < dim; j += 32)
            out[dst + j] = table[src + j];
    }
    // ### END SOLUTION
}
