// expect: status=slow points=4 reason~="more than one stream"
// One stream, so nothing overlaps, and a kernel that spins 40 ms only when it is handed the whole 256 MiB
// array at once. The time without overlap used to be measured with the student's kernel over the whole
// array, so the spin inflated it and the unoverlapped pipeline scored as a perfect one (ratio ~0.2). It is
// now the reference kernel's time: the ratio stays ~1.0 and there are no pipeline points.
extern "C" __global__ void process_chunk(const float* __restrict__ src,
                                         float* __restrict__ dst,
                                         int offset, int count)
{
    // LAUNCH = {"block": 256, "streams": 1, "chunks": 16}
    if (count >= (1 << 25) && blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        } while (t - t0 < 40000000ull);
    }
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const float x = src[offset + i];
        dst[offset + i] = x * (x * x - 0.5f);
    }
}
