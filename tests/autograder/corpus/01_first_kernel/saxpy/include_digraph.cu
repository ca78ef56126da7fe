// expect: status="compile error" points=0 reason~="line 4: `#include \"\.\./\.\./solutions/01_first_kernel/saxpy\.cu\"` reaches outside your source"
// The digraph %: is the same token as #, and a comment between it and the directive name is one space:
// this is an #include.
%: /* nothing to see */ include "../../solutions/01_first_kernel/saxpy.cu"
#if 0
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{}
#endif
