// expect: status="compile error" points=0 reason~="line 4: `__has_include` asks whether a file exists"
// __has_include reads no file, but answers whether one exists on the grading machine: one bit per
// compile, e.g. whether another student's submission is there.
#if __has_include("/etc/shadow")
static_assert(sizeof(int) == 0, "the grading machine has /etc/shadow");
#endif
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
