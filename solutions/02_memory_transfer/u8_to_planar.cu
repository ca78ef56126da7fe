// u8_to_planar: interleaved RGB bytes (HWC) -> planar normalized floats (CHW), (v/255 - mean[c]) * inv_std[c]
// Ship 1 byte per channel over the link and widen on the GPU: 4x fewer bytes than sending floats.
extern "C" __global__ void u8_to_planar(const unsigned char* __restrict__ src,
                                        float* __restrict__ dst,
                                        const float* __restrict__ mean,
                                        const float* __restrict__ inv_std,
                                        int pixels)
{
    // ### BEGIN SOLUTION
    const float m0 = mean[0], m1 = mean[1], m2 = mean[2];
    const float s0 = inv_std[0], s1 = inv_std[1], s2 = inv_std[2];
    const int stride = gridDim.x * blockDim.x;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < pixels; p += stride) {
        // the 3 bytes of a pixel are adjacent, so a warp reads 96 contiguous bytes per channel triple
        const size_t s = 3 * (size_t)p;
        dst[p]                      = (src[s + 0] * (1.0f / 255.0f) - m0) * s0;
        dst[(size_t)pixels + p]     = (src[s + 1] * (1.0f / 255.0f) - m1) * s1;
        dst[2 * (size_t)pixels + p] = (src[s + 2] * (1.0f / 255.0f) - m2) * s2;
    }
    // ### END SOLUTION
}
