// expect: status=failed points=0 reason~="never written"
// The exercise's stub, untouched: y keeps the NaN the grader fills it with.
#define TERMS 32

extern "C" __global__ void damped_waves(const float* __restrict__ x, const float* __restrict__ d,
                                        const float* __restrict__ w, const float* __restrict__ c,
                                        float* __restrict__ y, int n)
{
    // YOUR CODE HERE
}
