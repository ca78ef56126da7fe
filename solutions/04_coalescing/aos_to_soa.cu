// aos_to_soa: n particles stored as records {x, y, z} (src[3p], src[3p + 1], src[3p + 2]) to three planes:
// xs[p] = src[3p], ys[p] = src[3p + 1], zs[p] = src[3p + 2].
// Launch: blocks of 256 threads, at most 2048 blocks, so the kernel loops over the particles.
// A thread per particle reading its own record makes each warp load span 384 bytes for 128 it uses;
// here a block reads its records as one contiguous run of floats, reorders them in shared memory, and
// writes each plane as a contiguous run.
extern "C" __global__ void aos_to_soa(const float* __restrict__ src, float* __restrict__ xs,
                                      float* __restrict__ ys, float* __restrict__ zs, int n)
{
    // ### BEGIN SOLUTION
    constexpr int BLOCK = 256;                  // the grader's block size: the tile is sized for it
    constexpr int PER_THREAD = 4;               // particles per thread per tile
    constexpr int TILE = BLOCK * PER_THREAD;    // particles per tile: 3 * TILE floats, 12 KiB
    __shared__ float tile[3 * TILE];

    // `base` depends on the block only, so every thread of a block runs the same iterations and reaches
    // both barriers; a per-thread loop condition here would deadlock on __syncthreads.
    for (long long base = (long long)blockIdx.x * TILE; base < n; base += (long long)gridDim.x * TILE) {
        const int count = (int)min((long long)TILE, n - base);   // TILE, except in the last tile
        const float* in = src + 3 * base;                        // 64-bit: 3 * n may pass 2^31

        // Lane l reads float l of a 32-float run, whatever record it belongs to: every warp load is
        // 128 contiguous bytes (4 sectors). All 12 loads are issued before any value is used: 48 bytes
        // in flight per thread, enough to cover DRAM latency (the chapter's Little's-law estimate).
        float v[3 * PER_THREAD];
        #pragma unroll
        for (int k = 0; k < 3 * PER_THREAD; ++k) {
            const int f = threadIdx.x + k * BLOCK;
            if (f < 3 * count)
                v[k] = in[f];
        }
        #pragma unroll
        for (int k = 0; k < 3 * PER_THREAD; ++k) {
            const int f = threadIdx.x + k * BLOCK;
            if (f < 3 * count)
                tile[f] = v[k];
        }
        __syncthreads();                        // a thread's record was loaded by up to three other threads

        // Lane l now takes particle l: it reads tile[3l + c], 3 words apart. 3 is odd, so the 32 lanes
        // fall in 32 different banks (no conflict), and each plane's store is 32 consecutive floats.
        #pragma unroll
        for (int k = 0; k < PER_THREAD; ++k) {
            const int p = threadIdx.x + k * BLOCK;
            if (p < count) {
                xs[base + p] = tile[3 * p];
                ys[base + p] = tile[3 * p + 1];
                zs[base + p] = tile[3 * p + 2];
            }
        }
        __syncthreads();                        // the next tile overwrites what slower threads still read
    }
    // ### END SOLUTION
}
