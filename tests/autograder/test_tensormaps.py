"""`TensorMap` params and `Exercise.arch` (chapter 13's Hopper GEMM), CPU tier: the spec's checks at load, the
signature check, the grading protocol on the NumPy stand-in device (a map argument is `tensormaps.HostMap`, 128
zero bytes carrying the array it describes), the LAUNCH's boxes, and the skip on a GPU the target cannot run on.
The GPU tier (test_tensormaps_gpu.py) runs real TMA kernels through the same paths."""
import dataclasses
import textwrap

import numpy as np
import pytest

import autograder.device as D
import autograder.harness as H
from autograder import Exercise, In, Out, Points, Scalar, SpecError, Status, TensorMap, get_exercise, policy
from autograder import loader
from autograder.buffers import GUARD_BYTES, Guarded
from autograder.signature import compare_signature
from autograder.spec import cdiv
from autograder.tensormaps import HostMap, launch_problem, runs_on
from test_harness_cpu import NumpyBackend, make_ctx

CH = "99_tma_test"


def bf16_bits(rng, shape, dtype):
    """bf16 values in [-1, 1) as their 16 raw bits (the top half of a float32)."""
    x = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def to_f32(bits):
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def gemm_reference(v):
    return {"c": (to_f32(v["a"]).astype(np.float64) @ to_f32(v["b"]).astype(np.float64).T).astype(np.float32)}


def gemm_launch(sizes, cfg):
    return (cdiv(sizes["n"], cfg["bn"]), cdiv(sizes["m"], cfg["bm"])), 384, 0


HOPPER_GEMM = Exercise(
    name="hopper_gemm", kernel="hopper_gemm", source_file="-", chapter="test", arch="sm_90a",
    params=[TensorMap("a", np.uint16, ("m", "k"), ("bm", "bk"), swizzle="128B", gen=bf16_bits),
            TensorMap("b", np.uint16, ("n", "k"), ("bn", "bk"), swizzle="128B", gen=bf16_bits),
            Out("c", np.float32, ("m", "n")), Scalar("m", "int", "m"), Scalar("n", "int", "n"),
            Scalar("k", "int", "k")],
    sizes=[{"m": 1, "n": 1, "k": 8}, {"m": 131, "n": 67, "k": 72}, {"m": 300, "n": 130, "k": 264}],
    launch=gemm_launch, launch_defaults={"bm": 128, "bn": 128, "bk": 64}, reference=gemm_reference,
    points=Points(6, 4), floor_flops=lambda s: 2 * s["m"] * s["n"] * s["k"], peak="bf16", size_multiples={"k": 8})


@pytest.fixture
def backend(monkeypatch):
    be = NumpyBackend()
    monkeypatch.setattr(D, "BACKEND", be)
    return be


# -- fake kernels: a map argument is a HostMap whose .array is the buffer the grader checks ------------------

def gemm_ok(grid, block, a, b, c, m, n, k, shared_mem=0):
    assert isinstance(a, HostMap) and a.nbytes == 128 and not a.tobytes().strip(b"\0")   # 128 zero bytes
    c[...] = (to_f32(a.array).astype(np.float64) @ to_f32(b.array).astype(np.float64).T).astype(np.float32)


def gemm_b_as_k_by_n(grid, block, a, b, c, m, n, k, shared_mem=0):
    """Reads b's bytes as a (k x n) matrix: the same as b.T only where n or k is 1."""
    c[...] = (to_f32(a.array).astype(np.float64) @ to_f32(b.array).reshape(k, n).astype(np.float64)).astype(
        np.float32)


def gemm_first_box_of_k(grid, block, a, b, c, m, n, k, shared_mem=0):
    """Sums over the first box of k only (one TMA load per tile, no loop over k): right while k <= bk."""
    bk = a.box[1]
    c[...] = (to_f32(a.array[:, :bk]).astype(np.float64) @ to_f32(b.array[:, :bk]).astype(np.float64).T).astype(
        np.float32)


def gemm_writes_a_through_its_map(grid, block, a, b, c, m, n, k, shared_mem=0):
    """What a TMA store through the input's map does (cp.async.bulk.tensor.2d.global.shared::cta): the right
    product, then a tile of zeros written over a[0:bm, 0:bk]."""
    gemm_ok(grid, block, a, b, c, m, n, k)
    rows, cols = a.box
    a.array[:rows, :cols] = 0


