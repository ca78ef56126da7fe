"""Chapter 07's warptiling stage (course.lessons.ch07_warptile): every candidate tile shape is valid and compiles
without spills for sm_75, sm_80 and sm_90; check_config explains bad shapes and agrees with the kernel's
static_asserts; on a CPU the kernel text runs as C++ (one std::thread per CUDA thread, a barrier for
__syncthreads) and is right at shapes no tile divides; on a GPU the sweep checks and times against cuBLAS."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from repo_helpers import REPO, import_course, nvrtc_or_skip

ARCHS = ("sm_75", "sm_80", "sm_90")


@pytest.fixture(scope="module")
def wt():
    import_course()
    from course.lessons import ch07_warptile
    return ch07_warptile


@pytest.fixture(scope="module")
def nvrtc():
    """The course package where NVRTC compiles; a skip where it cannot be loaded."""
    import_course()
    return nvrtc_or_skip()


def lane_grid(c) -> tuple:
    """(LR, LC): the lanes of a sub-tile along M and N, as the kernel's macros compute them."""
    return (c.WM // c.WMITER) // c.TM, (c.WN // c.WNITER) // c.TN


# --- CPU: the candidates -------------------------------------------------------------------------

def test_candidates_are_valid_and_distinct(wt):
    """Does every candidate pass check_config, with its own name, a 32-lane grid of at most 8 x 8 lanes (one
    shared-memory wavefront per float4 read) and shared memory an H100 block can have?"""
    assert 12 <= len(wt.CANDIDATES) <= 20
    assert len({c.name for c in wt.CANDIDATES}) == len(set(wt.CANDIDATES)) == len(wt.CANDIDATES)
    for c in wt.CANDIDATES:
        assert wt.check_config(c) == "", c.name
        lr, lc = lane_grid(c)
        assert lr * lc == 32 and lr <= 8 and lc <= 8, c.name
        assert wt.smem_bytes(c) <= wt.SMEM_PER_BLOCK and c.THREADS == 32 * (c.BM // c.WM) * (c.BN // c.WN)


@pytest.mark.parametrize("arch", ARCHS)
def test_candidates_compile_without_spills(wt, nvrtc, arch):
    """Do both kernels of every candidate (the general one and the one for tile multiples) compile for the arch
    within its launch bounds' register cap (<= 255) and with no local memory, spills included?"""
    for c in wt.CANDIDATES:
        resources = nvrtc.compile_for_arch(wt.warptile_source(c), arch).resources
        for name in (wt.KERNEL, wt.FULL_KERNEL):
            res = resources[name]
            cap = min(255, 65536 // (c.THREADS * c.MIN_BLOCKS))
            assert res.registers <= cap, (c.name, name, arch, res)
            assert res.local_bytes == 0 and res.spill_stores == 0 and res.spill_loads == 0, (c.name, name, arch, res)


def test_source_takes_its_shape_from_defines(wt):
    """Is the source the Config's #defines (keywords or a Config alike) before one kernel text, with stage 6's
    signature, so compare_stages can launch it as it launches sgemm_regtile?"""
    kw = dict(BM=128, BN=128, BK=16, WM=64, WN=64, WNITER=4, TM=8, TN=4, THREADS=128)
    src = wt.warptile_source(**kw)
    assert src == wt.warptile_source(wt.Config(**kw)) == wt.warptile_source(kw)
    head = dict(re.findall(r"^#define (\w+) (\d+)$", src.split("\n//", 1)[0], re.M))
    assert head == {**{k: str(v) for k, v in dataclasses.asdict(wt.Config(**kw)).items()}, "KUNROLL": "16"}
    assert wt.warptile_source(kw, KUNROLL=2).count("#define KUNROLL 2\n") == 1
    assert wt.warptile_source(wt.Config(), BK=8) == wt.warptile_source(BK=8)

    def params(text, name):
        return " ".join(re.search(rf"{name}\(([^)]*)\)", text).group(1).split())
    regtile = (REPO / "solutions" / "07_staged_gemm" / "sgemm_regtile.cu").read_text()
    assert params(src, wt.KERNEL) == params(regtile, "sgemm_regtile")


def test_launch_covers_c(wt):
    """Does the launch give one block per BM x BN tile (no more), THREADS threads and the shared bytes of two
    buffers of A^T and B?"""
    for c in wt.CANDIDATES:
        for m, n in ((1, 1), (1000, 1037), (4096, 4096)):
            (gx, gy), block, smem = wt.launch(c, m, n)
            assert (gx - 1) * c.BN < n <= gx * c.BN and (gy - 1) * c.BM < m <= gy * c.BM, (c.name, m, n)
            assert block == c.THREADS and smem == 2 * c.BK * (c.BM + 4 + c.BN) * 4


# shapes check_config must refuse, and words its reason must contain; ``compiles`` False: the kernel's
# static_asserts refuse it too (None: the limit is the GPU's, not the kernel's)
BAD = [
    (dict(BM=100), "does not split into 64 x 64 warp tiles", False),
    (dict(THREADS=256), "need THREADS = 128", False),
    (dict(BM=256, BN=256, WM=32, WN=32, THREADS=2048), "at most 1024", None),
    (dict(TN=2, WNITER=8), "multiples of 4", False),
    (dict(WNITER=3), "WNITER = 3", False),
    (dict(BN=96, WN=96, TM=4, TN=4, WNITER=1, THREADS=64), "not a grid of 32 lanes", False),
    (dict(BM=64, BN=64, WM=32, WN=32, WNITER=1, TM=4, TN=4, BK=4), "do not split evenly over 128 threads", False),
    (dict(BK=256), "shared memory per block", None),
    (dict(BK=64, MIN_BLOCKS=2), "do not fit", None),
    (dict(WM=32, WN=128, TM=4, TN=8, MIN_BLOCKS=5), "would spill", None),
    (dict(KUNROLL=3), "should divide BK = 16", None),
    (dict(BM=-128), "BM should be a positive integer", None),
    (dict(GROUP_M=True), "GROUP_M should be a positive integer", None),
    (dict(TILE=8), "not a tile shape", None),
]


@pytest.mark.parametrize("bad,words,compiles", BAD, ids=[str(b[0]) for b in BAD])
def test_check_config_explains_bad_shapes(wt, bad, words, compiles):
    """Does check_config refuse each bad shape with a sentence that names what is wrong?"""
    assert words in wt.check_config(bad)


def test_check_config_agrees_with_the_kernel(wt, nvrtc):
    """Do the shapes check_config refuses for the kernel's own reasons fail its static_asserts, and do valid
    shapes outside the candidates compile?"""
    for bad, _words, compiles in BAD:
        if compiles is False:
            with pytest.raises(nvrtc.CompileError, match="static assertion failed"):
                nvrtc.compile_for_arch(wt.warptile_source(bad), "sm_90")
    for good in (dict(TM=16, TN=8, WNITER=1), dict(BK=12), dict(WNITER=2, TM=16, TN=4, BK=4)):
        assert wt.check_config(good) == "", good
        assert nvrtc.compile_for_arch(wt.warptile_source(good), "sm_90").cubin, good


# --- CPU: the kernel text run as C++ -----------------------------------------------------------------

EMU_HEAD = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
struct alignas(16) float4 { float x, y, z, w; };
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
struct dim3_ { unsigned x, y, z; };
thread_local dim3_ threadIdx;
static dim3_ blockIdx, gridDim;
alignas(16) float4 smem4[232448 / 16];
static std::barrier<>* g_bar;
static void __syncthreads() { g_bar->arrive_and_wait(); }
using std::min;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
"""

# argv: M N K offset (floats added to every pointer: 1 makes them misaligned for float4). Blocks run one after
# another, each as THREADS std::threads; C starts as NaN with a margin, compared with a float64 product.
EMU_MAIN = r"""
int main(int argc, char** argv) {
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), off = atoi(argv[4]);
    std::vector<float> a((size_t)M * K + 8), b((size_t)K * N + 8), c((size_t)M * N + 8, NAN);
    uint32_t s = 12345;
    auto rnd = [&] { s = s * 1664525u + 1013904223u; return ((s >> 8) & 0xFFFF) / 32768.0f - 1.0f; };
    for (auto& v : a) v = rnd();
    for (auto& v : b) v = rnd();
    const float *A = a.data() + off, *B = b.data() + off;
    float* C = c.data() + off;
    gridDim = {(unsigned)((N + BN - 1) / BN), (unsigned)((M + BM - 1) / BM), 1};
    for (unsigned by = 0; by < gridDim.y; ++by)
        for (unsigned bx = 0; bx < gridDim.x; ++bx) {
            blockIdx = {bx, by, 0};
            std::barrier<> bar(THREADS);
            g_bar = &bar;
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < THREADS; ++t)
                ts.emplace_back([=] { threadIdx = {t, 0, 0}; sgemm_warptile(A, B, C, M, N, K); });
            for (auto& t : ts) t.join();
        }
    std::vector<double> ref((size_t)M * N, 0.0);
    for (int i = 0; i < M; ++i)
        for (int k = 0; k < K; ++k)
            for (int j = 0; j < N; ++j) ref[(size_t)i * N + j] += (double)A[(size_t)i * K + k] * B[(size_t)k * N + j];
    double scale = 0;
    long wrong = 0, outside = 0;
    for (double r : ref) scale = std::max(scale, std::fabs(r));
    for (size_t i = 0; i < ref.size(); ++i) wrong += !(std::fabs((double)C[i] - ref[i]) <= 1e-4 * scale);
    for (size_t i = 0; i < c.size(); ++i) outside += (i < (size_t)off || i >= off + ref.size()) && !std::isnan(c[i]);
    printf("%ld of %zu outputs wrong, %ld written outside C\n", wrong, ref.size(), outside);
    return wrong || outside;
}
"""


@pytest.fixture(scope="module")
def emulate(tmp_path_factory):
    """``emulate(source) -> run(m, n, k, offset) -> (returncode, message)``: the kernel text built as C++20 with
    g++; a skip where there is no g++ with <barrier>."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ to run the kernel text on the CPU")
    folder = tmp_path_factory.mktemp("warptile_emu")

    def build(source: str):
        cpp = folder / f"k{len(list(folder.glob('*.cpp')))}.cpp"
        cpp.write_text(EMU_HEAD + source + EMU_MAIN)
        exe = cpp.with_suffix("")
        p = subprocess.run([gxx, "-std=c++20", "-O1", "-pthread", "-fno-strict-aliasing", "-Wno-unknown-pragmas",
                            "-o", str(exe), str(cpp)], capture_output=True, text=True, timeout=300)
        if p.returncode and "barrier" in p.stderr and "No such file" in p.stderr:
            pytest.skip("g++ has no C++20 <barrier>")
        assert p.returncode == 0, p.stderr[-3000:]

        def run(m, n, k, offset=0):
            r = subprocess.run([str(exe), str(m), str(n), str(k), str(offset)], capture_output=True, text=True,
                               timeout=300)
            return r.returncode, (r.stdout + r.stderr).strip()
        return run
    return build


