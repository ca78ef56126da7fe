// expect: status=failed points=0 reason~="values wrong"
// Off by one at the right edge: the column clamp uses width instead of width - 1, so the last pixel of each
// row takes its right-hand neighbours from the next row's first pixel (and the image's last pixel from past
// the end of the array). Right everywhere else.
extern "C" __global__ void median3x3(const float* __restrict__ inp, float* __restrict__ out, int height, int width)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height)
        return;
    const int xl = max(x - 1, 0), xr = min(x + 1, width);
    const float* up = inp + (long long)max(y - 1, 0) * width;
    const float* mid = inp + (long long)y * width;
    const float* down = inp + (long long)min(y + 1, height - 1) * width;
    float p0 = up[xl], p1 = up[x], p2 = up[xr];
    float p3 = mid[xl], p4 = mid[x], p5 = mid[xr];
    float p6 = down[xl], p7 = down[x], p8 = down[xr];
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
}