def run_sizes(ex, student, cfg=None):
    ctx = make_ctx(ex, student, gemm_ok, cfg=cfg)
    return [H.correctness_step(ctx, i) for i in range(len(ex.sizes))]


def test_a_right_kernel_passes_every_size(backend):
    res = run_sizes(HOPPER_GEMM, gemm_ok)
    assert [r["status"] for r in res] == ["passed"] * 3, res


def test_reading_b_in_the_wrong_layout_fails(backend):
    res = run_sizes(HOPPER_GEMM, gemm_b_as_k_by_n)
    assert [r["status"] for r in res] == ["passed", "failed", "failed"], res
    assert "wrong output" in res[1]["message"]


def test_a_kernel_that_skips_the_loop_over_k_fails_where_k_exceeds_a_box(backend):
    """k = 72 and 264 are more than one box of 64: the missing terms show; k = 8 fits in one box."""
    res = run_sizes(HOPPER_GEMM, gemm_first_box_of_k)
    assert [r["status"] for r in res] == ["passed", "failed", "failed"], res


def test_an_input_changed_through_its_map_is_caught(backend):
    """The map describes the very buffer the grader checks (the guarded view): a store through it is seen."""
    res = run_sizes(HOPPER_GEMM, gemm_writes_a_through_its_map)
    assert res[1]["status"] == "failed", res[1]
    assert "changed its input a" in res[1]["message"] and "Inputs are read-only" in res[1]["message"]


def test_the_map_is_of_the_guarded_view_with_the_box_of_the_kernels_own_launch(backend, monkeypatch):
    """The student's map: its box from the student's LAUNCH (bm=64, bk=32), its array the guarded view the
    grader checks; the reference's: the launch_defaults' box (128 x 64)."""
    seen, views = {}, []

    def spy(who):
        def k(grid, block, a, b, c, m, n, k, shared_mem=0):
            seen.setdefault(who, []).append((a.box, b.box, a.array))
            gemm_ok(grid, block, a, b, c, m, n, k)
        return k

    class Kept(Guarded):
        def __init__(self, *args):
            super().__init__(*args)
            views.append(self)
    monkeypatch.setattr(H, "Guarded", Kept)
    ctx = make_ctx(HOPPER_GEMM, spy("student"), spy("reference"), cfg={"bm": 64, "bn": 128, "bk": 32})
    assert H.correctness_step(ctx, 1)["status"] == "passed"
    assert {s[:2] for s in seen["student"]} == {((64, 32), (128, 32))}
    assert {s[:2] for s in seen["reference"]} == {((128, 64), (128, 64))}
    guarded_a = next(g for g in views if g.p.name == "a")
    assert len(seen["student"]) == 2 and all(s[2] is guarded_a.view for s in seen["student"])


def test_timing_gives_every_timed_launch_its_own_fresh_maps(backend, monkeypatch):
    """Each timed launch's maps describe its own set's inputs, new values every time; the maps are made in
    `prepare`, never inside the timed launch."""
    from autograder import tensormaps, timing
    seen, made, timed = [], [], []

    def k(grid, block, a, b, c, m, n, k, shared_mem=0):
        seen.append(a.array.tobytes())
        gemm_ok(grid, block, a, b, c, m, n, k)

    def counting(p, array, cfg, real=tensormaps.argument):
        made.append(p.name)
        return real(p, array, cfg)

    def launch(self, who, sync=False, real=timing.TimedPair.launch):
        before = len(made)
        real(self, who, sync)
        timed.append(len(made) - before)
    monkeypatch.setattr(tensormaps, "argument", counting)
    monkeypatch.setattr(timing.TimedPair, "launch", launch)
    r = H.timing_step(make_ctx(HOPPER_GEMM, k, gemm_ok))
    assert r["status"] == "ok", r
    assert len(seen) > 10 and len(set(seen)) == len(seen)
    assert made and timed and not any(timed), "a map was encoded inside a timed launch"


