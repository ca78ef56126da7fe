// expect: status~="^(failed|crashed)$" points=0
// A block per row: warps 1..7 each add a share of the row and store it in shared memory, and warp 0 adds
// the shares and writes the mean. There is no __syncthreads() between the stores and warp 0's loads, and
// warp 0 has no share to add first, so it reads the shared array before the other warps have written it:
// what it finds is left over from an earlier block or kernel. Wrong at the small sizes already (a GPU run
// confirms the verdict; which values come out depends on the scheduling).
extern "C" __global__ void row_means(const float* __restrict__ inp, float* __restrict__ means, int rows, int cols)
{
    __shared__ float share[32];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int workers = (blockDim.x >> 5) - 1;
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float* row = inp + (long long)r * cols;
        if (warp > 0) {
            float s = 0.0f;
            for (int c = (warp - 1) * 32 + lane; c < cols; c += 32 * workers)
                s += row[c];
            for (int offset = 16; offset > 0; offset >>= 1)
                s += __shfl_xor_sync(0xffffffffu, s, offset);
            if (lane == 0)
                share[warp] = s;
        } else {
            // missing: __syncthreads() before this read (and another before the next row's stores)
            float s = lane >= 1 && lane <= workers ? share[lane] : 0.0f;
            for (int offset = 16; offset > 0; offset >>= 1)
                s += __shfl_xor_sync(0xffffffffu, s, offset);
            if (lane == 0)
                means[r] = s / (float)cols;
        }
    }
}
