// expect: status=failed points=0 reason~="values wrong"
// Column-major index on row-major images: right only when the image is 1x1.
extern "C" __global__ void rgb_to_gray(const unsigned char* rgb, unsigned char* gray, int width, int height)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        int i = x * height + y;
        gray[i] = (unsigned char)((77u * rgb[3 * i] + 150u * rgb[3 * i + 1] + 29u * rgb[3 * i + 2] + 128u) >> 8);
    }
}
