// expect: status=crashed points=0 reason~="illegal memory access"
// An index far outside y (256 GiB past it): the GPU raises an illegal address, which poisons the CUDA
// context; the grader reports it and goes on with the next size in a fresh process.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i + (1LL << 36)] = a * x[i] + y[i];
}