def _emulated(wt):
    """One candidate per distinct kernel structure: thread tile, sub-tiles, block size, grouping, unrolling."""
    seen, out = set(), []
    for c in wt.CANDIDATES:
        key = (c.TM, c.TN, c.WMITER, c.WNITER, c.THREADS, c.BM, c.BN, c.GROUP_M > 1, c.KUNROLL > 0)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


@pytest.mark.slow
def test_kernel_text_is_right_where_no_tile_fits(wt, emulate):
    """Run as C++ threads on the CPU, is every structurally distinct candidate right at shapes that no tile
    divides: float4 path with partial tiles, scalar path (N and K odd), misaligned pointers, and more block
    rows than GROUP_M, with nothing written outside C?"""
    shapes = lambda c: [(129, 136, 40, 0), (133, 261, 37, 0), (129, 136, 40, 1),  # noqa: E731
                        ((max(c.GROUP_M, 2) + 3) * c.BM - 5, 72, 24, 0)]
    picked = _emulated(wt)
    assert len(picked) >= 8
    for c in picked:
        run = emulate(wt.warptile_source(c))
        for shape in shapes(c):
            code, msg = run(*shape)
            assert code == 0 and msg.startswith("0 of"), (c.name, shape, msg)


def test_emulation_catches_a_wrong_fragment_offset(wt, emulate):
    """Does the CPU run fail when a lane reads the wrong quad of A (the quads' LR * 4 spacing dropped)?"""
    src = wt.warptile_source(wt.CANDIDATES[0])
    wrong = src.replace("(i % (TM / 4)) * 4 * LR", "(i % (TM / 4)) * 4")
    assert wrong != src
    code, msg = emulate(wrong)(129, 136, 40)
    assert code != 0 and not msg.startswith("0 of"), msg


