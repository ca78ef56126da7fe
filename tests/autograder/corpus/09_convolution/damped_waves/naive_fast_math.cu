// expect: status=failed points=0 reason~="values wrong"
// What --use_fast_math does, by hand: every math call swapped for its intrinsic. __expf and __fdividef are
// harmless here, but __cosf(w x) scales arguments of up to 640 radians to revolutions with one rounded multiply
// and loses up to about |w x| 2^-23 radians a term (7.6e-5 at 640): modelled on the CPU, 31-51% of the elements
// are off by more than the 2e-5 tolerance, so it fails at n = 1009 already, whatever the coefficients.
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
        s += __fdividef(__expf(-d[k] * xi) * __cosf(w[k] * xi), 1.0f + c[k] * xi);
    y[i] = s;
}
