// expect: status=slow points=6 reason~="slower than needed"
// The lesson's stage 2: correct, one output per thread with threadIdx.x along a row of C, so the loads of B
// and the stores of C are coalesced, but every element of A and B is fetched from memory (or L1) once per
// output that uses it: no shared-memory reuse, about two thirds of the tiled kernel's speed on an H100.
extern "C" __global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                       int M, int N, int K)
{
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= M || col >= N) return;
    float acc = 0.f;
    for (int k = 0; k < K; ++k) acc = fmaf(A[(size_t)row * K + k], B[(size_t)k * N + col], acc);
    C[(size_t)row * N + col] = acc;
}
