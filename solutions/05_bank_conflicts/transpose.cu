// transpose: out (cols x rows) = in (rows x cols)^T, both row-major; any rows and cols >= 1.
// Launch: block (32, 8), grid (ceil(cols / 32), ceil(rows / 32)): one 32 x 32 tile per block, each
// thread moving four elements of it.
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    // ### BEGIN SOLUTION
    // The 33rd column shifts row k of the tile by k banks, so reading a tile column (32 lanes, one
    // row each) hits 32 different banks; writing a tile row stays conflict-free.
    __shared__ float tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;

    // read four rows of the tile along `in`'s rows: coalesced; loads first, so all four are in flight
    float v[4];
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int r = r0 + ty + 8 * k, c = c0 + tx;
        v[k] = (r < rows && c < cols) ? in[(long long)r * cols + c] : 0.0f;
    }
    #pragma unroll
    for (int k = 0; k < 4; ++k)
        tile[ty + 8 * k][tx] = v[k];
    __syncthreads();

    // write along `out`'s rows, which are the tile's columns: lane tx takes row r0 + tx of `in`
    #pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int c = c0 + ty + 8 * k, r = r0 + tx;
        if (c < cols && r < rows)
            out[(long long)c * rows + r] = tile[tx][ty + 8 * k];
    }
    // ### END SOLUTION
}
