// expect: status=failed points=0 reason~="values wrong"
// Writes zeros: every element is written (no NaN, no out-of-bounds), all of them wrong.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 0.0f;
}
