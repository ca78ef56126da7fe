// expect: status="compile error" points=0 reason~="line 4: `#include \"\.\./\.\./solutions/01_first_kernel/saxpy\.cu\"` reaches outside your source"
// A line splice (backslash-newline) inside the directive name: the compiler joins the lines before it
// reads directives, so this is an #include, although no line of the file contains "#include".
#inc\
lude "../../solutions/01_first_kernel/saxpy.cu"
#if 0
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)
{}
#endif
