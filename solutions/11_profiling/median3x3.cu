// median3x3: out[y][x] = the median of the 3 x 3 neighbourhood of inp[y][x], for a row-major height x width
// image of floats; neighbours outside the image take the nearest edge pixel's value (clamp to edge).
// Launch: block (32, 8), grid (ceil(width / 32), ceil(height / 8)): one output per thread.
extern "C" __global__ void median3x3(const float* __restrict__ inp, float* __restrict__ out, int height, int width)
{
    // ### BEGIN SOLUTION
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height)
        return;
    const int xl = max(x - 1, 0), xr = min(x + 1, width - 1);
    const float* up = inp + (long long)max(y - 1, 0) * width;       // 64-bit: height * width may exceed 2^31
    const float* mid = inp + (long long)y * width;
    const float* down = inp + (long long)min(y + 1, height - 1) * width;
    // Nine named scalars, not an array: every index below is known when the kernel is compiled, so all
    // nine values live in registers. Neighbouring threads read neighbouring floats (coalesced), and the
    // three rows a warp reads are shared with the warps above and below it through L1.
    float p0 = up[xl], p1 = up[x], p2 = up[xr];
    float p3 = mid[xl], p4 = mid[x], p5 = mid[xr];
    float p6 = down[xl], p7 = down[x], p8 = down[xr];
    // A fixed exchange network for the median of nine (19 compare-exchanges, Paeth's; after it p4 is the
    // fifth smallest). fminf/fmaxf return one of their arguments, so the median is an input value, bit for
    // bit, and there is no branch: every thread of a warp runs the same instructions.
#define CAS(a, b) { const float lo = fminf(a, b); b = fmaxf(a, b); a = lo; }
    CAS(p1, p2); CAS(p4, p5); CAS(p7, p8);
    CAS(p0, p1); CAS(p3, p4); CAS(p6, p7);
    CAS(p1, p2); CAS(p4, p5); CAS(p7, p8);
    CAS(p0, p3); CAS(p5, p8); CAS(p4, p7);
    CAS(p3, p6); CAS(p1, p4); CAS(p2, p5);
    CAS(p4, p7); CAS(p4, p2); CAS(p6, p4);
    CAS(p4, p2);
#undef CAS
    out[(long long)y * width + x] = p4;
    // ### END SOLUTION
}
