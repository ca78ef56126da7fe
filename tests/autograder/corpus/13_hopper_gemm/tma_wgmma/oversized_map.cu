// expect: status="compile error" points=0 reason~="128 bytes aligned to 64"
// A "TensorMap" of 16,000 bytes under the right name (a typedef, so no struct of that name is seen): the
// driver would copy 16,000 bytes from the grader's process into the parameter, 15,872 of them host memory
// behind the 128-byte map the grader passes, and the kernel writes them into c for the report to quote.
typedef struct { unsigned long long opaque[2000]; } TensorMap;

extern "C" __global__ void __launch_bounds__(128) tma_wgmma(const __grid_constant__ TensorMap a,
        const __grid_constant__ TensorMap b, float* c, int m, int n, int k)
{
    const long long i = blockIdx.x * 128ll + threadIdx.x;
    if (i < (long long)m * n)
        c[i] = __longlong_as_double(a.opaque[i % 2000]);
}
