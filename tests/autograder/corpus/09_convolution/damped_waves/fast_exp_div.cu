// expect: status=slow points=5 reason~="slower than needed"
// Calibration: half of the plan. __expf and __fdividef where they are safe, but the accurate cosf, which
// reduces its argument with three constants and keeps a branch for huge arguments. Correct, and 0.71 of the
// reference's speed on an H200: the cosine is most of the work, so it misses the 0.8 threshold.
extern "C" __global__ void damped_waves(const float* __restrict__ x, const float* __restrict__ d,
                                        const float* __restrict__ w, const float* __restrict__ c,
                                        float* __restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float xi = x[i];
    float s = 0.0f;
#pragma unroll 8
    for (int k = 0; k < 32; ++k)
        s += __fdividef(__expf(-d[k] * xi) * cosf(w[k] * xi), fmaf(c[k], xi, 1.0f));
    y[i] = s;
}
