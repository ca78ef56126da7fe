// expect: status=failed points=0 reason~="could not launch.*2048"
// LAUNCH = {"block": 2048}
// Asks for 2048 threads per block; no GPU runs more than 1024.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
