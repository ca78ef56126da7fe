// expect: status=slow points=6 reason~="speed points are withheld.*distributed shared memory"
// Correct, with no cluster: every value is a global atomic in L2, and a quarter of them queue up on 16 hot
// addresses (1.6% of all values each). The spec's technique check (distributed_shared) finds no DSMEM
// access in its SASS and withholds the speed points, however fast it runs; its own speed is far below the
// reference anyway (the reason shows the ratio).
extern "C" __global__ void cluster_histogram(const unsigned int* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        if (data[i] < 16384u)
            atomicAdd(&hist[data[i]], 1u);
}
