// expect: status=failed points=0 reason~="timing size|while being timed"
// Computes once per input buffer and length, keeps the result in a __device__ array and replays it on
// later launches with the same pointers. When timed runs reused a few fixed input sets this earned full
// speed points; every timed launch now gets new values in its buffers, so a replayed output is wrong.
#define CACHE (48u << 20)
__device__ float cached[CACHE];
__device__ unsigned long long tag[CACHE];

extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    unsigned long long key = (unsigned long long)x * 1315423911ull + (unsigned long long)n;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        if (i < (int)CACHE && tag[i] == key) {
            y[i] = cached[i];
        } else {
            float v = a * x[i] + y[i];
            y[i] = v;
            if (i < (int)CACHE) {
                cached[i] = v;
                tag[i] = key;
            }
        }
    }
}
