// expect: status="compile error" points=0 reason~="line 8: `#include \"\.\./\.\./solutions/01_first_kernel/saxpy\.cu\"` reaches outside your source"
// Includes the reference solution. The decoy below is never compiled (#if 0) but satisfies the signature
// check, and the included file defines the real kernel: NVRTC alone would give full marks.
#if 0
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{}
#endif
#include "../../solutions/01_first_kernel/saxpy.cu"
