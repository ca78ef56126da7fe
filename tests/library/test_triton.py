"""course.triton: Triton kernels compiled by Triton and launched by CuPy (chapter 15), and the %%triton magic.

CPU tier: argument types and specializations as Triton's launcher decides them, compiling without a GPU, the
magic and a chapter cell read back. GPU tier: a launch goes to CuPy's current stream (a CUDA graph captured on a
stream would fail on a launch to any other), right outputs, the [grid] syntax and autotuning."""
import os
import types

import pytest

import course
import course.triton as ct

triton = pytest.importorskip("triton", reason="Triton is optional (the course's triton extra)")

SRC = '''
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * a, mask=offs < n)
'''


def _fake(ptr, dtype):
    return types.SimpleNamespace(data=types.SimpleNamespace(ptr=ptr), dtype=dtype)


def test_available_says_what_it_is():
    ok, what = ct.available()
    assert ok and what == triton.__version__


def test_signature_follows_triton_launcher_rules():
    fn = ct.kernels_from_source(SRC, "t")["scale"]
    sig, cx, attrs = ct.signature_of(fn, (_fake(256, "float32"), _fake(1024 + 4, "float32"), 4096, 2.0),
                                     {"BLOCK": 128})
    assert sig == {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "a": "fp32", "BLOCK": "constexpr"}
    assert set(attrs) == {(0,), (2,)}        # the misaligned pointer and the float are not marked
    sig, _, attrs = ct.signature_of(fn, (ct.BF16(_fake(0, "uint16")), _fake(0, "float32"), 3 << 31, 1.0),
                                    {"BLOCK": 64})
    assert sig["x_ptr"] == "*bf16" and sig["n"] == "i64" and (2,) in attrs
    with pytest.raises(TypeError, match="BLOCK has no value"):
        ct.signature_of(fn, (_fake(0, "float32"), _fake(0, "float32"), 1, 1.0), {})
    with pytest.raises(TypeError, match="CuPy arrays"):
        ct.signature_of(fn, ("text", _fake(0, "float32"), 1, 1.0), {"BLOCK": 64})


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_compile_for_needs_no_gpu(arch):
    fn = ct.kernels_from_source(SRC, "t")["scale"]
    c = ct.compile_for(fn, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "a": "fp32", "BLOCK": "constexpr"},
                       {"BLOCK": 256}, arch=arch, num_warps=2)
    assert c.arch == arch and c.num_warps == 2 and c.params == 4 + 2   # Triton's two scratch pointers
    assert "FMUL" in course.sass_opcodes(c.sass())[c.name]
    assert "2 warps (64 threads)" in c.summary()


def test_the_magic_runs_the_cell_and_keeps_its_source():
    from course._magic import cell_sources, triton_cell
    ns = {}
    assert triton_cell("--name scale_cell", SRC, ns)
    assert isinstance(ns["scale"], triton.runtime.jit.JITFunction) and cell_sources["scale_cell"] == SRC
    assert "def scale" in ns["scale"].src          # Triton could read the function's text
    from IPython.core.error import UsageError
    with pytest.raises(UsageError, match="--name"):
        triton_cell("", SRC, ns)


def test_a_chapter_cell_is_read_back():
    ks = ct.lesson_kernels("15_triton", "vec_add")
    assert list(ks) == ["vec_add"]
    with pytest.raises(course.CourseError, match="no %%triton cell named"):
        ct.lesson_kernels("15_triton", "nope")


