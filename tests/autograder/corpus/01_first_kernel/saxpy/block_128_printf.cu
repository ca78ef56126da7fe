// expect: status=passed points=10 printf~="hello from saxpy"
// LAUNCH = {"block": 128}
// Correct, with a student-chosen block size and a printf: full marks, and the printf reaches the report.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    if (blockIdx.x == 0 && threadIdx.x == 0 && n == 1) printf("hello from saxpy, n=%d\n", n);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
