"""The library on a real GPU (marker `gpu`: skipped without one; the `both_tiers` test runs everywhere)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import course

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.gpu

WMMA_TILE = r'''#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void tile(const half* a, const half* b, float* c) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}'''

SAXPY = r'''
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = a * x[i] + y[i];
}
'''


@pytest.fixture(scope="module")
def cp():
    if not course.gpu_available():
        pytest.skip("no CUDA GPU")
    import cupy
    return cupy


def test_launch_with_python_ints_and_odd_size(cp):
    """Does a Python int reach an `int` parameter correctly (not as 64 bits) at n = 1,000,003?"""
    k = course.compile(SAXPY).kernel("saxpy")
    n = 1_000_003
    x = cp.random.random(n, dtype=cp.float32)
    y = cp.random.random(n, dtype=cp.float32)
    ref = 2.5 * x.get() + y.get()
    k(course.grid_for(n, 256), 256, n, 2.5, x, y)
    course.assert_close(y, ref)


def test_argument_errors_name_the_parameter(cp):
    """Are a wrong dtype, a host array and an overflowing int refused with the parameter's name?"""
    k = course.compile(SAXPY).kernel("saxpy")
    x = cp.zeros(10, cp.float64)
    y = cp.zeros(10, cp.float32)
    with pytest.raises(course.LaunchError, match="const float\\* __restrict__ x.*float32.*float64"):
        k(1, 32, 10, 1.0, x, y)
    with pytest.raises(course.LaunchError, match="NumPy array"):
        k(1, 32, 10, 1.0, np.zeros(10, np.float32), y)
    with pytest.raises(course.LaunchError, match="does not fit"):
        k(1, 32, 2**40, 1.0, y, y)
    with pytest.raises(course.LaunchError, match="2048 threads"):
        k(1, 2048, 10, 1.0, y, y)


def test_resources_and_occupancy(cp):
    """Does the driver's resource report agree with ptxas, and is occupancy positive?"""
    m = course.compile(SAXPY)
    r = m.kernel("saxpy").resources
    assert r.registers == m.program.resources["saxpy"].registers
    assert r.max_threads_per_block == 1024
    assert m.kernel("saxpy").occupancy(256) >= 4
    assert "registers" in m.report()


def test_big_dynamic_shared_memory(cp):
    """Does a launch with more than 48 KiB of dynamic shared memory opt in and run?"""
    src = r'''extern "C" __global__ void fill(float* out, int n) {
        extern __shared__ float buf[];
        for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = i;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = buf[n - 1 - i];
    }'''
    k = course.compile(src).kernel("fill")
    n = 80 * 1024 // 4
    out = cp.full(n, cp.nan, cp.float32)
    k(1, 256, out, n, shared_mem=n * 4)
    course.assert_close(out, np.arange(n, dtype=np.float32)[::-1])


def run_wmma_tile():
    """One 16x16x16 WMMA tile checked against NumPy; the module, for its SASS."""
    import cupy as cp
    m = course.compile(WMMA_TILE)
    a = cp.random.standard_normal((16, 16)).astype(cp.float16)
    b = cp.random.standard_normal((16, 16)).astype(cp.float16)
    c = cp.full((16, 16), cp.nan, cp.float32)
    m.tile(1, 32, a, b, c)
    course.assert_close(c, a.get().astype(np.float32) @ b.get().astype(np.float32), rtol=1e-3)
    return m


def test_wmma_runs_and_sass_has_hmma(cp):
    """Does a WMMA kernel compile from the pip headers, give the right tile, and show HMMA in SASS?"""
    m = run_wmma_tile()
    try:
        sass = m.sass()
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    assert "HMMA" in sass


def test_benchmark_copy_matches_cupy_timer(cp):
    """Is the course's copy bandwidth within 5% of CuPy's own timer on the same copy?"""
    from cupyx.profiler import benchmark as cupy_bench
    n = 1 << 27
    src = cp.random.random(n)
    dst = cp.empty_like(src)
    r = course.benchmark(lambda: cp.copyto(dst, src), name="copy")
    ours = r.gbps(2 * src.nbytes)
    theirs = cupy_bench(cp.copyto, (dst, src), n_repeat=30, n_warmup=3)
    t = float(np.median(theirs.gpu_times[0]))
    assert abs(ours / (2 * src.nbytes / t / 1e9) - 1) < 0.05
    assert r.n >= 10
    assert r.sm_clock_mhz is None or r.sm_clock_mhz > 0


def test_gemm_operand_swap_is_row_major(cp):
    """Does the cuBLAS wrapper compute row-major A @ B for non-square shapes, in FP32 and BF16?"""
    from course.cublas import from_bf16, gemm, to_bf16
    a = cp.random.standard_normal((37, 53), dtype=cp.float32)
    b = cp.random.standard_normal((53, 29), dtype=cp.float32)
    course.assert_close(gemm(a, b, compute="fp32"), a.get() @ b.get())
    out = from_bf16(gemm(to_bf16(a), to_bf16(b), compute="bf16"))
    course.assert_close(out, a.get() @ b.get(), rtol=3e-2, atol=0.3)


