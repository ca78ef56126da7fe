// expect: status=failed points=0 reason~="values wrong"
// A reduction that looks right but reduces after the damage: u = t / (2pi) in turns, its fraction f = u -
// rint(u), then __cosf(2pi f). The multiply that makes u rounds away the same low bits the intrinsic's own
// FMUL.RZ would (about |t| 2^-24 radians, plus 1/(2pi)'s rounding: 6e-5 at 640 radians); subtracting
// rint(u) afterwards is exact and gives nothing back. Modelled on the CPU, 8-30% of the elements fail.
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
        const float u = w[k] * xi * INV_TWO_PI;
        const float f = u - rintf(u);
        s += __fdividef(__expf(-d[k] * xi) * __cosf(TWO_PI * f), fmaf(c[k], xi, 1.0f));
    }
    y[i] = s;
}
