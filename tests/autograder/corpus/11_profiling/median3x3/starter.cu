// expect: status=failed points=0 reason~="no local memory.*LDL"
// The notebook's starter (median3x3_starter), renamed: right at every size, but its insertion sort
// indexes v[] with values known only at run time, so v lives in local memory (LDL/STL in its SASS). The
// exercise requires no_local_memory: it fails before it runs.
extern "C" __global__ void median3x3(const float* __restrict__ inp, float* __restrict__ out,
                                             int height, int width)
{
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height)
        return;
    float v[9];
    int k = 0;
    for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
            const int yy = min(max(y + dy, 0), height - 1);
            const int xx = min(max(x + dx, 0), width - 1);
            v[k++] = inp[(long long)yy * width + xx];
        }
    // insertion sort: how far each value moves depends on the data
    for (int i = 1; i < 9; ++i) {
        const float key = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > key) {
            v[j + 1] = v[j];
            --j;
        }
        v[j + 1] = key;
    }
    out[(long long)y * width + x] = v[4];
}