@pytest.mark.gpu
def test_a_launch_goes_to_cupys_current_stream():
    if not course.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    import cupy
    fn = ct.kernels_from_source(SRC, "t")["scale"]
    n = 1 << 20
    x = cupy.arange(n, dtype=cupy.float32)
    out = cupy.zeros_like(x)
    ct.launch(fn, n // 1024, x, out, n, 3.0, BLOCK=1024)       # compiled outside the capture
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        ct.launch(fn, n // 1024, x, out, n, 2.0, BLOCK=1024)    # any other stream: the capture fails
        graph = stream.end_capture()
    out.fill(0)
    graph.launch(stream)
    stream.synchronize()
    assert bool((out == 2 * x).all())
    ct.Launcher(fn)[(n // 512,)](x, out, n, -1.0, BLOCK=512, num_warps=2)
    cupy.cuda.Device().synchronize()
    assert bool((out == -x).all())


@pytest.mark.gpu
def test_autotune_times_every_config_and_picks_the_fastest():
    if not course.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    import cupy
    fn = ct.kernels_from_source(SRC, "t")["scale"]
    n = 1 << 24
    x, out = cupy.ones(n, dtype=cupy.float32), cupy.empty(n, dtype=cupy.float32)
    configs = [{"BLOCK": 32, "num_warps": 1}, {"BLOCK": 1024, "num_warps": 4}]
    best, times = ct.autotune(lambda BLOCK, num_warps: ct.launch(fn, n // BLOCK, x, out, n, 1.0, BLOCK=BLOCK,
                                                                  num_warps=num_warps), configs)
    assert set(times) == {"BLOCK=32, num_warps=1", "BLOCK=1024, num_warps=4"}
    assert best == min(configs, key=lambda c: times[", ".join(f"{k}={v}" for k, v in c.items())].median_ms)


def test_the_interpreter_refuses_a_bare_data_ptr_object():
    """Triton's interpreter (TRITON_INTERPRET=1) reads a tensor's storage, not only data_ptr() and dtype: a bare
    adapter is refused, which is why `HostArray` answers the storage calls too (tests below)."""
    import subprocess
    import sys
    script = SRC + '''
import numpy as np
class A:
    def __init__(self, a):
        self.a, self.dtype = a, a.dtype
    def data_ptr(self):
        return self.a.ctypes.data
x = np.arange(8, dtype=np.float32)
try:
    scale[(1,)](A(x), A(np.zeros(8, np.float32)), 8, 2.0, BLOCK=8)
    print("RAN")
except Exception as exc:
    print("REFUSED", type(exc).__name__)
'''
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert "REFUSED" in out.stdout, out.stdout + out.stderr[-2000:]


# Triton's interpreter on NumPy arrays (course.triton.interpret, HostArray): no GPU, no PyTorch

DOT_SRC = '''
import triton
import triton.language as tl


@triton.jit
def tile_dot(a_ptr, b_ptr, c_ptr, k, T: tl.constexpr):
    r = tl.arange(0, T)
    acc = tl.zeros((T, T), dtype=tl.float32)
    for k0 in range(0, k, T):     # a loop bound known only at run time (NumPy 2.4's int() on the interpreter)
        a = tl.load(a_ptr + r[:, None] * k + k0 + r[None, :])
        b = tl.load(b_ptr + (k0 + r[:, None]) * T + r[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + r[:, None] * T + r[None, :], acc + tl.max(acc, axis=1)[:, None] * 0)
'''


def test_interpret_runs_a_kernel_on_numpy_arrays():
    """Does scale() give a * x on NumPy arrays, tail masked, without a GPU and without importing PyTorch?"""
    import sys

    import numpy as np
    fn = ct.kernels_from_source(SRC, "t")["scale"]
    x = np.arange(1000, dtype=np.float32)
    out = np.full(1024, -1.0, dtype=np.float32)
    had_torch = "torch" in sys.modules        # another test of the session may have imported it
    ct.interpret(fn, 4, x, out, 1000, 2.5, BLOCK=256)
    assert np.array_equal(out[:1000], 2.5 * x) and (out[1000:] == -1).all()
    import importlib.util
    # where PyTorch is installed Triton's interpreter imports it by itself; where it is not, nothing needs it
    assert had_torch or importlib.util.find_spec("torch") is not None or "torch" not in sys.modules


def test_interpret_runs_loops_dots_and_library_functions():
    """A runtime loop bound, tl.dot on FP16 and FP32, and tl.max (a @triton.jit function of Triton's own)."""
    import numpy as np
    fn = ct.kernels_from_source(DOT_SRC, "d")["tile_dot"]
    rng = np.random.default_rng(0)
    for dt in (np.float16, np.float32):
        a, b = rng.standard_normal((16, 48)).astype(dt), rng.standard_normal((48, 16)).astype(dt)
        c = np.zeros((16, 16), dtype=np.float32)
        ct.interpret(fn, 1, a, b, c, 48, T=16)
        np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_interpreted_bf16_dot_multiplies_bits():
    """Triton 3.6's interpreter does not convert BF16 for tl.dot (triton#11584), as the chapter says. If this
    starts giving the right product, a Triton release fixed it: update chapter 15's sentence."""
    import numpy as np
    fn = ct.kernels_from_source(DOT_SRC, "d")["tile_dot"]
    a = np.ones((16, 16), dtype=np.float32)
    bits = (a.view(np.uint32) >> 16).astype(np.uint16)     # 1.0 in BF16
    c = np.zeros((16, 16), dtype=np.float32)
    ct.interpret(fn, 1, ct.HostArray(bits, "bfloat16"), ct.HostArray(bits.copy(), "bfloat16"), c, 16, T=16)
    assert not np.allclose(c, 16.0)


def test_interpreting_leaves_the_compiler_as_it_was():
    """After an interpreted run, Triton's library functions are JITFunctions again and a kernel that calls one
    compiles for the GPU in the same process."""
    import numpy as np
    fn = ct.kernels_from_source(DOT_SRC, "d")["tile_dot"]
    a = np.ones((16, 16), dtype=np.float16)
    ct.interpret(fn, 1, a, a.copy(), np.zeros((16, 16), np.float32), 16, T=16)
    assert isinstance(triton.language.max, triton.runtime.jit.JITFunction)
    c = ct.compile_for(fn, {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32", "k": "i32", "T": "constexpr"},
                       {"T": 16}, arch="sm_80")
    assert "HMMA" in course.sass_opcodes(c.sass())[c.name]


def test_interpret_refuses_what_it_cannot_run():
    import numpy as np
    with pytest.raises(ValueError, match="contiguous"):
        ct.HostArray(np.zeros((4, 4), dtype=np.float32)[:, 1])
    with pytest.raises(TypeError, match="@triton.jit"):
        ct.interpret(print, 1)
