// expect: status~="^(crashed|failed)$" points=0
// The chapter's hist_cluster as it is, renamed: it keeps its slice in dynamic shared memory, and the
// exercise's launch gives none (0 bytes), so its first store to the slice is out of range: a fault, or at
// best counts written outside the block's shared memory. This is why SPEC_FORMAT.md's lesson rule does not
// reach it (autograder/specs/12_clusters.py); declared static (__shared__ unsigned int slice[SLICE]) it is a
// correct cluster kernel.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#ifndef CLUSTER
#define CLUSTER 4
#endif
#define BINS 16384
#define SLICE (BINS / CLUSTER)

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
cluster_histogram(const unsigned int* __restrict__ data, unsigned int* hist, int n)
{
    extern __shared__ unsigned int slice[];
    cg::cluster_group cluster = cg::this_cluster();
    for (int b = threadIdx.x; b < SLICE; b += blockDim.x)
        slice[b] = 0;
    cluster.sync();
    const int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const unsigned int v = data[i];
        if (v < BINS)
            atomicAdd(cluster.map_shared_rank(slice, v / SLICE) + v % SLICE, 1u);
    }
    cluster.sync();
    const unsigned int first = cluster.block_rank() * SLICE;
    for (int b = threadIdx.x; b < SLICE; b += blockDim.x)
        if (slice[b])
            atomicAdd(&hist[first + b], slice[b]);
}
