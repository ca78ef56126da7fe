// expect: status=passed points=8
// The naive kernel written with float3: a float3 is 12 bytes, aligned to 4, so the load is still three
// 4-byte loads per thread, 12 bytes apart across the warp. The type does not make the access coalesced.
// On an H100 it runs at 0.95 of the reference all the same, as naive.cu does; the exercise grades correctness.
extern "C" __global__ void aos_to_soa(const float* __restrict__ src, float* __restrict__ xs,
                                      float* __restrict__ ys, float* __restrict__ zs, int n)
{
    const float3* rec = reinterpret_cast<const float3*>(src);
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < n; p += gridDim.x * blockDim.x) {
        const float3 r = rec[p];
        xs[p] = r.x;
        ys[p] = r.y;
        zs[p] = r.z;
    }
}
