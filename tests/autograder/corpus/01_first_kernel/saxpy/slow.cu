// expect: status=slow points=6 reason~="slower than needed"
// Correct, about 2x slower: even elements first, then odd ones. Each pass touches every 32-byte sector
// of x and y but uses half of it, and the arrays are far larger than L2, so all data crosses the memory
// bus twice.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int half = (n + 1) / 2;
    if (t < n) {
        int i = t < half ? 2 * t : 2 * (t - half) + 1;
        y[i] = a * x[i] + y[i];
    }
}
