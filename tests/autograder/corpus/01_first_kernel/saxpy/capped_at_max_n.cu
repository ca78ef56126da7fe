// expect: status=failed points=3 reason~="^Correctness 3/6 points \(partial credit\): right at all \d+ small and edge sizes.*failed at n="
// Stops at a fixed MAX_N of 2^20 elements (left over from a test buffer): right at every listed size below L2
// and at every hidden size (at most 1,000,003 here), wrong at the size larger than L2 (at least 2^20 + 1 on
// any GPU), whose tail keeps its old values. Partial credit: half the correctness points, no speed points.
#define MAX_N (1 << 20)
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int m = n < MAX_N ? n : MAX_N;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < m; i += blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}
