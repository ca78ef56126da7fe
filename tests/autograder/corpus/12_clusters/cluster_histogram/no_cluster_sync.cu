// expect: status~="^(failed|crashed)$" points=0
// The reference without its two cluster.sync() calls: a block may add into a peer's slice before the peer
// has zeroed it, and a block with no values left flushes its slice and exits while its peers' adds are
// still on their way (at n = 4097 two of the four blocks have no values at all). Counts are lost, or an
// add reaches the shared memory of a block that has exited: wrong at the small sizes, or a fault.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define BINS 16384
#define CLUSTER 4
#define SLICE (BINS / CLUSTER)

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
cluster_histogram(const unsigned int* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
    __shared__ unsigned int slice[SLICE];
    cg::cluster_group cluster = cg::this_cluster();
    for (int b = threadIdx.x; b < SLICE; b += blockDim.x)
        slice[b] = 0;
    __syncthreads();                  // the block's own zeroing is done; the peers' is not waited for

    auto count = [&](unsigned int v) {
        if (v < BINS)
            atomicAdd(cluster.map_shared_rank(&slice[v % SLICE], (int)(v / SLICE)), 1u);
    };
    const int stride = gridDim.x * blockDim.x;
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if ((reinterpret_cast<unsigned long long>(data) & 15) == 0) {
        const uint4* d4 = reinterpret_cast<const uint4*>(data);
        const int n4 = n / 4;
        for (int i = tid; i < n4; i += stride) {
            const uint4 a = d4[i];
            count(a.x); count(a.y); count(a.z); count(a.w);
        }
        for (int j = 4 * n4 + tid; j < n; j += stride)
            count(data[j]);
    } else {
        for (int j = tid; j < n; j += stride)
            count(data[j]);
    }
    __syncthreads();                  // the block's own adds only

    for (int b = threadIdx.x; b < SLICE; b += blockDim.x) {
        const unsigned int c = slice[b];
        if (c)
            atomicAdd(&hist[cluster.block_rank() * SLICE + b], c);
    }
}
