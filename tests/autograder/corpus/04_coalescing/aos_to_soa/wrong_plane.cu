// expect: status=failed points=0 reason~="At size n=1: wrong output. ys: 1 of 1 values wrong"
// The staged kernel with y and z swapped: every load and store is coalesced, and two planes are wrong.
extern "C" __global__ void aos_to_soa(const float* __restrict__ src, float* __restrict__ xs,
                                      float* __restrict__ ys, float* __restrict__ zs, int n)
{
    __shared__ float tile[3 * 256];
    for (long long base = blockIdx.x * 256LL; base < n; base += gridDim.x * 256LL) {
        const int count = (int)min(256LL, n - base);
        for (int f = threadIdx.x; f < 3 * count; f += 256)
            tile[f] = src[3 * base + f];
        __syncthreads();
        const int t = threadIdx.x;
        if (t < count) {
            xs[base + t] = tile[3 * t];
            ys[base + t] = tile[3 * t + 2];
            zs[base + t] = tile[3 * t + 1];
        }
        __syncthreads();
    }
}
