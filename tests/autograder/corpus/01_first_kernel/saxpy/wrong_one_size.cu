// expect: status=failed points=0 reason~="At size n=1:"
// Right everywhere except n = 1: an "optimization" that assumes a single element needs no GPU.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    if (n < 2) return;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
