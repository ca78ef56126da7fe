// expect: status~="^(failed|crashed)$" points=0
// A shared-memory tile of the block's 8 x 32 pixels and their one-pixel border, loaded by the block's 256
// threads in a linear loop (340 floats: threads 0..83 load a second one), then read without __syncthreads():
// a thread reads nine floats that other warps load, often before they have stored them, and finds what an
// earlier block left there. Warp 7's last rows come from the second loads of warps 0..2, the latest of all.
// No local memory, so it is graded on its outputs, which a GPU run confirms are wrong.
#define TW 34
#define TH 10
extern "C" __global__ void median3x3(const float* __restrict__ inp, float* __restrict__ out, int height, int width)
{
    __shared__ float tile[TH][TW];
    const int x0 = blockIdx.x * 32 - 1, y0 = blockIdx.y * 8 - 1;
    const int tid = threadIdx.y * 32 + threadIdx.x;
    for (int i = tid; i < TH * TW; i += 256) {
        const int yy = min(max(y0 + i / TW, 0), height - 1);
        const int xx = min(max(x0 + i % TW, 0), width - 1);
        tile[i / TW][i % TW] = inp[(long long)yy * width + xx];
    }
    // missing: __syncthreads();
    const int x = blockIdx.x * 32 + threadIdx.x, y = blockIdx.y * 8 + threadIdx.y;
    if (x >= width || y >= height)
        return;
    float p0 = tile[threadIdx.y][threadIdx.x], p1 = tile[threadIdx.y][threadIdx.x + 1];
    float p2 = tile[threadIdx.y][threadIdx.x + 2], p3 = tile[threadIdx.y + 1][threadIdx.x];
    float p4 = tile[threadIdx.y + 1][threadIdx.x + 1], p5 = tile[threadIdx.y + 1][threadIdx.x + 2];
    float p6 = tile[threadIdx.y + 2][threadIdx.x], p7 = tile[threadIdx.y + 2][threadIdx.x + 1];
    float p8 = tile[threadIdx.y + 2][threadIdx.x + 2];
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
