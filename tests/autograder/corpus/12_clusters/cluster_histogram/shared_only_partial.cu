// expect: status=failed points=0 reason~="hist: \d+ of 16384 values wrong"
// A block privatizes as many bins as its 48 KiB of static shared memory holds (12,288) and drops the
// values of the other 4,096 bins: a quarter of the histogram stays zero. Even at n = 33 a value of the
// dropped range is all but certain.
#define KEPT 12288
extern "C" __global__ void cluster_histogram(const unsigned int* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
    __shared__ unsigned int local[KEPT];
    for (int b = threadIdx.x; b < KEPT; b += blockDim.x)
        local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (data[i] < KEPT)
            atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < KEPT; b += blockDim.x)
        if (local[b])
            atomicAdd(&hist[b], local[b]);
}
