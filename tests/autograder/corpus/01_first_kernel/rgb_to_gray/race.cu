// expect: status=failed points=0 reason~="values wrong|differ between two runs"
// A shared-memory race: each block stages its gray values in a tile and writes out the row-mirrored
// ones, without __syncthreads() between the writes and the reads. The warps that own rows 4..7 are late
// (__nanosleep stands for work they do first), so rows 0..3 read stale shared memory.
extern "C" __global__ void rgb_to_gray(const unsigned char* rgb, unsigned char* gray, int width, int height)
{
    __shared__ unsigned char tile[8][32];
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    unsigned char g = 0;
    if (x < width && y < height) {
        int i = y * width + x;
        g = (unsigned char)((77u * rgb[3 * i] + 150u * rgb[3 * i + 1] + 29u * rgb[3 * i + 2] + 128u) >> 8);
    }
    if (threadIdx.y >= 4) __nanosleep(20000);
    tile[threadIdx.y][threadIdx.x] = g;
    // missing: __syncthreads();
    int ry = blockDim.y - 1 - threadIdx.y;
    int yy = blockIdx.y * blockDim.y + ry;
    if (x < width && yy < height) gray[yy * width + x] = tile[ry][threadIdx.x];
}
