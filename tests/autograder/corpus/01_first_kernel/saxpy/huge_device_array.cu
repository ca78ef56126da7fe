// expect: status="compile error" points=0 reason~="could not be loaded on the GPU"
// A 1 TiB __device__ array: the module cannot load. That is the source's problem, not a grader error.
__device__ char scratch[1ull << 40];

extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        scratch[i] = 1;
        y[i] = a * x[i] + y[i];
    }
}
