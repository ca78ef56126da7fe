// expect: status=passed points=8
// staged_simple.cu with the load and the shared store in one loop (a load, a store, the next load): correct,
// so full marks now that the exercise is graded for correctness only (it measured 0.875 of the reference on
// an H100, where the text tells students to load into registers first).
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
            ys[base + t] = tile[3 * t + 1];
            zs[base + t] = tile[3 * t + 2];
        }
        __syncthreads();
    }
}
