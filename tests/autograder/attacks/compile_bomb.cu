// A correct saxpy whose body the preprocessor expands into 100,000 statements: minutes of compiler CPU
// time and gigabytes of memory. The grader's compile limits must stop it and call it the source's problem.
#define TEN(x) x x x x x x x x x x
#define MANY(x) TEN(TEN(TEN(TEN(TEN(x)))))
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int s = 0;
    MANY(s += (i >> (s & 7)) & 1;)
    if (i < n) y[i] = a * x[i] + y[i] + 0.0f * s;
}
