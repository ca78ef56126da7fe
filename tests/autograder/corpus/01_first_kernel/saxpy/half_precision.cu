// expect: status=failed points=0 reason~="values wrong"
// Computes in half precision (11-bit mantissa): errors around 1e-3 relative, far above the allowed 1e-5.
#include <cuda_fp16.h>
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __half2float(__hfma(__float2half(a), __float2half(x[i]), __float2half(y[i])));
}
