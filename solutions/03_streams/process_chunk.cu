// process_chunk: dst[i] = x * (x * x - 0.5f) with x = src[i], for offset <= i < offset + count only
// One launch per chunk of a copy-compute-copy pipeline: writing outside the chunk would race with the
// copies of other chunks in flight on other streams.
extern "C" __global__ void process_chunk(const float* __restrict__ src,
                                         float* __restrict__ dst,
                                         int offset, int count)
{
    // ### BEGIN SOLUTION
    // LAUNCH = {"block": 256, "streams": 4, "chunks": 16}
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) {
        const float x = src[offset + i];
        dst[offset + i] = x * (x * x - 0.5f);
    }
    // ### END SOLUTION
}
