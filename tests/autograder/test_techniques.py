"""Technique checks (autograder/techniques.py), CPU tier: each SASS check passes on a kernel with the
technique and fails, with a teacher's message, on one without, for every arch the technique exists on; the
loader validates the names; the compile child carries the verdicts; the policy withholds speed points."""
import dataclasses
import re

import pytest

from autograder import Status, get_exercise, policy, techniques
from autograder.report import SizeResult, SpeedResult
from autograder.spec import SpecError

ARCHS = ("sm_75", "sm_80", "sm_90")

VECTOR = r'''extern "C" __global__ void k(const float4* __restrict__ x, float4* __restrict__ y, int n)
{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i]; }'''
SCALAR = r'''extern "C" __global__ void k(const float* __restrict__ x, float* __restrict__ y, int n)
{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }'''
# an array indexed by values known only at run time stays in local memory (STL/LDL)
LOCAL = r'''extern "C" __global__ void k(const float* x, float* y, int n)
{ float t[64]; for (int i = 0; i < 64; i++) t[i] = x[i * n + threadIdx.x];
  for (int i = 0; i < n; i++) t[(int)x[i] & 63] += 1.0f; y[threadIdx.x] = t[(int)x[0] & 63] * t[n & 63]; }'''
WMMA_F16 = r'''#include <mma.h>
using namespace nvcuda;
extern "C" __global__ void k(const half* a, const half* b, float* c)
{ wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f); wmma::load_matrix_sync(fa, a, 16); wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc); wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major); }'''
WMMA_INT8 = WMMA_F16.replace("half", "signed char").replace("float", "int").replace("0.0f", "0")
FFMA_GEMM = r'''extern "C" __global__ void k(const float* a, const float* b, float* c, int n)
{ int r = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x; float s = 0.0f;
  for (int i = 0; i < n; ++i) s += a[r * n + i] * b[i * n + col]; c[r * n + col] = s; }'''
DSMEM = r'''#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void __cluster_dims__(2, 1, 1) k(const unsigned* v, unsigned* hist, int n)
{ __shared__ unsigned bins[512]; cg::cluster_group cl = cg::this_cluster();
  for (int i = threadIdx.x; i < 512; i += blockDim.x) bins[i] = 0;
  cl.sync();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { unsigned b = v[i] % 1024; atomicAdd(cl.map_shared_rank(bins, b / 512) + b % 512, 1u); }
  cl.sync();
  for (int j = threadIdx.x; j < 512; j += blockDim.x) atomicAdd(&hist[j], bins[j]); }'''
PLAIN_SHARED = r'''extern "C" __global__ void k(const unsigned* v, unsigned* hist, int n)
{ __shared__ unsigned bins[512];
  for (int i = threadIdx.x; i < 512; i += blockDim.x) bins[i] = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[v[i] % 512], 1u);
  __syncthreads();
  for (int j = threadIdx.x; j < 512; j += blockDim.x) atomicAdd(&hist[j], bins[j]); }'''
# the check reads the graded kernel only: its neighbour's float4 loads do not count for it
TWO_KERNELS = SCALAR + "\n" + VECTOR.replace("void k(", "void other(")


def course_or_skip():
    course = pytest.importorskip("course")
    try:
        course.compile_for_arch(SCALAR, "sm_80")
    except course.CompileError as exc:
        pytest.skip(f"NVRTC is not usable here: {exc}")
    return course


def run_check(name, source, arch, kernel="k"):
    """The check's message ('' when it passes, None when undecided) on ``kernel`` compiled for ``arch``."""
    course = course_or_skip()
    prog = course.compile_for_arch(source, arch)
    try:
        sass = prog.sass()
    except FileNotFoundError as exc:
        pytest.skip(f"no SASS disassembler here: {exc}")
    instrs = techniques.kernel_instructions(sass, kernel)
    assert instrs, f"no instructions of {kernel} found in:\n{sass[:2000]}"
    return techniques.CHECKS[name].sass(instrs, prog.resources.get(kernel), arch, kernel)


def assert_teacher_message(msg, expected, shown):
    """What was expected, what the SASS shows (a quoted instruction line), and what to try."""
    assert msg and msg.startswith("Expected: ") and "Found: " in msg and "To try: " in msg, msg
    assert re.search(expected, msg), msg
    assert re.search(shown, msg), msg


