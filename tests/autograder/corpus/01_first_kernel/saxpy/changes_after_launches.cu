// expect: status=failed points=0 reason~="while being timed"
// Cheats: right for its first 20 launches (enough for every correctness check), then skips the work so it
// looks fast once it is being timed. The grader checks the outputs of timed runs too.
__device__ unsigned int launches = 0;
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    bool cheat = *(volatile unsigned int*)&launches >= 20;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (!cheat && i < n) y[i] = a * x[i] + y[i];
    if (i == 0) atomicAdd(&launches, 1u);
}
