// expect: status=slow points=4 reason~="more than one stream"
// One stream (nothing overlaps) and blocks of one thread. The time without overlap runs the reference kernel
// over the whole array; launched with the student's block it became 1024 one-thread blocks crawling through
// 64 M elements, tens of milliseconds that made this unoverlapped pipeline look well overlapped. It is now
// launched with the reference's own block, so the ratio stays near 1 and there are no pipeline points.
extern "C" __global__ void process_chunk(const float* __restrict__ src,
                                         float* __restrict__ dst,
                                         int offset, int count)
{
    // LAUNCH = {"block": 1, "streams": 1, "chunks": 16}
    const int stride = gridDim.x * blockDim.x;
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < count; i += 4 * stride) {      // four independent loads in flight per thread
        const float a = src[offset + i], b = src[offset + i + stride];
        const float c = src[offset + i + 2 * stride], d = src[offset + i + 3 * stride];
        dst[offset + i] = a * (a * a - 0.5f);
        dst[offset + i + stride] = b * (b * b - 0.5f);
        dst[offset + i + 2 * stride] = c * (c * c - 0.5f);
        dst[offset + i + 3 * stride] = d * (d * d - 0.5f);
    }
    for (; i < count; i += stride) {
        const float x = src[offset + i];
        dst[offset + i] = x * (x * x - 0.5f);
    }
}