@pytest.mark.parametrize("arch", ARCHS)
def test_vector_loads_128(arch):
    assert run_check("vector_loads_128", VECTOR, arch) == ""
    msg = run_check("vector_loads_128", SCALAR, arch)
    assert_teacher_message(msg, r"128-bit loads .*LDG\.E\.128", r"\n    /\*\w+\*/ LDG\.E(\.CONSTANT)?(\.SYS)? R\d+")


@pytest.mark.parametrize("arch", ARCHS)
def test_vector_loads_reads_the_graded_kernel_only(arch):
    """A module whose other kernel has float4 loads: the graded scalar kernel still fails, the other passes."""
    assert run_check("vector_loads_128", TWO_KERNELS, arch, kernel="k")
    assert run_check("vector_loads_128", TWO_KERNELS, arch, kernel="other") == ""


@pytest.mark.parametrize("arch", ARCHS)
def test_no_local_memory(arch):
    assert run_check("no_local_memory", SCALAR, arch) == ""
    msg = run_check("no_local_memory", LOCAL, arch)
    assert_teacher_message(msg, r"no local memory", r"local-memory instructions? \(LDL loads, STL stores\)"
                                                    r", for example:\n    /\*\w+\*/ (STL|LDL)")


def test_no_local_memory_counts_spills_from_the_resource_report():
    """Spills reported by ptxas fail the check even if the instructions handed over show no LDL/STL."""
    course = course_or_skip()
    res = course.Resources(registers=32, local_bytes=64, spill_stores=64, spill_loads=64)
    msg = techniques.CHECKS["no_local_memory"].sass([("FFMA", "FFMA R1, R2, R3, R4 ;")], res, "sm_80", "k")
    assert "register spills (64 bytes stored, 64 bytes loaded" in msg


@pytest.mark.parametrize("arch,source", [("sm_75", WMMA_F16), ("sm_80", WMMA_F16), ("sm_90", WMMA_F16),
                                         ("sm_75", WMMA_INT8), ("sm_80", WMMA_INT8), ("sm_90", WMMA_INT8)])
def test_tensor_cores_pass_on_hmma_and_imma(arch, source):
    assert run_check("tensor_cores", source, arch) == ""


@pytest.mark.parametrize("arch", ARCHS)
def test_tensor_cores_fail_on_a_cuda_core_gemm(arch):
    msg = run_check("tensor_cores", FFMA_GEMM, arch)
    assert_teacher_message(msg, r"tensor cores", r"CUDA cores instead, for example:\n    /\*\w+\*/ FFMA")


def test_tensor_cores_knows_the_sm90a_warpgroup_forms():
    """wgmma on sm_90a is HGMMA in SASS: the check counts it (required_sass "HMMA" never did)."""
    assert run_check("tensor_cores", WGMMA, "sm_90a") == ""      # WGMMA: the kernel the wgmma checks below use


def test_distributed_shared_on_sm90():
    assert run_check("distributed_shared", DSMEM, "sm_90") == ""
    msg = run_check("distributed_shared", PLAIN_SHARED, "sm_90")
    assert_teacher_message(msg, r"distributed shared memory", r"own block's, for example:\n    /\*\w+\*/ (STS|LDS|ATOMS)")


def test_distributed_shared_is_undecided_off_sm90():
    """Its SASS form is known for sm_90 only: elsewhere the check says so instead of failing."""
    assert run_check("distributed_shared", PLAIN_SHARED, "sm_80") is None
    assert techniques.CHECKS["distributed_shared"].unknown


def test_counter_check_verdicts_from_ncu_metrics():
    ld, st, ild, ist = techniques.CHECKS["no_bank_conflicts"].metrics
    clean = techniques.counter_verdict("no_bank_conflicts", {ld: 3, st: 0, ild: 1000, ist: 1000})
    assert clean.passed is True
    bad = techniques.counter_verdict("no_bank_conflicts", {ld: 31000, st: 0, ild: 1000, ist: 1000})
    assert bad.passed is False and "31,000 extra wavefronts over 2,000" in bad.message and "[32][33]" in bad.message
    assert techniques.counter_verdict("no_bank_conflicts", {ld: 0}).passed is None


def test_every_check_is_described():
    for name, check in techniques.CHECKS.items():
        assert check.name == name and check.where in ("sass", "log", "counters") and "\n" not in check.description
        assert (check.sass is not None) == (check.where == "sass")
        assert (check.log is not None) == (check.where == "log")
        assert (check.counters is not None and check.metrics) or check.where in ("sass", "log")


