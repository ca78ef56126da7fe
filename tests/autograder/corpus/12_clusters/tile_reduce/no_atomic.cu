// expect: status=failed points=0 reason~="out: 1 of 1 values wrong"
// Each block stores its total into *out instead of adding it: the last block to write wins. Right while
// the grid is one block (n <= 4096 at the default launch), wrong from n = 4097 on.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

extern "C" __global__ void tile_reduce(const float* __restrict__ x, float* __restrict__ out, int n)
{
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    __shared__ float warp_totals[32];
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        s += x[i];
    s = cg::reduce(warp, s, cg::plus<float>());
    if (warp.thread_rank() == 0)
        warp_totals[warp.meta_group_rank()] = s;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        const float v = warp.thread_rank() < warp.meta_group_size() ? warp_totals[warp.thread_rank()] : 0.0f;
        const float total = cg::reduce(warp, v, cg::plus<float>());
        if (warp.thread_rank() == 0)
            *out = total;
    }
}
