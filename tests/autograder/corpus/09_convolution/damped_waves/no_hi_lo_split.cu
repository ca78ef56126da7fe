// expect: status=failed points=0 reason~="values wrong"
// The reduction without the hi/lo split: r = t - q * 2pi with 2pi as one float, which is 1.7e-7 too large.
// fmaf (or the compiler's contraction of t - q * TWO_PI) subtracts q * 6.28318548 exactly, so r is off by q x
// 1.7e-7: up to 1.8e-5 radians at 102 turns. Modelled on the CPU, 0.4-14% of the elements are then beyond the
// tolerance, depending on the coefficients: with 100,003 elements it fails at every draw.
extern "C" __global__ void damped_waves(const float* __restrict__ x, const float* __restrict__ d,
                                        const float* __restrict__ w, const float* __restrict__ c,
                                        float* __restrict__ y, int n)
{
    const float TWO_PI = 6.28318548f;
    const float INV_TWO_PI = 0.159154937f;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float xi = x[i];
    float s = 0.0f;
#pragma unroll 8
    for (int k = 0; k < 32; ++k) {
        const float t = w[k] * xi;
        const float q = rintf(t * INV_TWO_PI);
        const float r = fmaf(-q, TWO_PI, t);
        s += __fdividef(__expf(-d[k] * xi) * __cosf(r), fmaf(c[k], xi, 1.0f));
    }
    y[i] = s;
}