# -- Hopper: warpgroup MMA, TMA loads, and wgmma pipelines ptxas did not serialize (sm_90a) -------------------

def _hopper(body):
    from hopper_kernels import TMA_PRELUDE
    return TMA_PRELUDE + body


WGMMA = r'''extern "C" __global__ void k(float* out, unsigned long long da, unsigned long long db)
{ float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  asm volatile("wgmma.fence.sync.aligned;\n{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
    "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;"
    : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db));
  out[threadIdx.x] = d0 + d1 + d2 + d3; }'''
TMA_LOAD = _hopper(r'''
extern "C" __global__ void k(const __grid_constant__ TensorMap map, float* out)
{ __shared__ alignas(128) float tile[256]; __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) barrier_init(&bar);
  __syncthreads();
  if (threadIdx.x == 0) { barrier_expect(&bar, 1024); tma_load_2d(tile, &map, 0, 0, &bar); }
  barrier_wait(&bar, 0); out[threadIdx.x] = tile[threadIdx.x]; }''')
BULK_LOAD = _hopper(r'''
extern "C" __global__ void k(const float* in, float* out)
{ __shared__ alignas(128) float tile[256]; __shared__ alignas(8) unsigned long long bar;
  if (threadIdx.x == 0) barrier_init(&bar);
  __syncthreads();
  if (threadIdx.x == 0) { barrier_expect(&bar, 1024);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                 :: "r"(smem(tile)), "l"(in), "r"(smem(&bar)) : "memory"); }
  barrier_wait(&bar, 0); out[threadIdx.x] = tile[threadIdx.x]; }''')
# loads with its threads, stores with the TMA: a TMA store is no TMA load
TMA_STORE_ONLY = _hopper(r'''
extern "C" __global__ void k(const __grid_constant__ TensorMap map, const float* in)
{ __shared__ alignas(128) float tile[256];
  tile[threadIdx.x] = in[threadIdx.x];
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];"
                 :: "l"(&map), "r"(0), "r"(0), "r"(smem(tile)) : "memory");
    asm volatile("cp.async.bulk.commit_group;");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  } }''')
_MMA_HELPER = r'''
__device__ __forceinline__ void mma(float& d0, float& d1, float& d2, float& d3, unsigned long long da,
                                    unsigned long long db) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
    "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
    : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3) : "l"(da), "l"(db)); }'''
# two wgmma per stage in a loop, fence before, commit and wait after: a pipeline ptxas keeps
PIPELINED = _MMA_HELPER + r'''
extern "C" __global__ void k(float* out, unsigned long long da, unsigned long long db, int n)
{ float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  for (int i = 0; i < n; ++i) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    mma(d0, d1, d2, d3, da + i, db + i);
    mma(d0, d1, d2, d3, da + 2 * i, db + 2 * i);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  out[threadIdx.x] = d0 + d1 + d2 + d3; }'''
# an accumulator scaled between two wgmma of one stage
TOUCHED = PIPELINED.replace("mma(d0, d1, d2, d3, da + i, db + i);",
                            "mma(d0, d1, d2, d3, da + i, db + i);\n    d0 *= 0.5f;")
# the helper that issues wgmma is not inlined: the pipeline crosses a call
NOT_INLINED = PIPELINED.replace("__forceinline__", "__noinline__")


def test_wgmma_passes_on_hgmma_and_fails_on_mma_sync_and_cuda_cores():
    assert run_check("wgmma", WGMMA, "sm_90a") == ""
    msg = run_check("wgmma", WMMA_F16, "sm_90a")
    assert_teacher_message(msg, r"warpgroup MMA \(wgmma\.mma_async: HGMMA", r"older GPUs \(HMMA.*\n    /\*\w+\*/ HMMA")
    msg = run_check("wgmma", FFMA_GEMM, "sm_90a")
    assert_teacher_message(msg, r"HGMMA", r"CUDA cores, for example:\n    /\*\w+\*/ FFMA")


def test_wgmma_and_tma_are_undecided_off_sm90():
    assert run_check("wgmma", WMMA_F16, "sm_80") is None and run_check("tma", SCALAR, "sm_80") is None


def test_tma_passes_on_a_tensor_copy_and_a_bulk_copy_into_shared():
    assert run_check("tma", TMA_LOAD, "sm_90a") == ""
    assert run_check("tma", BULK_LOAD, "sm_90a") == ""


