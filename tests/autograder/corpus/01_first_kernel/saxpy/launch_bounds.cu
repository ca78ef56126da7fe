// expect: status=failed points=0 reason~="could not launch.*at most 128"
// __launch_bounds__(128) promises blocks of at most 128 threads; the grader launches the default 256.
extern "C" __global__ void __launch_bounds__(128) saxpy(int n, float a, const float* x, float* y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