# --- CPU: the table and the command line ---------------------------------------------------------

def _fake_rows(wt):
    ok = {"config": wt.CANDIDATES[0].name, "candidate": 1, "params": dataclasses.asdict(wt.CANDIDATES[0]), "ms": 2.5, "tflops": 55.0,
          "of_cublas": 0.93, "registers": 251, "spill_stores": 0, "blocks_per_sm": 2, "smem": 33280, "correct": True,
          "error": ""}
    bad = {"config": "100x128", "candidate": None, "params": {}, "correct": False, "error": "a | b"}
    cub = {"config": "cuBLAS SGEMM (FP32, TF32 off)", "candidate": None, "params": None, "ms": 2.3, "tflops": 59.7,
           "of_cublas": 1.0, "correct": True, "error": ""}
    return [ok, bad, cub]


def test_markdown_table(wt):
    """Is the sweep a markdown table: a header, a separator and one row per shape, errors kept in one cell?"""
    lines = wt.markdown(_fake_rows(wt)).splitlines()
    assert len(lines) == 5 and lines[1].startswith("|---")
    cols = lines[0].count("|")
    assert all(ln.count("|") == cols for ln in lines)
    assert "| 0.930 |" in lines[2] and "| 251 |" in lines[2] and lines[2].endswith("| yes |")
    assert "no: a / b" in lines[3]


