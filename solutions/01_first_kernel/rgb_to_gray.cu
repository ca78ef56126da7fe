// rgb_to_gray: 8-bit interleaved RGB (height x width x 3) to 8-bit gray (height x width), row-major.
// gray = (77 R + 150 G + 29 B + 128) >> 8: the BT.601 weights 0.299, 0.587, 0.114 in 8.8 fixed point,
// rounded, so every correct kernel gives exactly the same bytes. One thread per pixel on a 2D grid;
// the bounds test matters because width and height are rarely multiples of the block's sides.
extern "C" __global__ void rgb_to_gray(const unsigned char* __restrict__ rgb, unsigned char* __restrict__ gray,
                                       int width, int height)
{
    // BEGIN SOLUTION
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x < width && y < height) {
        int i = y * width + x;
        unsigned int r = rgb[3 * i], g = rgb[3 * i + 1], b = rgb[3 * i + 2];
        gray[i] = (unsigned char)((77u * r + 150u * g + 29u * b + 128u) >> 8);
    }
    // END SOLUTION
}
