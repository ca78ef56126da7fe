// expect: status="compile error" points=0 reason~="line 7: `#include \"/etc/hostname\"` reaches outside your source"
// A correct kernel that also prints a file of the grading machine, compiled into a __device__ string: the
// report shows the kernel's printf output.
#define STR(...) #__VA_ARGS__
#define XSTR(...) STR(__VA_ARGS__)
__device__ const char leak[] = XSTR(
#include "/etc/hostname"
);
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) printf("%s\n", leak);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