def test_command_line_records_the_sweep(wt, monkeypatch, tmp_path, capsys):
    """Does ``python -m benchmarks.warptile_sweep --only 1,3 --out DIR`` sweep those candidates, print the
    markdown table and record the GPU, versions, date and rows in DIR/ch07-warptile-sweep-<gpu>.{json,md}?"""
    from benchmarks import _record, warptile_sweep
    got = {}

    def fake_sweep(n, configs, budget_s):
        got.update(n=n, configs=configs, budget_s=budget_s)
        return _fake_rows(wt)
    monkeypatch.setattr(wt, "sweep", fake_sweep)
    monkeypatch.setattr(wt.course, "device_info", lambda: SimpleNamespace(
        name="Test GPU", runtime="13.0", nvrtc="13.0", cupy="14.2.0"))
    monkeypatch.setattr(_record, "device", lambda: {"name": "Test GPU", "count": 1, "driver": "580.1"})
    assert warptile_sweep.main(["--n", "1024", "--only", "1,3", "--out", str(tmp_path)]) == 0
    assert got == {"n": 1024, "configs": [wt.CANDIDATES[0], wt.CANDIDATES[2]], "budget_s": 4.0}
    printed = capsys.readouterr().out
    assert "on Test GPU" in printed and wt.markdown(_fake_rows(wt)) in printed
    saved = json.loads((tmp_path / "ch07-warptile-sweep-test-gpu.json").read_text())
    assert saved["device"]["name"] == "Test GPU" and saved["size"] == 1024 and saved["rows"] == _fake_rows(wt)
    assert saved["versions"]["cupy"] == "14.2.0" and saved["date"]
    assert wt.markdown(_fake_rows(wt)) in (tmp_path / "ch07-warptile-sweep-test-gpu.md").read_text()


def test_sweep_rows_with_a_fake_gpu(wt, monkeypatch):
    """With NumPy standing in for CuPy and a fake compiler whose kernel multiplies right except for one shape,
    does the sweep check before timing, time only the right shapes with cuBLAS in one interleaved run, and
    return their rows fastest first with ratio = cuBLAS time / own time, then the wrong one, then cuBLAS?"""
    import sys

    import numpy as np
    course = import_course()
    broken = wt.CANDIDATES[2]
    ms = {wt.CANDIDATES[0].name: 3.0, wt.CANDIDATES[1].name: 2.0, "cuBLAS SGEMM (FP32, TF32 off)": 1.8}

    class Kern:
        resources = course.Resources(registers=200, local_bytes=0, spill_stores=0, spill_loads=0)

        def __init__(self, cfg):
            self.cfg = cfg

        def occupancy(self, threads, smem):
            return 2

        def __call__(self, grid, block, a, b, c, m, n, k, shared_mem):
            assert (grid, block, shared_mem) == wt.launch(self.cfg, m, n)
            c[...] = 0 if self.cfg == broken else a @ b

    sources = {wt.warptile_source(c): c for c in wt.CANDIDATES[:3]}
    timed = []

    def interleaved(fns, budget_s, max_samples):
        timed.append(sorted(map(str, fns)))
        return {k: course.BenchResult(str(k), [ms[wt.CANDIDATES[k].name if isinstance(k, int) else k]] * 5)
                for k in fns}
    monkeypatch.setitem(sys.modules, "cupy", np)
    monkeypatch.setattr(course, "device_info", lambda: None)
    monkeypatch.setattr(course, "compile", lambda src: type("M", (), {"kernel": lambda self, n: Kern(sources[src])})())
    monkeypatch.setattr(course.cublas, "gemm", lambda a, b, c, compute: np.matmul(a, b, out=c))
    monkeypatch.setattr(course, "interleaved", interleaved)
    rows = wt.sweep(n=64, configs=wt.CANDIDATES[:3], verbose=False)
    assert timed == [["0", "1", "cuBLAS SGEMM (FP32, TF32 off)"]]
    assert [r["candidate"] for r in rows] == [2, 1, 3, None] and [r["correct"] for r in rows] == [True] * 2 + [False, True]
    assert [r["of_cublas"] for r in rows] == pytest.approx([0.9, 0.6, None, 1.0]) and rows[-1]["params"] is None
    assert rows[0]["tflops"] == pytest.approx(2 * 64 ** 3 / 2.0e9) and rows[0]["registers"] == 200
    assert rows[2]["error"].startswith("CheckError") and "1000x1037x999" in rows[2]["error"]


