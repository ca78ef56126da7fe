// online_softmax: y[r][c] = exp(x[r][c] - m) / sum_j exp(x[r][j] - m), m the largest x[r][j], for every row r of a
// row-major rows x cols float matrix (any rows >= 1, cols >= 1).
// Launch: blocks of `block` threads (a multiple of 32, 256 by default), grid ceil(rows / (block / 32)): one warp
// per row. The row loop strides by every warp of the grid, so any grid covers every row.
extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    // ### BEGIN SOLUTION
    // A row of up to REG_COLS floats is read once, into registers (VEC float4s a lane: 64 registers), and
    // the max, the sum and the output all come from there: 4 bytes read and 4 written per element, the least
    // there is. Longer rows take the chapter's two passes (online max and sum, then the output): 8 bytes read.
    constexpr int VEC = 16;
    constexpr int REG_COLS = 32 * 4 * VEC;            // 2048
    constexpr unsigned FULL = 0xffffffffu;
    const float NEG_INF = __int_as_float(0xff800000);   // -inf: NVRTC has no <math.h>, so no INFINITY
    const int lane = threadIdx.x & 31;
    const int warps = blockDim.x >> 5;
    for (int r = blockIdx.x * warps + (threadIdx.x >> 5); r < rows; r += gridDim.x * warps) {
        const float* xr = x + (long long)r * cols;    // 64-bit: rows * cols may exceed 2^31
        float* yr = y + (long long)r * cols;
        const unsigned long long ax = reinterpret_cast<unsigned long long>(xr);
        const unsigned long long ay = reinterpret_cast<unsigned long long>(yr);
        // float4 needs 16-byte addresses, and a row starts on one only when r * cols % 4 == 0. So the 0-3
        // floats before the row's first boundary (the head) and the 0-3 after its last whole float4 (the
        // tail) go one per lane. One head serves x and y when both sit equally far past a boundary, as
        // cudaMalloc's arrays do (both on one); anything else takes the scalar path below.
        if (cols <= REG_COLS && (ax & 3) == 0 && (ax & 15) == (ay & 15)) {
            const int head = min(cols, (int)(((16 - (ax & 15)) & 15) >> 2));
            const int n4 = (cols - head) >> 2;
            const int tail = cols - head - 4 * n4;
            const float4* x4 = reinterpret_cast<const float4*>(xr + head);
            float4* y4 = reinterpret_cast<float4*>(yr + head);
            // Every load is issued before any is used: up to 16 independent 16-byte loads per lane in
            // flight, which is what hides DRAM's latency. A slot past the row holds -inf: the max ignores
            // it and exp turns it into 0.
            const float4 none = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
            float4 v[VEC];
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const int i = j * 32 + lane;
                v[j] = i < n4 ? x4[i] : none;
            }
            float h = lane < head ? xr[lane] : NEG_INF;
            float t = lane < tail ? xr[head + 4 * n4 + lane] : NEG_INF;
            // The whole row is at hand, so the exact max comes first and each element needs one exp, with
            // nothing to rescale: the online recurrence is for data that streams past once.
            float m = fmaxf(h, t);
#pragma unroll
            for (int j = 0; j < VEC; ++j)
                m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                m = fmaxf(m, __shfl_xor_sync(FULL, m, o));
            h = expf(h - m);
            t = expf(t - m);
            float s = h + t;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                if (j * 32 < n4) {                    // the same for the whole warp: skip slots nobody holds
                    v[j] = make_float4(expf(v[j].x - m), expf(v[j].y - m), expf(v[j].z - m), expf(v[j].w - m));
                    s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
                }
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                s += __shfl_xor_sync(FULL, s, o);   // xor butterfly: every lane ends with the same sum
            const float inv = 1.0f / s;
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const int i = j * 32 + lane;
                if (i < n4)
                    y4[i] = make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv);
            }
            if (lane < head)
                yr[lane] = h * inv;
            if (lane < tail)
                yr[head + 4 * n4 + lane] = t * inv;
        } else {
            // Pass 1: each lane keeps the max m of the elements it has seen and the sum l of exp(x - m); when
            // the max grows, what was summed so far is rescaled to it.
            float m = NEG_INF, l = 0.0f;
            for (int c = lane; c < cols; c += 32) {
                const float xv = xr[c];
                if (xv > m) {
                    l = l * expf(m - xv) + 1.0f;
                    m = xv;
                } else {
                    l += expf(xv - m);
                }
            }
            // The 32 (m, l) pairs merged: both sums rescaled to the larger max. A lane that saw nothing
            // holds (-inf, 0); two of them would give exp(-inf - -inf) = NaN, so they are left as they are.
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const float m2 = __shfl_xor_sync(FULL, m, o);
                const float l2 = __shfl_xor_sync(FULL, l, o);
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
    }
    // ### END SOLUTION
}
