// expect: status=slow points=6 reason~="speed points are withheld.*distributed shared memory"
// A single block's best without a cluster: 12,288 bins in its 48 KiB of static shared memory, the other
// 4,096 (and 4 of the hot bins) sent straight to global atomics. Correct, so 6 points; no DSMEM, so the
// technique check withholds the speed points. The reason's "timed anyway" ratio is the figure to compare
// with the DSMEM reference (the issue asks for the cluster version to be at least 1.2 x the best
// single-block one).
#define KEPT 12288
extern "C" __global__ void cluster_histogram(const unsigned int* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
    __shared__ unsigned int local[KEPT];
    for (int b = threadIdx.x; b < KEPT; b += blockDim.x)
        local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const unsigned int v = data[i];
        if (v < KEPT)
            atomicAdd(&local[v], 1u);
        else if (v < 16384u)
            atomicAdd(&hist[v], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < KEPT; b += blockDim.x)
        if (local[b])
            atomicAdd(&hist[b], local[b]);
}
