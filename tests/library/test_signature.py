"""Parsing kernel signatures."""
import numpy as np

from course._signature import parse_kernels


def test_basic_and_qualifiers():
    """Are const, __restrict__, pointers and scalar types understood?"""
    k = parse_kernels('extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, '
                      'float *y) { }')["saxpy"]
    assert [(p.name, p.ctype, p.pointer, p.dtype) for p in k] == [
        ("n", "int", False, np.int32), ("a", "float", False, np.float32),
        ("x", "float", True, np.float32), ("y", "float", True, np.float32)]


def test_launch_bounds_comments_and_many_kernels():
    """Are kernels with __launch_bounds__ and comments between parameters found, and all of them?"""
    src = '''
    // __global__ void commented_out(int x)
    extern "C" __global__ void __launch_bounds__(256, 2) a(long long n, /* count */ size_t m) {}
    extern "C" __global__ void b(unsigned char* img, half2* h, __nv_bfloat16 const* w) {}
    '''
    ks = parse_kernels(src)
    assert list(ks) == ["a", "b"]
    assert [p.dtype for p in ks["a"]] == [np.int64, np.uint64]
    img, h, w = ks["b"]
    assert img.dtype == np.uint8 and h.dtype == np.float16 and h.vector == 2 and w.dtype == np.uint16


def test_templates_and_structs_pass_through():
    """Are template-dependent and struct parameters kept with an unknown dtype?"""
    ks = parse_kernels("template <typename T, int N> __global__ void t(const T* x, Foo<T, N> f, int n) {}")
    x, f, n = ks["t"]
    assert x.dtype is None and f.dtype is None and n.dtype == np.int32


def test_no_params():
    """Is an empty or void parameter list empty?"""
    assert parse_kernels('__global__ void k() {} __global__ void v(void) {}') == {"k": [], "v": []}
