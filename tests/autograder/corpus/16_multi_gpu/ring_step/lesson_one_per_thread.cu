// expect: status=failed points=0 reason~="wrong output"
// The lesson's ring_step_1 renamed: one float per thread and no loop, so it covers only the grid's threads of a
// chunk. The grader's launch gives a thread 4 floats (ceil(chunk / (4 x 512)) blocks, at most 1,024), so three
// quarters of every chunk longer than 512 floats stay as they were, already at n = 4097 (measured on an H200).
extern "C" __global__ void ring_step(float* mine, const float* left, int n, int rank, int world, int step)
{
    const int chunk = ((n + world - 1) / world + 3) / 4 * 4;
    const int c = ((rank - step - 1) % world + world) % world;
    const long long i = (long long)c * chunk + blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= (long long)(c + 1) * chunk || i >= n) return;
    mine[i] = step < world - 1 ? mine[i] + left[i] : left[i];
}
