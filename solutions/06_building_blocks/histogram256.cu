// histogram256: hist[b] += how many i < n have data[i] == b, for the 256 bins b = 0..255.
// hist arrives zeroed; values outside [0, 256) are skipped. Launch: a capped grid with a
// grid-stride loop, so each block counts many elements before it adds its counts to hist.
extern "C" __global__ void histogram256(const int* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
    // ### BEGIN SOLUTION
    // Privatized: the block counts into 256 shared-memory counters (on-chip atomics), then adds its
    // counts to the global histogram: 256 global atomics per block instead of one per element.
    __shared__ unsigned int local[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x)
        local[b] = 0;
    __syncthreads();

    auto count = [&](int v) {
        if ((unsigned)v < 256u)          // one compare rejects negatives and values >= 256
            atomicAdd(&local[v], 1u);
    };
    const int stride = gridDim.x * blockDim.x;
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if ((reinterpret_cast<unsigned long long>(data) & 15) == 0) {
        // int4 loads, two in flight per thread: reading the input is the floor, keep it streaming
        const int4* d4 = reinterpret_cast<const int4*>(data);
        const int n4 = n / 4;
        int i = tid;
        for (; i + stride < n4; i += 2 * stride) {
            const int4 a = d4[i], b = d4[i + stride];
            count(a.x); count(a.y); count(a.z); count(a.w);
            count(b.x); count(b.y); count(b.z); count(b.w);
        }
        for (; i < n4; i += stride) {
            const int4 a = d4[i];
            count(a.x); count(a.y); count(a.z); count(a.w);
        }
        for (int j = 4 * n4 + tid; j < n; j += stride)   // the last n % 4 values
            count(data[j]);
    } else {
        for (int j = tid; j < n; j += stride)
            count(data[j]);
    }
    __syncthreads();

    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        const unsigned int c = local[b];
        if (c)
            atomicAdd(&hist[b], c);
    }
    // ### END SOLUTION
}
