// expect: status=slow points=6 reason~="slower than needed"
// Thread 0 of each block adds the block's chunks alone while the other threads wait: correct (each
// thread's running sum is short enough for float), but about 1 thread in 256 is loading, far too few bytes
// in flight to come near the copy bandwidth.
extern "C" __global__ void tile_reduce(const float* __restrict__ x, float* __restrict__ out, int n)
{
    if (threadIdx.x != 0)
        return;
    float s = 0.0f;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x; i < n; i += stride) {
        const long long end = i + blockDim.x < n ? i + blockDim.x : n;
        for (long long j = i; j < end; ++j)
            s += x[j];
    }
    atomicAdd(out, s);
}