def test_tma_fails_on_thread_loads_and_on_tma_stores_alone():
    msg = run_check("tma", SCALAR, "sm_90a")
    assert_teacher_message(msg, r"Tensor Memory Accelerator.*UTMALDG", r"load global memory themselves, for "
                                                                       r"example:\n    /\*\w+\*/ LDG")
    msg = run_check("tma", TMA_STORE_ONLY, "sm_90a")
    assert_teacher_message(msg, r"UTMALDG", r"stores to global memory, which load nothing:\n    /\*\w+\*/ UTMASTG")


def log_check(source, arch="sm_90a"):
    """no_wgmma_serialization's message from NVRTC's log alone: no disassembler needed."""
    course = course_or_skip()
    prog = course.compile_for_arch(source, arch, use_cache=False)
    return techniques.CHECKS["no_wgmma_serialization"].log(prog.log, prog.arch, "k")


def test_no_wgmma_serialization_passes_a_pipeline_ptxas_keeps():
    assert log_check(PIPELINED) == ""
    assert log_check(WGMMA) == "" and log_check(SCALAR, "sm_80") == ""


@pytest.mark.parametrize("source,reason,advice", [
    (TOUCHED, r"serialized due to insufficient register resources", r"do not read, write or copy them in between"),
    (NOT_INLINED, r"serialized due to wgmma pipeline crossing function boundary", r"__forceinline__"),
])
def test_no_wgmma_serialization_fails_with_ptxas_reason(source, reason, advice):
    """ptxas says why it serialized (NVRTC's log keeps its notes); the message quotes it and says what to try."""
    msg = log_check(source)
    assert msg.startswith("Expected: k's wgmma instructions run as a pipeline") and "To try: " in msg, msg
    assert re.search(r"\n    ptxas info : \(C75\d\d\) Potential Performance Loss: wgmma\.mma_async", msg), msg
    assert re.search(reason, msg) and re.search(advice, msg), msg


def test_no_wgmma_serialization_reads_the_graded_kernel_and_its_callees_only():
    log = ("ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
           "wgmma pipeline crossing function boundary at a function call in the function 'other'\n"
           "ptxas info    : Compiling entry function 'other' for 'sm_90a'\n"
           "ptxas info    : Compiling entry function 'k' for 'sm_90a'\n")
    check = techniques.CHECKS["no_wgmma_serialization"].log
    assert check(log, "sm_90a", "k", frozenset({"other", "k"})) == ""
    assert "crossing function boundary" in check(log.replace("'other'\n", "'_Z3mmaRf'\n", 1), "sm_90a", "k",
                                                 frozenset({"other", "k"}))
    assert "crossing function boundary" in check(log, "sm_90a", "k")   # no PTX to tell the kernels apart


def test_no_wgmma_serialization_takes_the_kernels_from_the_ptx_not_the_log():
    """A #warning that spells ptxas's "Compiling entry function" for a non-inlined helper must not make that
    helper's serialization pass for another kernel's (the kernels come from the PTX the compiler wrote)."""
    course = course_or_skip()
    forged = "#warning Compiling entry function '_Z3mmaRf' for 'sm_90a'\n" + NOT_INLINED
    prog = course.compile_for_arch(forged, "sm_90a", use_cache=False)
    assert "Compiling entry function '_Z3mmaRf'" in prog.log            # the forged line is in the log
    assert techniques.ptx_entries(prog.ptx) == {"k"}
    note = ("ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
            "wgmma pipeline crossing function boundary at a function call in the function '_Z3mmaRf'\n")
    check = techniques.CHECKS["no_wgmma_serialization"].log
    assert "crossing function boundary" in check(prog.log + note, "sm_90a", "k", techniques.ptx_entries(prog.ptx))


def test_log_checks_are_decided_without_a_disassembler(monkeypatch):
    """evaluate() decides a log check even where no SASS can be read."""
    course = course_or_skip()
    prog = course.compile_for_arch(NOT_INLINED, "sm_90a", use_cache=False)
    monkeypatch.setattr(type(prog), "sass", lambda self: (_ for _ in ()).throw(FileNotFoundError("no nvdisasm")))
    ex = with_fields("01_first_kernel", "saxpy", kernel="k", min_cc=(9, 0),
                     techniques=("no_wgmma_serialization", "wgmma"))
    by_name = {v.name: v for v in techniques.evaluate(ex, prog)}
    assert by_name["no_wgmma_serialization"].passed is False
    assert by_name["wgmma"].passed is None and "no nvdisasm" in by_name["wgmma"].message


