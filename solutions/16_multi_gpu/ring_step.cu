// ring_step: one step of a ring all-reduce (a sum) over `world` GPUs, run on GPU `rank`.
// mine: this GPU's n floats. left: the n floats of GPU (rank - 1 + world) % world, read over NVLink or PCIe
// through peer access. The data splits into world chunks of `chunk` elements, ceil(n / world) rounded up
// to a multiple of 4 (so every chunk starts 16-byte aligned); chunk c is [c * chunk, min((c + 1) * chunk, n)),
// and the last chunks may be short or empty. Contract: mine and left are whole buffers of the driver, each
// 16-byte aligned (cudaMalloc gives 256 bytes), so with chunks starting at multiples of 4 floats a chunk of
// mine or left is 16-byte aligned too and float4 needs no scalar fallback.
// In step s (0 <= s < 2 (world - 1)) this GPU works on chunk c = (rank - s - 1) mod world:
//   s <  world - 1 (reduce-scatter): mine[c] += left[c]
//   s >= world - 1 (all-gather):     mine[c]  = left[c]
// (world = 1 is tested too and follows the same formula: step 0 copies the one chunk, all of left.)
// The grader's driver runs step s on every GPU, and step s + 1 on a GPU once its left neighbour has finished
// step s; after the last step every GPU holds the sum. Launch: any grid and block; a grid-stride loop covers the chunk.
extern "C" __global__ void ring_step(float* __restrict__ mine, const float* __restrict__ left, int n, int rank,
                                     int world, int step)
{
    // ### BEGIN SOLUTION
    const int chunk = ((n + world - 1) / world + 3) / 4 * 4;
    const int c = ((rank - step - 1) % world + world) % world;
    const long long lo = (long long)c * chunk;
    const long long hi = min((long long)n, lo + chunk);
    if (lo >= hi) return;
    const bool add = step < world - 1;
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;

    // 16-byte loads: every chunk starts at a multiple of 4 elements, so one float4 per thread and step
    // keeps the most bytes in flight over the link for the fewest instructions.
    const long long n4 = (hi - lo) / 4;
    float4* m4 = reinterpret_cast<float4*>(mine + lo);
    const float4* l4 = reinterpret_cast<const float4*>(left + lo);
    for (long long i = tid; i < n4; i += stride) {
        float4 v = l4[i];
        if (add) {
            const float4 m = m4[i];
            v.x += m.x; v.y += m.y; v.z += m.z; v.w += m.w;
        }
        m4[i] = v;
    }
    for (long long i = lo + 4 * n4 + tid; i < hi; i += stride)   // the chunk's last 1-3 elements
        mine[i] = add ? mine[i] + left[i] : left[i];
    // ### END SOLUTION
}