def test_kernel_args_without_maps_are_unchanged():
    host_x = np.zeros(3, np.float32)
    ex = Exercise(name="s", kernel="s", source_file="-", chapter="test",
                  params=[In("x", np.float32, "n"), Out("y", np.float32, "n"), Scalar("n", "int", "n")],
                  sizes=[{"n": 3}], launch=lambda s, c: (1, 1, 0))
    assert D.kernel_args(ex, {"x": host_x, "y": "Y"}, {"n": np.int32(3)}, ex.launch_defaults) == [host_x, "Y", 3]


def test_guarded_views_are_aligned_for_tma():
    """TMA needs a 16-byte aligned base: every guarded view starts GUARD_BYTES (a multiple of 128) into its
    allocation, so it is as aligned as the allocation (CuPy's: 512 bytes)."""
    assert GUARD_BYTES % 128 == 0
    p = HOPPER_GEMM.params[0]
    before = after = np.zeros(GUARD_BYTES, np.uint8)
    g = Guarded(np, p, (3, 8), before, after)
    offset = g.view.__array_interface__["data"][0] - g.raw.__array_interface__["data"][0]
    assert offset == GUARD_BYTES


# -- the student's LAUNCH decides the boxes ----------------------------------------------------------------

def test_a_launch_whose_box_tma_cannot_copy_is_refused_before_anything_runs():
    assert launch_problem(HOPPER_GEMM, HOPPER_GEMM.launch_defaults) == ""
    msg = launch_problem(HOPPER_GEMM, {"bm": 128, "bn": 128, "bk": 128})
    assert "box ('bm', 'bk') = (128, 128)" in msg and "at most 128 bytes" in msg and "bk" in msg
    assert "(128, 64)" in msg   # what the reference uses
    assert "each 1..256" in launch_problem(HOPPER_GEMM, {"bm": 512, "bn": 128, "bk": 64})


# -- the spec ----------------------------------------------------------------------------------------------

REFERENCE = textwrap.dedent('''\
    // requires: sm_90a
    struct alignas(64) TensorMap { unsigned long long opaque[16]; };
    extern "C" __global__ void __launch_bounds__(384) hopper_gemm(const __grid_constant__ TensorMap a,
            const __grid_constant__ TensorMap b, float* c, int m, int n, int k)
    { }
    ''')

SPEC = '''
import numpy as np
from autograder import LARGER_THAN_L2, Exercise, Out, Points, Scalar, TensorMap, cdiv

def bf16_bits(rng, shape, dtype):
    return (rng.uniform(-1, 1, size=shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

EXERCISES = [Exercise(
    name="hopper_gemm", kernel="hopper_gemm", source_file="hopper_gemm.cu", {arch}
    params=[{a}, TensorMap("b", np.uint16, ("n", "k"), box=("bn", "bk"), swizzle="128B", gen=bf16_bits),
            Out("c", np.float32, ("m", "n")), Scalar("m", "int", "m"), Scalar("n", "int", "n"),
            Scalar("k", "int", "k")],
    sizes=[{{"m": 1, "n": 1, "k": {k1}}}, {{"m": 131, "n": 67, "k": 72}}, {{"m": LARGER_THAN_L2, "n": 256, "k": 256}}],
    launch=lambda s, c: ((cdiv(s["n"], c["bn"]), cdiv(s["m"], c["bm"])), 384, 0),
    launch_defaults={{"bm": 128, "bn": 128, "bk": 64}},
    reference=lambda v: {{"c": np.zeros((int(v["m"]), int(v["n"])), np.float32)}},
    points=Points(correctness=6, speed=4), floor_flops=lambda s: 2 * s["m"] * s["n"] * s["k"], peak="bf16",
    size_multiples={multiples}, tile={{"m": 128, "n": 128, "k": 64}}, {extra}
)]
'''
GOOD = dict(arch='arch="sm_90a",', a='TensorMap("a", np.uint16, ("m", "k"), box=("bm", "bk"), swizzle="128B", '
            'gen=bf16_bits)', multiples='{"k": 8}', k1="8",
            extra='techniques=("wgmma", "tma", "no_wgmma_serialization"),')


