// damped_waves: y[i] = sum_{k<32} exp(-d[k] x) * cos(w[k] x) / (1 + c[k] x) with x = x[i], for i < n.
// Launch: one element per thread, 1D blocks of any size (256 by default), grid = ceil(n / block).
// The grader's inputs: x in [0, 8) on a grid of 2^-12, d[k] in [0, 0.125), w[k] in [0, 80) on a grid of 1/4,
// c[k] in [0, 0.25). So w[k] * x is exact in float32 (at most 24 significant bits) and reaches 640 radians.
#define TERMS 32

extern "C" __global__ void damped_waves(const float* __restrict__ x, const float* __restrict__ d,
                                        const float* __restrict__ w, const float* __restrict__ c,
                                        float* __restrict__ y, int n)
{
    // ### BEGIN SOLUTION
    // 2 pi as two floats: HI is 2 pi rounded to float, LO what that rounding left off (HI + LO is 2 pi to
    // 1e-15). HI alone is 1.7e-7 too large, so q turns of it would be q x 1.7e-7 off: 1.8e-5 radians at
    // 640 radians, enough to break the tolerance where several such terms add up.
    const float TWO_PI_HI = 6.28318548f;
    const float TWO_PI_LO = -1.74845553e-7f;
    const float INV_TWO_PI = 0.159154937f;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    const float xi = x[i];
    float s = 0.0f;
#pragma unroll 8
    for (int k = 0; k < TERMS; ++k) {
        const float t = w[k] * xi;
        // __cosf first turns its argument into revolutions with one rounded multiply (FMUL.RZ by 1/(2 pi)),
        // which loses up to about |t| x 2^-23 radians: 7.6e-5 at t = 640, far outside the tolerance. So the
        // intrinsic only gets r = t - q 2 pi, in [-pi, pi], where that multiply costs nothing that matters.
        // q may come out one off where t is a hair from an odd multiple of pi: r is then a hair past pi, fine.
        // fmaf multiplies exactly and rounds once, so t - q HI is exact (both are multiples of 2^-21 and the
        // difference is below 4) and only the small correction q LO is rounded.
        const float q = rintf(t * INV_TWO_PI);
        const float r = fmaf(-q, TWO_PI_LO, fmaf(-q, TWO_PI_HI, t));
        // __expf's error grows with its argument (2 + 1.17 |v| ulp); here v = -d x is in (-1, 0]: a few ulp.
        // __fdividef is within 2 ulp unless the divisor exceeds 2^126; 1 + c x stays in [1, 3).
        s += __fdividef(__expf(-d[k] * xi) * __cosf(r), fmaf(c[k], xi, 1.0f));
    }
    y[i] = s;
    // ### END SOLUTION
}
