// expect: status=failed points=0
// Forgets to reset the counter, so the second run is wrong.
__device__ float g_partials[1024];
__device__ unsigned int g_finished = 0;

extern "C" __global__ void reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ float part[1024];
    __shared__ bool last;
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        s += x[i];
    part[threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float b = 0.0f;
        for (int i = 0; i < blockDim.x; ++i)
            b += part[i];
        g_partials[blockIdx.x] = b;
        __threadfence();
        last = atomicAdd(&g_finished, 1u) == gridDim.x - 1;
        if (last) {
            float t = 0.0f;
            for (int i = 0; i < gridDim.x; ++i)
                t += ((volatile float*)g_partials)[i];
            *out = t;
        }
    }
}
