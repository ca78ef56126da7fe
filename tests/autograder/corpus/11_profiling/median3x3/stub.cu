// expect: status=failed points=0 reason~="never written"
// The exercise's stub, untouched: out keeps the NaN the grader fills it with (no local memory, so the
// technique check passes and the outputs are what fail).
extern "C" __global__ void median3x3(const float* __restrict__ inp, float* __restrict__ out, int height, int width)
{
    // YOUR CODE HERE
}
