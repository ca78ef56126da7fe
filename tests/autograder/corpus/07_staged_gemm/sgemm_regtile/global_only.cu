// expect: status=slow points=4 reason~="slower than needed"
// Correct under the default launch (128 x 128 outputs per block of 256 threads) but with no tiling at all:
// each thread walks its 64 outputs one after another, each a full dot product read from global memory
// (coalesced along a row of C). About the lesson's stage 2, far below the 0.35 tier of the reference.
#define BM 128
#define BN 128
extern "C" __global__ void sgemm_regtile(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                         int M, int N, int K)
{
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    for (int i = 0; i < 8; ++i) {
        const int row = blockIdx.y * BM + ty + 16 * i;
        for (int j = 0; j < 8; ++j) {
            const int col = blockIdx.x * BN + tx + 16 * j;
            if (row >= M || col >= N) continue;
            float acc = 0.f;
            for (int k = 0; k < K; ++k) acc = fmaf(A[(size_t)row * K + k], B[(size_t)k * N + col], acc);
            C[(size_t)row * N + col] = acc;
        }
    }
}
