"""Compiling with NVRTC without a GPU (the CPU tier compiles every kernel this way)."""
import pytest

import course
from course._compile import _fix_cubin, parse_ptxas_log

SAXPY = r'''
extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
'''

HEADERS = r'''
#include <mma.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cuda/pipeline>
using namespace nvcuda;
extern "C" __global__ void tile(const half* a, const half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
    __nv_bfloat16 h = __float2bfloat16(1.0f);
    cooperative_groups::this_thread_block().sync();
    if (threadIdx.x == 99) c[0] = __bfloat162float(h);
}
'''


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_compiles_for_each_arch_with_resources(arch):
    """Does a kernel compile for each course arch with no GPU, with a resource report?"""
    p = course.compile_for_arch(SAXPY, arch)
    assert p.cubin[:4] == b"\x7fELF" and ".entry saxpy" in p.ptx
    r = p.resources["saxpy"]
    assert r.registers and r.registers > 0 and r.local_bytes == 0 and r.spill_stores == 0


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_wmma_bf16_cg_pipeline_headers_resolve(arch):
    """Do the WMMA (crt/mma.h), bf16, cooperative-groups and cuda/pipeline headers resolve?"""
    assert not course.missing_headers(), course.missing_headers()
    p = course.compile_for_arch(HEADERS, arch)
    assert "wmma" in p.ptx or "mma" in p.ptx


def test_cache_keeps_the_resource_report():
    """Is the ptxas report still there on a cache hit (it is empty on CuPy's)?"""
    a = course.compile_for_arch(SAXPY, "sm_80")
    b = course.compile_for_arch(SAXPY, "sm_80")
    assert b.resources == a.resources and b.cubin == a.cubin and "Used" in b.log


def test_compile_error_shows_numbered_source():
    """Does a compile error show the offending line numbered and marked, with the log?"""
    bad = SAXPY.replace("a * x[i]", "a * xx[i]")
    with pytest.raises(course.CompileError) as ei:
        course.compile_for_arch(bad, "sm_80", name="saxpy.cu")
    msg = str(ei.value)
    assert "could not compile saxpy.cu for sm_80" in msg
    assert ">   4 |" in msg and "(1 error)" in msg and "xx[i]" in msg
    assert 'identifier "xx" is undefined' in msg
    assert "Options:" in msg and "-arch=sm_80" in msg


def test_options_and_name_expressions():
    """Do -D options reach the source, and do templates resolve through name expressions?"""
    src = "template <int N> __global__ void fill(float* y) { y[threadIdx.x] = N; }"
    p = course.compile_for_arch(src, "sm_80", name_expressions=["fill<7>"], options=["-DUNUSED=1"])
    assert p.lowered_names["fill<7>"].startswith("_Z")
    assert p.resources["fill<7>"].registers is not None


def test_arch_normalization():
    """Are arch spellings normalized, and a bad one refused naming the argument?"""
    assert course.normalize_arch((8, 6)) == "sm_86"
    assert course.normalize_arch("compute_90a") == "sm_90a"
    assert course.arch_cc("sm_90a") == (9, 0) and course.arch_cc("sm_100") == (10, 0)
    with pytest.raises(ValueError, match="arch"):
        course.normalize_arch("hopper")


def test_fix_cubin_restores_dropped_byte():
    """Is a cubin missing its last byte padded back to the length its ELF headers give?"""
    p = course.compile_for_arch(SAXPY, "sm_90")
    full = _fix_cubin(p.cubin)
    assert full == p.cubin  # already fixed on the way out
    assert _fix_cubin(full[:-1]) == full[:-1] + b"\0"


def test_parse_ptxas_log():
    """Are registers, shared memory, stack and spills read from a ptxas log?"""
    log = """ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]"""
    r = parse_ptxas_log(log)["k"]
    assert (r.registers, r.static_smem, r.local_bytes, r.spill_stores, r.spill_loads, r.const_bytes) == \
        (40, 4096, 16, 8, 4, 380)
    assert "SPILLS" in r.summary()


def test_pip_only_headers_are_complete(tmp_path):
    """With only pip's CUDA wheels searched (no toolkit), do WMMA, bf16, cooperative groups and
    cuda/pipeline still compile? This is the layout of a pip-only or Colab install."""
    import subprocess
    import sys
    code = ("import course, sys; d = course.include_dirs(); assert d and all('site-packages' in x or "
            "'dist-packages' in x for x in d), d; m = course.missing_headers(); assert not m, m; "
            "sys.path.insert(0, 'tests/library'); from test_compile import HEADERS; "
            "[course.compile_for_arch(HEADERS, a, use_cache=False) for a in ('sm_75', 'sm_80', 'sm_90')]; "
            "print('ok')")
    env = {**__import__("os").environ, "COURSE_HEADERS": "pip", "COURSE_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=__import__("pathlib").Path(__file__).resolve().parents[2])
    if "could not be loaded" in r.stderr:
        pytest.skip("no NVRTC in this environment")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]


def test_arch_specific_targets_run_on_their_own_gpu_only():
    """Is code for sm_90a run by an sm_90 GPU only, code for sm_80 by sm_80 and newer, and is the target to
    build for the arch-specific one where the GPU is its own?"""
    import course
    assert course.arch_runs_on("sm_90a", (9, 0)) and not course.arch_runs_on("sm_90a", (10, 0))
    assert not course.arch_runs_on("sm_90a", (8, 0)) and course.arch_runs_on("sm_80", (10, 0))
    assert not course.arch_runs_on("sm_80", (7, 5))
    assert course.target_for("sm_90", "sm_90a") == "sm_90a" and course.target_for("sm_90", "sm_80") == "sm_90"
    assert course.target_for("sm_80", "sm_90a") is None and course.target_for("sm_100", "sm_90a") is None
    assert course.target_for("sm_75", None) == "sm_75"
