// requires: sm_90
// cluster_histogram: hist[b] += how many i < n have data[i] == b, for the 16,384 bins b = 0..16383.
// hist arrives zeroed; values outside [0, 16384) are skipped. 16,384 counters take 64 KiB, more than
// one block's static shared memory (48 KiB), so no block can privatize the whole histogram alone.
// A cluster of CLUSTER blocks can: block r of the cluster keeps bins [r * SLICE, (r + 1) * SLICE) in its
// shared memory, and every block of the cluster adds into whichever block owns a value's bin, through
// distributed shared memory (DSMEM).
// Launch: a grid that is a multiple of CLUSTER (the spec's launch makes it so), any block size that is a
// multiple of 32; a grid-stride loop covers any n.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

#define BINS 16384
#ifndef CLUSTER
#define CLUSTER 4                     // 2 also fits (32 KiB a block); 4 leaves room for more blocks per SM
#endif
#define SLICE (BINS / CLUSTER)        // bins each block owns: 4096 x 4 bytes = 16 KiB of shared memory

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
cluster_histogram(const unsigned int* __restrict__ data, unsigned int* __restrict__ hist, int n)
{
    // ### BEGIN SOLUTION
    __shared__ unsigned int slice[SLICE];
    cg::cluster_group cluster = cg::this_cluster();

    for (int b = threadIdx.x; b < SLICE; b += blockDim.x)
        slice[b] = 0;
    // A peer may add into this slice as soon as it passes this barrier: every slice of the cluster must
    // be zeroed before any block counts, or a late zeroing wipes counts that already arrived.
    cluster.sync();

    auto count = [&](unsigned int v) {
        if (v < BINS)                 // unsigned: one compare keeps any stray value out of the slices
            atomicAdd(cluster.map_shared_rank(&slice[v % SLICE], (int)(v / SLICE)), 1u);
    };
    const int stride = gridDim.x * blockDim.x;
    const int tid = blockIdx.x * blockDim.x + threadIdx.x;
    if ((reinterpret_cast<unsigned long long>(data) & 15) == 0) {
        // uint4 loads, two in flight per thread: the input is read once, so keep it streaming
        const uint4* d4 = reinterpret_cast<const uint4*>(data);
        const int n4 = n / 4;
        int i = tid;
        for (; i + stride < n4; i += 2 * stride) {
            const uint4 a = d4[i], b = d4[i + stride];
            count(a.x); count(a.y); count(a.z); count(a.w);
            count(b.x); count(b.y); count(b.z); count(b.w);
        }
        for (; i < n4; i += stride) {
            const uint4 a = d4[i];
            count(a.x); count(a.y); count(a.z); count(a.w);
        }
        for (int j = 4 * n4 + tid; j < n; j += stride)    // the last n % 4 values
            count(data[j]);
    } else {
        for (int j = tid; j < n; j += stride)
            count(data[j]);
    }
    // Two guarantees from one barrier: every peer's adds into this slice have landed before it is read
    // below, and no block exits (releasing its shared memory) while a peer may still be adding into it.
    cluster.sync();

    // Only this block's own slice from here on: one global atomic per non-empty bin, coalesced.
    for (int b = threadIdx.x; b < SLICE; b += blockDim.x) {
        const unsigned int c = slice[b];
        if (c)
            atomicAdd(&hist[cluster.block_rank() * SLICE + b], c);
    }
    // ### END SOLUTION
}
