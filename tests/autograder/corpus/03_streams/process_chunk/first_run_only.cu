// expect: status=failed points=0 reason~="wrong output from the pipeline"
// Works through the first pipeline run (16 chunks of 4 Mi elements, 1024 blocks each), then lets every
// later block return at once: the device output still held the first run's values and the timed runs saw
// the same inputs unchecked, so the copies alone were timed. Every run now gets fresh inputs and a
// poisoned output, and every run's output is checked.
__device__ unsigned int blocks_seen;

extern "C" __global__ void process_chunk(const float* __restrict__ src,
                                         float* __restrict__ dst,
                                         int offset, int count)
{
    // LAUNCH = {"block": 256, "streams": 4, "chunks": 16}
    __shared__ unsigned int seen;
    if (count == (1 << 22)) {
        if (threadIdx.x == 0)
            seen = atomicAdd(&blocks_seen, 1u);
        __syncthreads();
        if (seen >= 16u * 1024u)
            return;
    }
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const float x = src[offset + i];
        dst[offset + i] = x * (x * x - 0.5f);
    }
}
