// expect: status="compile error" points=0 reason~="line 7: `#include \"/etc/passwd\"` reaches outside your source"
// Turns a file of the grading machine into the message of a failing static_assert, so the compile error
// the student is shown would print the file.
#define STR(...) #__VA_ARGS__
#define XSTR(...) STR(__VA_ARGS__)
static_assert(sizeof(int) == 0, XSTR(
#include "/etc/passwd"
));
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
