// expect: status=failed points=0 reason~="values wrong"
// Pads the image with zeros instead of clamping to the edge: a common filter border, but not this
// exercise's. Every pixel on the border sees 0s where it should see copies of the edge, so its median
// is wrong whenever the 0s move it (at 1 x 1 the median of eight 0s and one pixel is 0).
extern "C" __global__ void median3x3(const float* __restrict__ inp, float* __restrict__ out, int height, int width)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height)
        return;
    float p[9];
    #pragma unroll
    for (int k = 0; k < 9; ++k) {
        const int yy = y + k / 3 - 1, xx = x + k % 3 - 1;
        p[k] = (yy >= 0 && yy < height && xx >= 0 && xx < width) ? inp[(long long)yy * width + xx] : 0.0f;
    }
    #pragma unroll
    for (int i = 0; i < 5; ++i)          // selection of the five smallest: p[4] ends as the fifth
        #pragma unroll
        for (int j = i + 1; j < 9; ++j) {
            const float lo = fminf(p[i], p[j]);
            p[j] = fmaxf(p[i], p[j]);
            p[i] = lo;
        }
    out[(long long)y * width + x] = p[4];
}