@pytest.fixture
def spec_dir(tmp_path, monkeypatch):
    (tmp_path / "solutions" / CH).mkdir(parents=True)
    (tmp_path / "solutions" / CH / "hopper_gemm.cu").write_text(REFERENCE)
    monkeypatch.setattr(loader, "SOLUTIONS_DIR", tmp_path / "solutions")
    return tmp_path


def load(spec_dir, **changes):
    path = spec_dir / f"{CH}.py"
    path.write_text(SPEC.format(**{**GOOD, **changes}))
    return loader.load_spec_file(path)


def load_error(spec_dir, **changes) -> str:
    with pytest.raises(SpecError) as info:
        load(spec_dir, **changes)
    return str(info.value)


def test_the_hopper_gemm_spec_loads(spec_dir):
    (ex,) = load(spec_dir)
    a, b = ex.params[:2]
    assert isinstance(a, TensorMap) and isinstance(a, In) and a.role == "in" and a.box == ("bm", "bk")
    assert ex.arch == "sm_90a" and ex.signature().startswith(
        "const __grid_constant__ TensorMap a, const __grid_constant__ TensorMap b, float* c, int m")
    assert a.box_for(ex.launch_defaults) == (128, 64)


def test_an_output_map_is_an_out():
    c = TensorMap("c", np.float32, ("m", "n"), (64, 32), role="out")
    assert isinstance(c, Out) and isinstance(c, TensorMap) and c.fill == "poison" and c.role == "out"
    assert dataclasses.replace(c, swizzle="64B").swizzle == "64B"


@pytest.mark.parametrize("changes,says", [
    ({"multiples": "{}", "k1": "1"}, r"k must be a multiple of 8 at every size: set size_multiples=\{'k': 8\}"),
    ({"multiples": '{"k": 4}', "k1": "4"}, r"multiple of 8; now 4"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k", 2), box=("bm", "bk"), swizzle="128B")'}, "2-D"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k + 8"), box=("bm", "bk"), swizzle="128B")'}, "one size name"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm", "bkk"), swizzle="128B")'}, "Did you mean 'bk'"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm", 300), swizzle="none")'}, r"each 1\.\.256"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm", 4), swizzle="none")'}, "multiple of 16 bytes"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm", 128), swizzle="128B")'}, "at most 128 bytes"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm",), swizzle="128B")'}, r"box should be \(rows, cols\)"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm", "bk"), swizzle="128b")'}, "Did you mean '128B'"),
    ({"a": 'TensorMap("a", np.complex64, ("m", "k"), box=("bm", "bk"))'}, "no TMA data type"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm", "bk"), role="inout")'}, "role should be 'in'"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm", "bk"), swizle="128B")'}, "Did you mean 'swizzle'"),
    ({"a": 'TensorMap("a", np.uint16, ("m", "k"), box=("bm", "bk"), fill=0)'}, "fill is for role='out'"),
    ({"arch": 'arch="sm_90",'}, "arch-specific target such as 'sm_90a'"),
    ({"arch": 'arch="hopper",'}, "arch-specific target"),
    ({"arch": 'arch="sm_90a", min_cc=(10, 0),'}, "leave min_cc out"),
    ({"arch": ""}, r"wgmma needs sm_90 or newer: set min_cc=\(9, 0\)"),
])
def test_what_tma_cannot_do_is_refused_at_load_saying_what_to_set(spec_dir, changes, says):
    import re
    msg = load_error(spec_dir, **changes)
    assert re.search(says, msg), msg


def test_an_exercise_with_maps_cannot_have_a_pipeline(spec_dir):
    ex = dataclasses.replace(HOPPER_GEMM, pipeline=object())
    from autograder.tensormaps import validate
    assert "pipeline driver passes arrays" in validate(ex)[1]


# -- the signature ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("param,says", [
    ("const __grid_constant__ TensorMap a", ""),
    ("__grid_constant__ const TensorMap a", ""),
    ("const __grid_constant__ CUtensorMap a", ""),
    ("const unsigned short* a", "should be the TMA map of a, passed by value"),
    ("const TensorMap& a", "passed by value"),
    ("const TensorMap a", "declare it `const __grid_constant__ TensorMap a`"),
    ("__grid_constant__ TensorMap a", "which needs const"),
])
def test_a_map_parameter_must_be_a_const_grid_constant_struct(param, says):
    src = REFERENCE.replace("const __grid_constant__ TensorMap a", param)
    msg = compare_signature(HOPPER_GEMM, src)
    assert (msg == "") if not says else (says in msg), msg
    if says:
        assert "expected (const __grid_constant__ TensorMap a, const __grid_constant__ TensorMap b" in msg


