// conv_blocked: y[i] = sum_{j<TAPS} x[i+j] * w[j] for i < n; x holds n + TAPS - 1 floats (zero-padded).
// Launch: 128 threads per block, each thread computes 16 consecutive outputs (2048 per block),
// grid = ceil(n / 2048), no dynamic shared memory.
// x, w and y must be 16-byte aligned, as cudaMalloc's are: they move as float4, with no scalar path.
// LAUNCH = {"block": 128, "outputs_per_thread": 16}
#ifndef TAPS
#define TAPS 512          // the tap count is a compile-time constant: every loop below unrolls fully
#endif
#define BLOCK 128         // threads per block
#define R 16              // outputs per thread, consecutive
#define SEG (R + 4)       // the block's x window in segments of R floats, each padded by 4 (no bank conflicts)
#define NSEG (BLOCK + TAPS / R)   // segments the window needs: BLOCK * R + TAPS - 1 floats, rounded up
static_assert(TAPS % R == 0, "TAPS must be a multiple of R");

extern "C" __global__ void __launch_bounds__(BLOCK)
conv_blocked(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int n)
{
    __shared__ __align__(16) float xs[NSEG * SEG];
    __shared__ __align__(16) float ws[TAPS];
    // ### BEGIN SOLUTION
    const int t = threadIdx.x;
    const long long out0 = (long long)blockIdx.x * (BLOCK * R);   // first output of this block
    const long long len = (long long)n + TAPS - 1;                 // floats in x
    // Stage the taps and the x window, float4 at a time where the whole float4 is inside x.
    for (int q = t; q < TAPS / 4; q += BLOCK)
        reinterpret_cast<float4*>(ws)[q] = reinterpret_cast<const float4*>(w)[q];
    for (int q = t; q < NSEG * R / 4; q += BLOCK) {
        const long long src = out0 + 4 * q;
        float4 v;
        if (src + 3 < len) {
            v = reinterpret_cast<const float4*>(x + out0)[q];
        } else {                                   // the last block: past the end of x reads as zero
            v.x = src + 0 < len ? x[src + 0] : 0.0f;
            v.y = src + 1 < len ? x[src + 1] : 0.0f;
            v.z = src + 2 < len ? x[src + 2] : 0.0f;
            v.w = 0.0f;
        }
        const int i = 4 * q;                       // R is a multiple of 4: a float4 never straddles segments
        *reinterpret_cast<float4*>(&xs[(i / R) * SEG + i % R]) = v;
    }
    __syncthreads();

    // Thread t owns outputs out0 + t*R + r, r < R. Window a[m] = x[out0 + t*R + j0 + m], m < 2R.
    float acc[R];
    float a[2 * R];
    #pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    #pragma unroll
    for (int m = 0; m < R; m += 4) {
        const float4 v = *reinterpret_cast<const float4*>(&xs[t * SEG + m]);
        a[m] = v.x; a[m + 1] = v.y; a[m + 2] = v.z; a[m + 3] = v.w;
    }
    #pragma unroll 1
    for (int j0 = 0; j0 < TAPS; j0 += R) {
        const float* seg = &xs[(t + j0 / R + 1) * SEG];   // the next R floats of this thread's window
        #pragma unroll
        for (int m = 0; m < R; m += 4) {
            const float4 v = *reinterpret_cast<const float4*>(&seg[m]);
            a[R + m] = v.x; a[R + m + 1] = v.y; a[R + m + 2] = v.z; a[R + m + 3] = v.w;
        }
        #pragma unroll
        for (int k = 0; k < R; k += 4) {
            const float4 wv = *reinterpret_cast<const float4*>(&ws[j0 + k]);   // same address: broadcast
            const float wk[4] = {wv.x, wv.y, wv.z, wv.w};
            #pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                #pragma unroll
                for (int r = 0; r < R; ++r)
                    acc[r] = fmaf(a[r + k + kk], wk[kk], acc[r]);   // R FMAs per tap, all from registers
            }
        }
        #pragma unroll
        for (int m = 0; m < R; ++m) a[m] = a[R + m];   // slide by R: register renaming, no moves once unrolled
    }

    const long long o = out0 + (long long)t * R;
    if (o + R <= n) {
        #pragma unroll
        for (int r = 0; r < R; r += 4)
            *reinterpret_cast<float4*>(&y[o + r]) = make_float4(acc[r], acc[r + 1], acc[r + 2], acc[r + 3]);
    } else {
        #pragma unroll
        for (int r = 0; r < R; ++r)
            if (o + r < n) y[o + r] = acc[r];
    }
    // ### END SOLUTION
}
