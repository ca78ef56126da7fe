// expect: status="compile error" points=0 reason~="extern"
// Without extern "C" the kernel's name is mangled and the grader cannot find it.
__global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
