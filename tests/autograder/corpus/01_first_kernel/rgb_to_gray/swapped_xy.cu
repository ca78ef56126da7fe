// expect: status=slow points=6 reason~="slower than needed"
// Column-major pixel order on a row-major image: still a bijection onto the same pixels, so the output is
// right, but neighbouring threads touch pixels `height` apart; the grader must call it correct but slow.
extern "C" __global__ void rgb_to_gray(const unsigned char* rgb, unsigned char* gray, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        int i = x * height + y;
        gray[i] = (unsigned char)((77u * rgb[3 * i] + 150u * rgb[3 * i + 1] + 29u * rgb[3 * i + 2] + 128u) >> 8);
    }
}