# -- the loader --------------------------------------------------------------------------------------

def with_fields(chapter, exercise, **fields):
    return dataclasses.replace(get_exercise(chapter, exercise), **fields)


@pytest.mark.parametrize("fields,expected", [
    ({"techniques": ("vector_loads",)}, r"'vector_loads' is not a technique check\. Did you mean 'vector_loads_128'"),
    ({"techniques": "no_local_memory"}, r"should be a tuple of check names"),
    ({"required_techniques": ("no_bank_conflicts",)}, r"needs ncu counters.*cannot be required"),
    ({"techniques": ("distributed_shared",)}, r"needs sm_90 or newer: set min_cc=\(9, 0\)"),
    ({"techniques": ("wgmma",)}, r"wgmma needs sm_90 or newer: set min_cc=\(9, 0\)"),
    ({"required_techniques": ("tma",)}, r"tma needs sm_90 or newer"),
    ({"techniques": ("no_wgmma_serialization",)}, r"needs sm_90 or newer"),
    ({"techniques": ("no_local_memory",), "required_techniques": ("no_local_memory",)}, r"in both"),
    ({"required_sass": "HMMA"}, r"list of SASS opcodes"),
])
def test_validate_rejects_bad_technique_fields(fields, expected):
    field, problem = techniques.validate(with_fields("01_first_kernel", "saxpy", **fields))
    assert re.search(expected, problem), problem
    assert field in fields


def test_speed_level_techniques_need_speed_points():
    field, problem = techniques.validate(with_fields("08_tensor_cores", "wmma_gemm", techniques=("tensor_cores",),
                                                     required_techniques=()))
    assert field == "techniques" and "required_techniques" in problem


def test_loader_rejects_an_unknown_check_name(tmp_path):
    """A spec file naming an unknown check fails to load with the file, exercise and field named."""
    from autograder.loader import load_spec_file
    src = (techniques.__file__.replace("techniques.py", "specs/01_first_kernel.py"))
    text = open(src).read()
    assert text.count('name="saxpy",') == 1
    spec = tmp_path / "01_first_kernel.py"
    spec.write_text(text.replace('name="saxpy",', 'name="saxpy", techniques=("no_locals",),'))
    with pytest.raises(SpecError, match=r"techniques.*'no_locals' is not a technique check.*no_local_memory"):
        load_spec_file(spec)


def test_shipped_specs_use_checks_in_three_chapters():
    """Issue #17: technique checks in at least three chapters' specs, every name one the loader knows."""
    from autograder.loader import chapters, load_chapter
    used = {ch for ch in chapters() for ex in load_chapter(ch)
            if getattr(ex, "techniques", ()) or getattr(ex, "required_techniques", ())}
    assert len(used) >= 3, used
    assert get_exercise("08_tensor_cores", "mma_gemm").required_techniques == ("tensor_cores",)


# -- the compile child's result, and the policy --------------------------------------------------------

def compile_result(chapter, exercise, source, arch="sm_80"):
    course_or_skip()
    from autograder.compiling import compile_task
    return compile_task({"chapter": chapter, "exercise": exercise, "source": source, "arch": arch})


def corpus(*parts):
    from ag_corpus import CORPUS
    return CORPUS.joinpath(*parts).read_text()


def test_compile_child_carries_verdicts_and_notes():
    out = compile_result("05_bank_conflicts", "transpose", corpus("05_bank_conflicts", "transpose", "local_tile.cu"))
    assert out["status"] == "ok", out.get("message")
    by_name = {t["name"]: t for t in out["techniques"]}
    if by_name["no_local_memory"]["passed"] is None:
        pytest.skip(by_name["no_local_memory"]["message"])
    assert by_name["no_local_memory"]["passed"] is False and "STL" in by_name["no_local_memory"]["message"]
    # a counter check is decided after the sizes pass (counters.py), never in the compile child
    assert "no_bank_conflicts" not in by_name and not any("no_bank_conflicts" in n for n in out["notes"])


def test_compile_child_fails_a_missing_required_technique():
    out = compile_result("08_tensor_cores", "mma_gemm", corpus("08_tensor_cores", "mma_gemm", "cuda_cores.cu"))
    if any("was not checked" in n for n in out.get("notes", [])):
        pytest.skip("no SASS disassembler here")
    assert out["status"] == "failed" and "Expected: mma_gemm multiplies on the tensor cores" in out["message"]


