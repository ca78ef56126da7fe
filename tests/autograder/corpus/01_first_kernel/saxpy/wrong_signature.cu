// expect: status="compile error" points=0 reason~="double a"
// `double a` where the exercise passes a float: caught before anything runs.
extern "C" __global__ void saxpy(int n, double a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (float)(a * x[i]) + y[i];
}
