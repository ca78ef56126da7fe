// expect: status="timed out" points=0 reason~="timed out.*n=1"
// The grid-stride loop never advances i. The store is volatile, so the compiler must keep the loop.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    volatile float* out = y;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; /* forgot i += stride */)
        out[i] = a * x[i] + y[i];
}
