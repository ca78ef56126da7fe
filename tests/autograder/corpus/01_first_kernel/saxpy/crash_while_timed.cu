// expect: status=crashed points=0 reason~="while being timed.*illegal memory access"
// Right for its first two launches above a million elements (the correctness runs at the size larger than
// L2), then writes far outside y: the crash comes in the speed step's warm-up launches at that size, inside
// a section other gradings share in batch mode. (Block 0 counts a launch while later blocks of the same
// launch still run, so they see the new count: 3, not 2, keeps the second correctness run right.) It must
// be reported as this kernel's crash, not as a grader error, and must change nobody else's verdict.
__device__ unsigned int big_launches = 0;
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    bool big = n > 1000003;
    bool crash = big && *(volatile unsigned int*)&big_launches >= 3;
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i + (crash ? (1LL << 36) : 0)] = a * x[i] + y[i];
    if (big && i == 0) atomicAdd(&big_launches, 1u);
}