def test_the_struct_must_be_64_byte_aligned():
    src = REFERENCE.replace("struct alignas(64) TensorMap", "struct TensorMap")
    msg = compare_signature(HOPPER_GEMM, src)
    assert "64-byte aligned" in msg and "struct alignas(64) TensorMap { unsigned long long opaque[16]; };" in msg
    assert compare_signature(HOPPER_GEMM, REFERENCE.replace("alignas(64)", "__align__(64)")) == ""


def test_the_alignment_scan_stays_linear():
    """Student text in the parent: many struct heads without delimiters must not make the scan quadratic."""
    import time
    src = REFERENCE + "struct " * 50_000 + "TensorMap {" + "TensorMap{" * 25_000   # quadratic: minutes
    t = time.perf_counter()
    compare_signature(HOPPER_GEMM, src)
    assert time.perf_counter() - t < 5.0


# -- arch: one target, one GPU ------------------------------------------------------------------------------

def test_only_the_targets_own_gpu_grades_it():
    assert runs_on(HOPPER_GEMM, (9, 0))
    assert not runs_on(HOPPER_GEMM, (8, 0)) and not runs_on(HOPPER_GEMM, (10, 0)) and not runs_on(HOPPER_GEMM, (12, 0))
    r = policy.skipped_report(HOPPER_GEMM, "sm_80")
    assert r.status == Status.SKIPPED and r.points == 0 and r.counted_max_points == 0
    assert ("skipped: needs an sm_90 GPU (H100, H200): wgmma and TMA exist only in the sm_90a target; this GPU is "
            "sm_80") in r.reason and "regrade on an H100 or H200" in r.reason


@pytest.mark.parametrize("gpu,status", [("t4", Status.SKIPPED), ("h100", Status.PASSED)])
def test_an_arch_exercise_is_skipped_on_another_gpu_and_compiled_for_its_arch(fake_harness, saxpy_source, monkeypatch,
                                                                            gpu, status):
    from autograder import grade_source
    ex = get_exercise("01_first_kernel", "saxpy")
    monkeypatch.setattr(ex, "arch", "sm_90a")
    monkeypatch.setenv("FAKE_GPU", gpu)
    r = grade_source("01_first_kernel", "saxpy", saxpy_source + "\n// FAKE: ok")
    assert r.status == status, r.reason
    if gpu == "t4":
        assert "needs an sm_90 GPU (H100, H200)" in r.reason and "this GPU is sm_75" in r.reason


def test_without_a_gpu_the_kernel_is_compiled_for_the_arch(fake_harness, saxpy_source, monkeypatch):
    from autograder import grade_source
    ex = get_exercise("01_first_kernel", "saxpy")
    monkeypatch.setattr(ex, "arch", "sm_90a")
    monkeypatch.setenv("FAKE_GPU", "none")
    r = grade_source("01_first_kernel", "saxpy", saxpy_source + "\n// FAKE: ok")
    assert r.status == Status.NEEDS_GPU and "compiles (NVRTC, sm_90a)" in r.reason, r.reason


def test_the_solution_cell_compiles_for_the_arch():
    from autograder.sync import solution_cell_source
    ex = dataclasses.replace(get_exercise("01_first_kernel", "saxpy"), arch="sm_90a")
    assert solution_cell_source(ex).startswith("%%cuda --name saxpy --no-run --arch sm_90a\n")


def test_run_children_load_the_driver_bindings_only_for_maps(monkeypatch):
    """A run child loads cuda-python's driver before its file system closes, for an exercise with maps only; where
    cuda-python is missing, the error says what to install."""
    import sys
    import course
    from autograder.tensormaps import prepare_driver
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    prepare_driver(get_exercise("01_first_kernel", "saxpy"))   # no maps: nothing loaded, nothing missing
    with pytest.raises(course.FeatureUnavailable, match="pip install 'cuda-python"):
        prepare_driver(HOPPER_GEMM)
