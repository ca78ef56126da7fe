// expect: status="timed out" points=0 reason~="timed out"
// The K loop never advances k0. The store through a volatile pointer keeps the compiler from removing it.
#define TILE 32
extern "C" __global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                       int M, int N, int K)
{
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    volatile float* out = C;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += 0) {
        acc += (row < M && k0 < K) ? A[(size_t)row * K + k0] : 0.f;
        if (row < M && col < N) out[(size_t)row * N + col] = acc;
    }
}
