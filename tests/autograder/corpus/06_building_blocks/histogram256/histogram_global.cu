// expect: status=slow points=6 reason~="slower than needed"
// Global atomics only, far below the threshold.
extern "C" __global__ void histogram256(const int* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&hist[data[i]], 1u);
}
