// expect: status="compile error" points=0 reason~="shared"
// 64 KiB of static shared memory: over the 48 KiB a block may declare statically, so ptxas refuses it.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    __shared__ float stage[16384];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    stage[threadIdx.x] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) y[i] = a * stage[threadIdx.x] + y[i];
}
