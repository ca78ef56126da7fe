// expect: status=crashed points=0 reason~="illegal memory access"
// The tiled kernel with one store 256 GiB past C: the GPU raises an illegal address at the first size.
#define TILE 32
extern "C" __global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                       int M, int N, int K)
{
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int k = 0; k < K && row < M && col < N; ++k) acc = fmaf(A[(size_t)row * K + k], B[(size_t)k * N + col], acc);
    if (row < M && col < N) C[(size_t)row * N + col + (64ull << 30)] = acc;
}
