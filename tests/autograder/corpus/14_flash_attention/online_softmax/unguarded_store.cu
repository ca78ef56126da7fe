// expect: status=crashed points=0 reason~="out of bounds.*past the end of y"
// The register path with its loads guarded and its float4 stores not: every lane stores all 16 of its slots,
// the ones past the row too (exp(-inf) x inv = 0). In any row but the last that overwrites the next rows, which
// other warps may already have written; past the last row it writes beyond y. At 1 x 1 that is 8 KiB past the
// end of a 4-byte y, and the guard bytes after it say so.
extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const float NEG_INF = __int_as_float(0xff800000);
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows || cols > 2048)
        return;                                     // (the grader fails it before any longer row)
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    const unsigned long long ax = reinterpret_cast<unsigned long long>(xr);
    const unsigned long long ay = reinterpret_cast<unsigned long long>(yr);
    if ((ax & 3) || (ax & 15) != (ay & 15))
        return;
    const int head = min(cols, (int)(((16 - (ax & 15)) & 15) >> 2));
    const int n4 = (cols - head) >> 2;
    const int tail = cols - head - 4 * n4;
    const float4* x4 = reinterpret_cast<const float4*>(xr + head);
    float4* y4 = reinterpret_cast<float4*>(yr + head);
    float4 v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int i = j * 32 + lane;
        v[j] = i < n4 ? x4[i] : make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    }
    float h = lane < head ? xr[lane] : NEG_INF;
    float t = lane < tail ? xr[head + 4 * n4 + lane] : NEG_INF;
    float m = fmaxf(h, t);
#pragma unroll
    for (int j = 0; j < 16; ++j)
        m = fmaxf(m, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
    for (int o = 16; o > 0; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    h = expf(h - m);
    t = expf(t - m);
    float s = h + t;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        v[j] = make_float4(expf(v[j].x - m), expf(v[j].y - m), expf(v[j].z - m), expf(v[j].w - m));
        s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.0f / s;
#pragma unroll
    for (int j = 0; j < 16; ++j)                    // the bug: no `if (j * 32 + lane < n4)`
        y4[j * 32 + lane] = make_float4(v[j].x * inv, v[j].y * inv, v[j].z * inv, v[j].w * inv);
    if (lane < head)
        yr[lane] = h * inv;
    if (lane < tail)
        yr[head + 4 * n4 + lane] = t * inv;
}