def test_sweep_needs_a_gpu(wt, monkeypatch, capsys):
    """Without a GPU, does the sweep stop at once with the reason instead of failing inside CuPy, and the command
    line say so and exit 2?"""
    course = import_course()
    monkeypatch.setattr("course._env._probe", lambda: (None, "no driver (test)"))
    with pytest.raises(course.NoGPUError, match="no driver"):
        wt.sweep(n=256)
    from benchmarks import warptile_sweep
    assert warptile_sweep.main(["--n", "256"]) == 2 and "no driver (test)" in capsys.readouterr().err


# --- GPU -------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_sweep_checks_and_times_against_cublas(wt):
    """On a small product, does the sweep refuse a bad shape with its reason, check and time good ones next to
    cuBLAS in one run (ratio = cuBLAS time / own time), report registers without spills, fastest first?"""
    configs = [wt.CANDIDATES[0], wt.CANDIDATES[14], dict(BM=100), dict(TILE=8)]
    rows = wt.sweep(n=512, configs=configs, budget_s=0.3, max_samples=10, verbose=False)
    assert [r["config"] for r in rows][-1].startswith("cuBLAS SGEMM")
    cub, timed = rows[-1], [r for r in rows[:-1] if r["correct"]]
    assert {r["candidate"] for r in timed} == {1, 15}
    assert [r["of_cublas"] for r in timed] == sorted((r["of_cublas"] for r in timed), reverse=True)
    for r in timed:
        assert r["ms"] > 0 and r["tflops"] == pytest.approx(2 * 512 ** 3 / r["ms"] / 1e9)
        assert r["of_cublas"] == pytest.approx(cub["ms"] / r["ms"])
        assert 0 < r["registers"] <= 255 and r["spill_stores"] == 0 and r["blocks_per_sm"] >= 1
    refused = [r for r in rows if not r["correct"]]
    assert ["warp tiles" in r["error"] or "not a tile shape" in r["error"] for r in refused] == [True, True]
    assert all(r["ms"] is None for r in refused)


@pytest.mark.gpu
def test_candidates_right_at_odd_shapes_on_gpu(wt):
    """Is every candidate right at 1000 x 1037 x 999 (float64 reference) and with a misaligned A (a view one
    float in), the float4 paths falling back as stage 6's do?"""
    course = import_course()
    import cupy
    for c in wt.CANDIDATES:
        kern = course.compile(wt.warptile_source(c)).kernel(wt.KERNEL)
        for m, n, k, shift in ((1000, 1037, 999, 0), (257, 264, 128, 1)):
            a, b, out = course.gemm.make_inputs(m, n, k, "fp32", seed=7)
            if shift:
                a = cupy.empty(m * k + 1, dtype=cupy.float32)[1:].reshape(m, k)
                a[...] = cupy.random.default_rng(8).standard_normal((m, k), dtype=cupy.float32)
            grid, block, smem = wt.launch(c, m, n)
            kern(grid, block, a, b, out, m, n, k, shared_mem=smem)
            assert course.gemm.check_gemm(out, a, b, name=f"{c.name} at {m}x{n}x{k}"), c.name


