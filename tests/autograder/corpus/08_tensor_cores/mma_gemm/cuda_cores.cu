// expect: status=failed points=0 reason~="Expected: mma_gemm multiplies on the tensor cores\. Found: no tensor-core instruction"
// A correct GEMM on the CUDA cores: each thread widens the bf16 bits to float and accumulates one output
// with FFMA. Right at every size, but the exercise is the tensor-core path, so the grader's tensor_cores
// check (required for this exercise) fails it before it runs: no HMMA in its SASS.
// LAUNCH = {"bm": 16, "bn": 16, "threads": 256}
extern "C" __global__ void mma_gemm(const unsigned short* A_bits, const unsigned short* B_bits, float* C,
                                    int M, int N, int K)
{
    const int tiles_n = (N + 15) / 16;
    const int row = (blockIdx.x / tiles_n) * 16 + threadIdx.x / 16;
    const int col = (blockIdx.x % tiles_n) * 16 + threadIdx.x % 16;
    if (row >= M || col >= N)
        return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) {
        const float a = __uint_as_float((unsigned int)A_bits[(size_t)row * K + k] << 16);
        const float b = __uint_as_float((unsigned int)B_bits[(size_t)k * N + col] << 16);
        acc = fmaf(a, b, acc);
    }
    C[(size_t)row * N + col] = acc;
}
