// expect: status~="^(passed|slow)$"
// The lesson's plain privatized kernel (calibrates 0.8). Calibration: correct, and its speed ratio shows how close to the threshold a plain version lands.
extern "C" __global__ void histogram256(const int* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
    __shared__ unsigned int local[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        if (local[b])
            atomicAdd(&hist[b], local[b]);
}