def test_batched_gemm_with_and_without_a_transposed_b(cp):
    """Does gemm_batched compute a[i] @ b[i] and a[i] @ b[i]^T (K read as stored: chapter 14's S = Q K^T) for
    each of a batch of non-square row-major matrices, with alpha applied, and refuse 2-D operands?"""
    from course.cublas import from_bf16, gemm_batched, to_bf16
    a = cp.random.standard_normal((3, 37, 53), dtype=cp.float32)
    b = cp.random.standard_normal((3, 53, 29), dtype=cp.float32)
    course.assert_close(gemm_batched(a, b, compute="fp32", alpha=0.5), 0.5 * (a.get() @ b.get()), rtol=1e-5)
    bt = cp.ascontiguousarray(b.transpose(0, 2, 1))
    got = gemm_batched(to_bf16(a), to_bf16(bt), compute="bf16_f32", trans_b=True)
    want = from_bf16(to_bf16(a)).get().astype(np.float64) @ from_bf16(to_bf16(b)).get().astype(np.float64)
    course.assert_close(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="3-D batch"):
        gemm_batched(a[0], b[0])


def test_preflight_on_gpu(cp, capsys):
    """Does preflight show the GPU, versions, feature gates and ceilings?"""
    text = course.preflight()
    d = course.device_info()
    assert d.name in text and "NVRTC" in text and "Features:" in text and "copy" in text


def pip_header_dirs(env: dict) -> list:
    """The include folders the course finds when it searches the pip wheels only (COURSE_HEADERS=pip)."""
    r = subprocess.run([sys.executable, "-c", "import json, course; print(json.dumps(course.include_dirs()))"],
                       capture_output=True, text=True, env={**env, "COURSE_HEADERS": "pip"}, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def pip_header_problem(dirs) -> str | None:
    """Why a pip-only header build cannot be tried with these include folders, or None when it can.

    A GPU machine's Python may bring CuPy with only some of the header wheels (seen: no crt/mma.h and no
    CCCL) and take the rest from a toolkit. That machine lacks the course's pip install, which is a
    reason to skip; a complete pip layout whose build still fails is a failure.
    """
    if not dirs:
        return "no CUDA header wheels in this Python: its CUDA headers come from a toolkit or conda"
    missing = course.missing_headers(tuple(dirs))
    if missing:
        return ("the CUDA header wheels in this Python are incomplete, so a pip-only build cannot be tried; "
                "missing: " + "; ".join(f"{h} [{src}]" for h, src in missing.items())
                + f"; searched: {', '.join(dirs)}. The course's install (tools/bootstrap.py) brings them all.")
    return None


def test_wmma_from_pip_only_headers(cp, tmp_path):
    """On a pip-only header layout (no toolkit searched), does a WMMA kernel compile and run?"""
    env = {**os.environ, "COURSE_HEADERS": "pip", "COURSE_CACHE_DIR": str(tmp_path)}
    problem = pip_header_problem(pip_header_dirs(env))
    if problem:
        pytest.skip(problem)
    code = ("import sys, course; sys.path.insert(0, 'tests/library'); from test_gpu import run_wmma_tile; "
            "run_wmma_tile(); print('ok', course.include_dirs())")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stdout[-2000:] + r.stderr[-3000:]


@pytest.mark.both_tiers
def test_pip_header_check_on_fake_trees(tmp_path):
    """Does the pip-header check let a complete tree laid out as the CUDA 13 wheels through, and name each
    missing header (so the test above skips) for the GPU machine's partial layout and for none at all?"""
    needed = course.missing_headers(())  # with no folder, every header the course needs, with its wheel
    include = tmp_path / "nvidia" / "cu13" / "include"
    cccl = include / "cccl"  # the CCCL wheel's libcu++ (cuda/std/..., cuda/pipeline)
    for header in needed:
        f = (cccl if header.startswith("cuda/") else include) / header
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("// fake\n")
    assert pip_header_problem([str(include), str(cccl)]) is None
    (include / "crt" / "mma.h").unlink()
    problem = pip_header_problem([str(include)])  # runtime headers only, as on the GPU machine
    absent = {h for h in needed if h == "crt/mma.h" or h.startswith("cuda/")}
    assert problem and set(re.findall(r"(\S+) \[", problem)) == absent, problem
    assert "nvidia-cuda-crt" in problem and "nvidia-cuda-cccl" in problem, problem
    assert "no CUDA header wheels" in pip_header_problem([])


def test_constant_memory_through_get_global(cp):
    """Can a __constant__ array be filled through Module.get_global and read by a kernel?"""
    src = r'''__constant__ float w[64];
    extern "C" __global__ void read_w(float* out) { out[threadIdx.x] = w[threadIdx.x] * 2.0f; }'''
    m = course.compile(src)
    w = cp.random.random(64, dtype=cp.float32)
    m.get_global("w").copy_from_device(w.data, w.nbytes)
    out = cp.full(64, cp.nan, cp.float32)
    m.read_w(1, 64, out)
    course.assert_close(out, 2 * w.get())
