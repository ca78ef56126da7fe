// expect: status~="^(passed|slow)$"
// Calibration: right for every grid (a grid-stride loop), but 4-byte loads from the peer: the speed the
// 16-byte loads of the reference are measured against.
extern "C" __global__ void ring_step(float* mine, const float* left, int n, int rank, int world, int step)
{
    const int chunk = ((n + world - 1) / world + 3) / 4 * 4;
    const int c = ((rank - step - 1) % world + world) % world;
    const long long lo = (long long)c * chunk;
    const long long hi = min((long long)n, lo + chunk);
    const bool add = step < world - 1;
    for (long long i = lo + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < hi; i += (long long)gridDim.x * blockDim.x)
        mine[i] = add ? mine[i] + left[i] : left[i];
}
