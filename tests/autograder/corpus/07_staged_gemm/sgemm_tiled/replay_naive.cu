// expect: status=failed points=0 reason~="timing size|while being timed"
// A naive SGEMM (well below the speed threshold) that stores each output per input pointer and size and
// replays it on later launches. When timed runs rotated over a few fixed input sets this went from 4/10
// to 10/10; now every timed launch has new values in its buffers, so the replayed output is wrong.
#define CACHE (1u << 24)
__device__ float cached[CACHE];
__device__ unsigned long long tag[CACHE];

extern "C" __global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                       int M, int N, int K)
{
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    const size_t i = (size_t)row * N + col;
    const unsigned long long key = (unsigned long long)A * 2654435761ull + ((unsigned long long)M << 40)
                                   + ((unsigned long long)N << 20) + (unsigned long long)K;
    if (i < CACHE && tag[i] == key) {
        C[i] = cached[i];
        return;
    }
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];
    C[i] = acc;
    if (i < CACHE) {
        cached[i] = acc;
        tag[i] = key;
    }
}
