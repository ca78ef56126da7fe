// expect: status=failed points=0 reason~="out of bounds.*past the end of y"
// `<=` instead of `<`: the thread with i == n writes y[n], one element past the end.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) y[i] = a * x[i] + y[i];
}
