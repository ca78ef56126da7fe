// expect: status=failed points=0 reason~="never written"
// The exercise's stub, untouched: means keeps the NaN the grader fills it with.
extern "C" __global__ void row_means(const float* __restrict__ inp, float* __restrict__ means, int rows, int cols)
{
    // YOUR CODE HERE
}
