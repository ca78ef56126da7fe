// expect: status=failed points=0 reason~="At size n=1: wrong output. xs: 1 of 1 values wrong"
// Only whole tiles are converted: right when n is a multiple of 256, and the last n % 256 particles are
// never written otherwise (n = 1 writes nothing at all).
extern "C" __global__ void aos_to_soa(const float* __restrict__ src, float* __restrict__ xs,
                                      float* __restrict__ ys, float* __restrict__ zs, int n)
{
    __shared__ float tile[3 * 256];
    for (long long base = blockIdx.x * 256LL; base + 256 <= n; base += gridDim.x * 256LL) {
        for (int f = threadIdx.x; f < 3 * 256; f += 256)
            tile[f] = src[3 * base + f];
        __syncthreads();
        const int t = threadIdx.x;
        xs[base + t] = tile[3 * t];
        ys[base + t] = tile[3 * t + 1];
        zs[base + t] = tile[3 * t + 2];
        __syncthreads();
    }
}
