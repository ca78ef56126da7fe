// expect: status~="^(passed|slow)$"
// Single-launch two stages with scalar loads (calibrates 0.8). Calibration: correct, and its speed ratio shows how close to the threshold a plain version lands.
__device__ float g_partials[1024];
__device__ unsigned int g_finished = 0;

__device__ float block_sum(float v)
{
    __shared__ float w[32];
    __syncthreads();
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x % 32 == 0)
        w[threadIdx.x / 32] = v;
    __syncthreads();
    v = threadIdx.x < blockDim.x / 32 ? w[threadIdx.x] : 0.0f;
    if (threadIdx.x < 32)
        for (int off = 16; off > 0; off >>= 1)
            v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

extern "C" __global__ void reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ bool last;
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        s += x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) {
        g_partials[blockIdx.x] = s;
        __threadfence();
        last = atomicAdd(&g_finished, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return;
    float t = 0.0f;
    for (int i = threadIdx.x; i < gridDim.x; i += blockDim.x)
        t += ((volatile float*)g_partials)[i];
    t = block_sum(t);
    if (threadIdx.x == 0) {
        *out = t;
        g_finished = 0;
    }
}
