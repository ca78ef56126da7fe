// expect: status=slow points=5 reason~="slower than needed"
// The notebook's starter (damped_waves_starter), renamed: the accurate math library in every term (expf,
// cosf, IEEE division), right at every size and, by the spec's expectation, below 0.8 of the reference's
// speed (0.55 on an H200).
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
        s += expf(-d[k] * xi) * cosf(w[k] * xi) / (1.0f + c[k] * xi);
    y[i] = s;
}
