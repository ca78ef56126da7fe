// colmajor_index: out = the row-major copy of a column-major rows x cols matrix a with leading
// dimension lda >= rows, as cuBLAS stores it: element (r, c) of a sits at a[r + c * lda] (each column
// contiguous; rows lda - rows .. lda - 1 of each column are padding, not part of the matrix).
// Row-major: element (r, c) of out sits at out[r * cols + c].
// Launch: block (32, 8), grid (ceil(cols / 32), ceil(rows / 32)): one 32 x 32 tile per block.
extern "C" __global__ void colmajor_index(const float* __restrict__ a, float* __restrict__ out,
                                          int rows, int cols, int lda)
{
    // ### BEGIN SOLUTION
    // Stage a 32 x 32 tile in shared memory so that both the read (down a column of a) and the write
    // (along a row of out) are coalesced. The +1 column of padding keeps the transposed reads of the
    // tile free of bank conflicts.
    __shared__ float tile[32][33];
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    // read: lanes walk down a column of a (consecutive r), the contiguous direction in column-major
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
        const int r = r0 + threadIdx.x, c = c0 + k;
        if (r < rows && c < cols)
            tile[k][threadIdx.x] = a[r + (long long)c * lda];
    }
    __syncthreads();
    // write: lanes walk along a row of out (consecutive c), the contiguous direction in row-major
    for (int k = threadIdx.y; k < 32; k += blockDim.y) {
        const int r = r0 + k, c = c0 + threadIdx.x;
        if (r < rows && c < cols)
            out[(long long)r * cols + c] = tile[threadIdx.x][k];
    }
    // ### END SOLUTION
}
