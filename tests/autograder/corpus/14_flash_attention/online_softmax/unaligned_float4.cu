// expect: status=crashed points=0 reason~="misaligned"
// Reads and writes every row as float4s from its first float, without checking the row's address: right while
// cols is a multiple of 4 (every row then starts on a 16-byte boundary) and while a row holds fewer than 4
// floats (no float4 at all), but at 37 x 31 row 1 starts 124 bytes in and its first float4 load faults with a
// misaligned address.
extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const float NEG_INF = __int_as_float(0xff800000);
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    float4* y4 = reinterpret_cast<float4*>(yr);
    const int n4 = cols / 4;
    // pass 1: online (max, sum) over the float4s, then over the last cols % 4 floats
    float m = NEG_INF, l = 0.0f;
    auto add = [&](float v) {
        if (v > m) {
            l = l * expf(m - v) + 1.0f;
            m = v;
        } else {
            l += expf(v - m);
        }
    };
    for (int i = lane; i < n4; i += 32) {
        const float4 p = x4[i];
        add(p.x); add(p.y); add(p.z); add(p.w);
    }
    for (int c = 4 * n4 + lane; c < cols; c += 32)
        add(xr[c]);
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float l2 = __shfl_xor_sync(0xffffffffu, l, o);
        const float mx = fmaxf(m, m2);
        if (mx > NEG_INF) {
            l = l * expf(m - mx) + l2 * expf(m2 - mx);
            m = mx;
        }
    }
    const float inv = 1.0f / l;
    for (int i = lane; i < n4; i += 32) {
        const float4 p = x4[i];
        y4[i] = make_float4(expf(p.x - m) * inv, expf(p.y - m) * inv, expf(p.z - m) * inv, expf(p.w - m) * inv);
    }
    for (int c = 4 * n4 + lane; c < cols; c += 32)
        yr[c] = expf(xr[c] - m) * inv;
}
