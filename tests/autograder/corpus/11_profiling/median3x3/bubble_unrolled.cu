// expect: status=slow points=7.5 reason~="slower than needed"
// Calibration: the starter's fix by unrolling, not by a network: a bubble sort of the nine values whose
// loops have constant bounds and #pragma unroll, so every v[i] is a register (36 compare-exchanges where the
// median network needs 19). Measured at 0.72 of the reference on an H200 (2026-11-28): the longer network
// costs time, so it earns the half-speed tier (0.5), not the full 0.8.
extern "C" __global__ void median3x3(const float* __restrict__ inp, float* __restrict__ out, int height, int width)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height)
        return;
    float v[9];
    #pragma unroll
    for (int dy = -1; dy <= 1; ++dy)
        #pragma unroll
        for (int dx = -1; dx <= 1; ++dx) {
            const int yy = min(max(y + dy, 0), height - 1);
            const int xx = min(max(x + dx, 0), width - 1);
            v[(dy + 1) * 3 + dx + 1] = inp[(long long)yy * width + xx];
        }
    #pragma unroll
    for (int i = 0; i < 8; ++i)
        #pragma unroll
        for (int j = 0; j < 8 - i; ++j) {
            const float lo = fminf(v[j], v[j + 1]);
            v[j + 1] = fmaxf(v[j], v[j + 1]);
            v[j] = lo;
        }
    out[(long long)y * width + x] = v[4];
}
