// expect: status=failed points=0 reason~="values wrong"
// exp(x) / sum exp(x) without subtracting the row's max: right on the ordinary scores, but the grader shifts one
// element in 4,096 by +100 and expf(100) overflows float32 (its limit is 88.7): the sum is inf, the shifted
// element's output inf / inf = NaN. (509, 1024) alone holds about 127 such elements, so a small size fails.
extern "C" __global__ void online_softmax(const float* __restrict__ x, float* __restrict__ y, int rows, int cols)
{
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows)
        return;
    const float* xr = x + (long long)r * cols;
    float* yr = y + (long long)r * cols;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32)
        s += expf(xr[c]);
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    const float inv = 1.0f / s;
    for (int c = lane; c < cols; c += 32)
        yr[c] = expf(xr[c]) * inv;
}
