// expect: status=slow points=7.5 reason~="slower than needed"
// Calibration: chapter 14's softmax_online cell, renamed. One warp per row, right at every size; it reads x
// twice, 12 bytes per element against the floor's 8, and at the speed size (2,048 columns, 8 x L2 of rows) its
// second read misses L2. Expected near 0.67 of the reference, in the half-points tier; CALIBRATE on the GPU,
// then state status=slow points=7.5 (or what it measures).
// online_softmax: the same softmax as softmax_safe, one warp per row (blocks of 256 threads: 8 rows a block,
// grid ceil(rows / 8)), and one pass fewer: the max and the sum come from one read of the row.
//
// The online recurrence: after the elements seen so far, keep m (their max) and l = sum of exp(x - m). A new
// element v either leaves the max as it is (l += exp(v - m)) or raises it, and then everything summed so far
// was relative to the old max: l becomes l * exp(m - v) + 1 and m becomes v. Each lane does this over its
// elements c = lane, lane + 32, ...; then the 32 pairs are merged. Two pairs (m1, l1) and (m2, l2) describe
// the same kind of sum against different maxes: with m = max(m1, m2), the merged sum is
// l1 exp(m1 - m) + l2 exp(m2 - m). The merge is associative (up to rounding), so any order will do: here a
// shuffle tree.
// Cost: x read twice and y written once, against three reads for softmax_safe.
#define NEG_INF __int_as_float(0xff800000)   // -inf: NVRTC has no <math.h>, so no INFINITY

extern "C" __global__ void online_softmax(const float* x, float* y, int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows)
        return;                                 // r is the same for the whole warp: the shuffles see all 32
    const float* xr = x + (long long)r * cols;  // 64-bit: rows * cols may exceed 2^31
    float* yr = y + (long long)r * cols;

    // Pass 1: this lane's (max, sum). The first element always takes the first branch: exp(-inf - v) is 0,
    // so l becomes 0 * 0 + 1.
    float m = NEG_INF, l = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        const float v = xr[c];
        if (v > m) {
            l = l * expf(m - v) + 1.0f;         // the max grows: rescale what was summed to the new max
            m = v;
        } else {
            l += expf(v - m);
        }
    }

    // Merge the 32 pairs with a butterfly: after 5 steps every lane holds the row's (max, sum). A lane that
    // saw no element (cols < 32) holds (-inf, 0); merging two of those would compute exp(-inf - -inf) = NaN,
    // so an empty pair stays as it is.
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float l2 = __shfl_xor_sync(0xffffffffu, l, o);
        const float mx = fmaxf(m, m2);
        if (mx > NEG_INF) {
            l = l * expf(m - mx) + l2 * expf(m2 - mx);
            m = mx;
        }
    }

    // Pass 2: the output, x read a second time.
    const float inv = 1.0f / l;
    for (int c = lane; c < cols; c += 32)
        yr[c] = expf(xr[c] - m) * inv;
}
