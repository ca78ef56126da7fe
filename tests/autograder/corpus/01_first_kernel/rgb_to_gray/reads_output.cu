// expect: status=failed points=0 reason~="values wrong"
// `+=` on the output-only gray: it starts as the grader's 0xFF poison, so each pixel comes out one less.
extern "C" __global__ void rgb_to_gray(const unsigned char* rgb, unsigned char* gray, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        int i = y * width + x;
        gray[i] += (unsigned char)((77u * rgb[3 * i] + 150u * rgb[3 * i + 1] + 29u * rgb[3 * i + 2] + 128u) >> 8);
    }
}
