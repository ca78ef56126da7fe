// C (M x N) = A (M x K) @ B (K x N), FP32, row-major, any sizes: 32 x 32 tiles of A and B staged in
// shared memory, one output per thread. Each element fetched from global memory is used 32 times.
// Launch: grid (ceil(N / 32), ceil(M / 32)), block (32, 32).
#define TILE 32

extern "C" __global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                       int M, int N, int K)
{
    // ### BEGIN SOLUTION
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE + 1];   // not read column-wise, but the padding costs nothing
    const int row = blockIdx.y * TILE + threadIdx.y;
    const int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        // threadIdx.x walks along rows of both tiles: coalesced loads; zeros past the edges
        As[threadIdx.y][threadIdx.x] = (row < M && k0 + threadIdx.x < K) ? A[(size_t)row * K + k0 + threadIdx.x] : 0.f;
        Bs[threadIdx.y][threadIdx.x] = (k0 + threadIdx.y < K && col < N) ? B[(size_t)(k0 + threadIdx.y) * N + col] : 0.f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k)
            acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();   // before the next iteration overwrites the tiles
    }
    if (row < M && col < N) C[(size_t)row * N + col] = acc;
    // ### END SOLUTION
}
