// expect: status=passed points=10
// LAUNCH = {"block": [16, 16]}
// Correct with a student-chosen 16x16 block (LAUNCH data in a comment).
extern "C" __global__ void rgb_to_gray(const unsigned char* rgb, unsigned char* gray, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        int i = y * width + x;
        gray[i] = (unsigned char)((77u * rgb[3 * i] + 150u * rgb[3 * i + 1] + 29u * rgb[3 * i + 2] + 128u) >> 8);
    }
}
