// expect: status=crashed points=0 reason~="out of memory.*no other grading on the GPU"
// About 500 KB of local memory per thread: the GPU reserves a thread's local memory for every thread it can
// keep resident (2048 per SM, 130 GiB in all on a 132-SM GPU), and the 16 GiB __device__ array takes the rest
// of even a 141 GB H200, so every launch runs out of memory, also with no other grading on the GPU. That is
// the kernel's verdict (crashed), not a grader error graded again on every run (batch/work.py grades it once
// more alone first).
__device__ char reserve[1ull << 34];

extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    volatile float scratch[130000];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int j = i % 130000;
        scratch[j] = x[i];
        reserve[i] = 1;
        y[i] = a * scratch[j] + y[i];
    }
}
