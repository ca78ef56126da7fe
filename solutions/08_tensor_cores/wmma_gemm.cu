// requires: sm_80
// C (M x N, float) = A (M x K, bf16) @ B (K x N, bf16), row-major; M, N and K multiples of 16.
// One warp per 16 x 16 tile of C: walk K sixteen at a time, loading both fragments straight from
// global memory (a row-major A tile with leading dimension K, a row-major B tile with leading
// dimension N) and accumulating in FP32 on the tensor cores.
// Launch: grid (N / 64, M / 16), block 128 = 4 warps side by side along N.
#include <mma.h>
#include <cuda_bf16.h>
using namespace nvcuda;

// bf16 arrives as its bits (unsigned short): the fragments read them as __nv_bfloat16
extern "C" __global__ void wmma_gemm(const unsigned short* A_bits, const unsigned short* B_bits, float* C, int M, int N, int K)
{
    const __nv_bfloat16* A = reinterpret_cast<const __nv_bfloat16*>(A_bits);
    const __nv_bfloat16* B = reinterpret_cast<const __nv_bfloat16*>(B_bits);
    // ### BEGIN SOLUTION
    const int warp = threadIdx.x / 32;
    const int row = blockIdx.y * 16;
    const int col = (blockIdx.x * 4 + warp) * 16;
    if (row >= M || col >= N) return;      // whole warps only: the fragment calls are warp-collective
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + (size_t)row * K + k, K);
        wmma::load_matrix_sync(b, B + (size_t)k * N + col, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + (size_t)row * N + col, acc, N, wmma::mem_row_major);
    // ### END SOLUTION
}