@pytest.mark.gpu
def test_sweep_catches_a_launch_that_misses_outputs(wt, monkeypatch):
    """With a grid one block column short, is the shape reported wrong (a CheckError in its row) and left out of
    the timing?"""
    real = wt.launch
    monkeypatch.setattr(wt, "launch", lambda cfg, m, n: ((real(cfg, m, n)[0][0] - 1, real(cfg, m, n)[0][1]),
                                                         *real(cfg, m, n)[1:]))
    rows = wt.sweep(n=512, configs=[wt.CANDIDATES[0]], budget_s=0.2, max_samples=10, verbose=False)
    assert not rows[0]["correct"] and "CheckError" in rows[0]["error"] and rows[0]["ms"] is None


def test_stage_6b_text_quotes_the_recordings(wt):
    """Do the figures of stage 6b's paragraph equal the recorded H100 sweep (benchmarks/results/ch07-warptile-
    sweep-*.json: the best config's ratio, the 128 x 128 block tiles' range) and the stage table's recorded row?"""
    from repo_helpers import check_quotes, recorded_rows
    sweep = json.loads((REPO / "benchmarks" / "results" / "ch07-warptile-sweep-nvidia-h100-80gb-hbm3.json").read_text())
    timed = [r for r in sweep["rows"] if r.get("params") and r.get("of_cublas")]
    best = max(timed, key=lambda r: r["of_cublas"])
    square = [r["of_cublas"] for r in timed if (r["params"]["BM"], r["params"]["BN"]) == (128, 128)]
    cell = next(r for r in timed if r["params"] == dataclasses.asdict(wt.cell_config()))
    # the run-to-run noise of one shape is about 1%: the defaults must be the best or within 2% of it
    assert cell["of_cublas"] >= 0.98 * best["of_cublas"], ("the cell's defaults are not the best shape", cell, best)
    rows, _ = recorded_rows("07_staged_gemm")
    row = rows["stage 6b: warptiling: 128 x 256 tiles, 64 x 64 per warp"]
    check_quotes("07_staged_gemm", [
        ("reached 0.954 of cuBLAS SGEMM at 4096³", [best["of_cublas"], 4096]),
        ("stayed between 0.84 and 0.92", [min(square), max(square)]),
        ("recorded 0.895 (46.2 TFLOP/s)", [row["ratio"], row["value"]]),
    ])


def test_stage_6b_launches_the_cells_defaults(wt):
    """Do stage 6b's block tile, threads and dynamic shared memory in ch07.STAGES equal what the cell's #ifndef
    defaults ask for (its launch and smem_bytes), and is that shape a valid candidate?"""
    from course.lessons import ch07
    st = next(s for s in ch07.STAGES if s.key == "warptile")
    c = wt.cell_config()
    assert (c.BM, c.BN, c.THREADS) == (*st.block_tile, st.block) and wt.smem_bytes(c) == st.smem, c
    assert wt.check_config(c) == "" and c in wt.CANDIDATES
    assert st.launch(1000, 1037, 999) == wt.launch(c, 1000, 1037)
    edited = wt.cell_config(course_cell_with(wt, "#define BN 256", "#define BN 128"))
    assert edited.BN == 128 and wt.smem_bytes(edited) != st.smem    # the test sees an edit


def course_cell_with(wt, old, new):
    import course
    src = course.lesson_cell(wt.CHAPTER, wt.KERNEL).source
    assert old in src
    return src.replace(old, new)


def test_full_kernel_only_for_tile_multiples_and_aligned_matrices(wt):
    """Does the launch pick the kernel without bounds tests only when M, N, K are multiples of BM, BN, BK and all
    three matrices start on 16-byte boundaries (a view one float in is not)?"""
    import numpy as np
    c = wt.cell_config()
    big = np.zeros(2 * c.BM * c.BK + 4, dtype=np.float32)
    base = next(i for i in range(4) if big[i:].__array_interface__["data"][0] % 16 == 0)
    a = big[base:base + c.BM * c.BK].reshape(c.BM, c.BK)
    b, out = np.zeros((c.BK, c.BN), np.float32), np.zeros((c.BM, c.BN), np.float32)
    aligned = [x.__array_interface__["data"][0] % 16 == 0 for x in (b, out)]
    if not all(aligned):
        pytest.skip("NumPy did not give 16-byte aligned allocations here")
    assert wt.is_full(c, a, b, out)
    shifted = big[base + 1:base + 1 + c.BM * c.BK].reshape(c.BM, c.BK)
    assert not wt.is_full(c, shifted, b, out)
    assert not wt.is_full(c, a[:, :c.BK - 4], b[:c.BK - 4], out)          # K not a multiple of BK
    assert not wt.is_full(c, a, b[:, :c.BN - 4], out[:, :c.BN - 4])        # N not a multiple of BN
