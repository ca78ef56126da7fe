// expect: status=slow points=4 reason~="speed points are withheld.*Expected: transpose keeps every value in registers or shared memory.*STL"
// Right at every size, but each thread keeps its four elements in an array indexed by a run-time value, so
// the array lives in local memory (STL/LDL in its SASS): the no_local_memory check withholds the 6 speed
// points whatever the timing says; the 4 correctness points stand.
extern "C" __global__ void transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols)
{
    __shared__ float tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    float v[4];
    const int first = (rows + cols) & 3;        // a start the compiler cannot know: the array stays in memory
    for (int j = 0; j < 4; ++j) {
        const int k = (first + j) & 3;
        const int r = r0 + ty + 8 * k, c = c0 + tx;
        v[k] = (r < rows && c < cols) ? in[(long long)r * cols + c] : 0.0f;
    }
    for (int j = 0; j < 4; ++j) {
        const int k = (first + j) & 3;
        tile[ty + 8 * k][tx] = v[k];
    }
    __syncthreads();
    for (int k = 0; k < 4; ++k) {
        const int orow = c0 + ty + 8 * k, ocol = r0 + tx;
        if (orow < cols && ocol < rows)
            out[(long long)orow * rows + ocol] = tile[tx][ty + 8 * k];
    }
}
