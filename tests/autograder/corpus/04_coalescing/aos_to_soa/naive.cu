// expect: status=passed points=8
// A thread per particle reading its own record: right, but each warp load spans 12 sectors for 4 sectors of
// data (the exercise notebook's aos_to_soa_naive). On an H100 L1 keeps those sectors for the y and z loads:
// 0.935 of the reference, too close to it for any speed threshold, so the exercise grades correctness only.
extern "C" __global__ void aos_to_soa(const float* __restrict__ src, float* __restrict__ xs,
                                      float* __restrict__ ys, float* __restrict__ zs, int n)
{
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < n; p += step) {
        xs[p] = src[3 * p];
        ys[p] = src[3 * p + 1];
        zs[p] = src[3 * p + 2];
    }
}
