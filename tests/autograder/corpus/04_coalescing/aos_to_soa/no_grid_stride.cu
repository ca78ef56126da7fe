// expect: status=failed points=0 reason~="At size n=1000003: wrong output. xs: .*values wrong"
// One tile per block and no loop: right while the grid covers the particles, wrong from 524,289 on, where
// the grader's 2048 blocks of 256 threads leave the rest unwritten.
extern "C" __global__ void aos_to_soa(const float* __restrict__ src, float* __restrict__ xs,
                                      float* __restrict__ ys, float* __restrict__ zs, int n)
{
    __shared__ float tile[3 * 256];
    const long long base = blockIdx.x * 256LL;
    const int count = (int)min(256LL, n - base);
    for (int f = threadIdx.x; f < 3 * count; f += 256)
        tile[f] = src[3 * base + f];
    __syncthreads();
    const int t = threadIdx.x;
    if (t < count) {
        xs[base + t] = tile[3 * t];
        ys[base + t] = tile[3 * t + 1];
        zs[base + t] = tile[3 * t + 2];
    }
}