def test_required_sass_still_works_through_the_checks():
    """A spec's required_sass still fails a kernel whose SASS lacks the opcode, with its old message."""
    course = course_or_skip()
    ex = with_fields("01_first_kernel", "saxpy", required_sass=("HMMA",))
    prog = course.compile_for_arch(SCALAR.replace("void k(", "void saxpy("), "sm_80")
    (v,) = techniques.evaluate(dataclasses.replace(ex, kernel="saxpy"), prog)
    if v.passed is None:
        pytest.skip(v.message)
    assert v.required and v.passed is False and "must use HMMA instructions" in v.message
    ex_ldg = dataclasses.replace(ex, kernel="saxpy", required_sass=("LDG", "STG"))
    assert techniques.evaluate(ex_ldg, prog)[0].passed is True


MMA = get_exercise("08_tensor_cores", "mma_gemm")
TRANSPOSE = get_exercise("05_bank_conflicts", "transpose")


def passed_sizes(n=4):
    return [SizeResult({"n": i}, Status.PASSED) for i in range(n)]


def speed(ratio, impossible=False):
    return SpeedResult(student_ms=1.0 / ratio, reference_ms=1.0, student_iqr_ms=0.01, reference_iqr_ms=0.01,
                       ratio=ratio, threshold=0.9, rounds=1, impossible=impossible, floor_ms=0.5)


def test_policy_withholds_speed_points_and_keeps_correctness():
    msg = "Expected: transpose keeps every value in registers or shared memory. Found: STL [R1], R2 ;"
    r = policy.score(TRANSPOSE, passed_sizes(), speed(1.05), technique_failures=[msg])
    assert (r.status, r.points) == (Status.SLOW, TRANSPOSE.points.correctness)
    assert "the 6 speed points are withheld" in r.reason and msg in r.reason and "1.05x the reference" in r.reason
    full = policy.score(TRANSPOSE, passed_sizes(), speed(1.05))
    assert (full.status, full.points) == (Status.PASSED, TRANSPOSE.max_points)


def test_policy_keeps_flagged_and_wrong_verdicts_first():
    msg = "Expected: ..."
    flagged = policy.score(TRANSPOSE, passed_sizes(), speed(50.0, impossible=True), technique_failures=[msg])
    assert flagged.status == Status.FLAGGED and flagged.points == TRANSPOSE.points.correctness
    wrong = [SizeResult({"n": 1}, Status.FAILED, "wrong output")] + passed_sizes()
    assert policy.score(TRANSPOSE, wrong, None, technique_failures=[msg]).reason.find("withheld") < 0
    untimed = policy.score(TRANSPOSE, passed_sizes(), None, speed_graded=False, technique_failures=[msg])
    assert untimed.status == Status.UNTIMED and "would be withheld: Expected: ..." in untimed.reason


def test_required_failure_is_a_failed_exercise_in_the_report():
    """The compile child's 'failed' for a required technique becomes 0 points, status failed."""
    r = policy.score(MMA, [], compile_failure=(Status.FAILED, "Expected: mma_gemm multiplies on the tensor cores."))
    assert (r.status, r.points) == (Status.FAILED, 0.0)


def test_without_a_gpu_the_grader_reports_what_would_be_withheld():
    """The real grader (compile child and all) on a machine without a GPU: the technique failure and the
    counter check's reason are notes on the "needs a GPU" report, so a preview shows them early."""
    import json
    import subprocess
    import sys

    from ag_helpers import ROOT, no_gpu_env, nvrtc_or_skip
    nvrtc_or_skip()
    code = ("import json, sys; from autograder import grade_source; "
            "r = grade_source('05_bank_conflicts', 'transpose', sys.stdin.read()); "
            "print(json.dumps({'status': r.status, 'notes': r.notes}))")
    p = subprocess.run([sys.executable, "-c", code], input=corpus("05_bank_conflicts", "transpose", "local_tile.cu"),
                       capture_output=True, text=True, env=no_gpu_env(), cwd=str(ROOT), timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    assert r["status"] == Status.NEEDS_GPU, r
    notes = "\n".join(r["notes"])
    if "no_local_memory was not checked" in notes:
        pytest.skip("no SASS disassembler in the compile child")
    assert "On a GPU the speed points would be withheld: Expected: transpose keeps every value" in notes, notes
    assert "no_bank_conflicts: it is measured on a GPU, after the correctness tests" in notes, notes
