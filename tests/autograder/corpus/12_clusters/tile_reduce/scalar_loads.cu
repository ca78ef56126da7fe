// expect: status~="^(passed|slow)$"
// Calibration: a plain cooperative-groups reduction, one float load per thread and iteration, one atomic
// per block; what a chapter lesson kernel of this form would score under the exercise's launch.
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
            atomicAdd(out, total);
    }
}
