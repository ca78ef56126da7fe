// expect: status=failed points=0 reason~="drawn at random for this grading"
// Right at every size the spec lists (1, 2, 33, 1000003, and an odd one larger than L2), wrong whenever n
// is a multiple of 4: only the hidden sizes drawn for each grading can catch it.
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (n % 4 == 0 && i == n - 1) ? 0.0f : a * x[i] + y[i];
}
