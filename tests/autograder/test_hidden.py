"""Hidden size cases (autograder/hidden.py): drawn per grading seed, valid for every exercise of every chapter."""
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from ag_helpers import ROOT

from autograder import SpecError, chapters, get_exercise, load_chapter
from autograder import hidden
from autograder.loader import check_launch_result, load_spec_file, reference_source
from autograder.spec import PEAKS, CallExercise, Out, InOut, _Array, shape_of

ALL = [(ch, ex.name) for ch in chapters() for ex in load_chapter(ch)]
try:   # where the grader draws a case's inputs and runs the NumPy reference (no CuPy needed)
    from autograder.buffers import make_inputs, numpy_reference
except ImportError:
    from autograder.harness import make_inputs, numpy_reference

KERNELS = [(ch, n) for ch, n in ALL if not isinstance(get_exercise(ch, n), CallExercise)]
CALLS = [(ch, n) for ch, n in ALL if isinstance(get_exercise(ch, n), CallExercise)]

TEMPLATE = '''
from autograder import LARGER_THAN_L2, Exercise, In, InOut, Points, Scalar, Uniform, cdiv

EXERCISES = [
    Exercise(
        name="saxpy", kernel="saxpy", source_file="saxpy.cu",
        params=[Scalar("n", "int", "n"), Scalar("a", "float", Uniform(0.5, 2.0)),
                In("x", "float32", "n"), InOut("y", "float32", "n")],
        sizes=[{{"n": 1}}, {{"n": 2}}, {{"n": 33}}, {{"n": 1_000_003}}, {{"n": LARGER_THAN_L2}}],
        launch=lambda s, cfg: (cdiv(s["n"], cfg["block"]), cfg["block"], 0), launch_defaults={{"block": 256}},
        reference=lambda v: {{"y": v["a"] * v["x"] + v["y"]}},
        points=Points(correctness=6, speed=4), floor_bytes=lambda s: 12 * s["n"],
        {extra}
    ),
]
'''


def load(tmp_path, extra=""):
    path = tmp_path / "01_first_kernel.py"   # named after a chapter, so its solutions/ sources are found
    path.write_text(TEMPLATE.format(extra=extra))
    return load_spec_file(path)


def load_error(tmp_path, extra) -> str:
    with pytest.raises(SpecError) as info:
        load(tmp_path, extra)
    return str(info.value)


def test_same_seed_same_cases_and_seeds_differ():
    """Does a seed always give the same cases, and do different seeds give different ones?"""
    for ch, name in ALL:
        ex = get_exercise(ch, name)
        assert hidden.draw_cases(ex, 7) == hidden.draw_cases(ex, 7), name
        drawn = {json.dumps(hidden.draw_cases(ex, seed)) for seed in range(20)}
        assert len(drawn) >= 18, (name, len(drawn))


def test_exercises_with_the_same_sizes_draw_differently():
    """Do two exercises with the same size names draw different cases from one grading seed?"""
    a, b = get_exercise("07_staged_gemm", "sgemm_tiled"), get_exercise("07_staged_gemm", "sgemm_regtile")
    assert a.size_names == b.size_names
    assert hidden.draw_cases(a, 3) != hidden.draw_cases(b, 3)


def test_count_seed_and_disabling():
    """Does count override hidden_sizes, 0 give none, and any int (huge, negative) serve as a seed?"""
    ex = get_exercise("01_first_kernel", "saxpy")
    assert ex.hidden_sizes == 3 and len(hidden.draw_cases(ex, 1)) == 3
    assert len(hidden.draw_cases(ex, 1, count=8)) == 8
    assert hidden.draw_cases(ex, 1, count=0) == []
    assert len(hidden.draw_cases(ex, -5)) == 3 and len(hidden.draw_cases(ex, 1 << 200)) == 3
    with pytest.raises(TypeError):
        hidden.draw_cases(ex, "seed")


@pytest.mark.parametrize("chapter,name", ALL)
def test_every_exercise_draws_valid_cases_for_50_seeds(chapter, name):
    """For 50 seeds, is every hidden case concrete, in range, on its multiples, a valid launch with positive
    shapes, within its Constant capacities, allowed by size_rule, under the byte cap, and never a public case?"""
    ex = get_exercise(chapter, name)
    public = hidden.public_cases(ex)
    bounds, units = hidden.bounds(ex), hidden.units(ex)
    for seed in range(50):
        cases = hidden.draw_cases(ex, seed)
        assert len(cases) == ex.hidden_sizes
        keys = [tuple(c[k] for k in ex.size_names) for c in cases]
        assert len(set(keys)) == len(keys) and not set(keys) & public, cases
        for case in cases:
            assert list(case) == ex.size_names and all(type(v) is int for v in case.values()), case
            for k, v in case.items():
                lo, hi = bounds[k]
                assert lo <= v <= hi and v % units[k] == 0, (k, v, bounds[k], units[k])
            if ex.size_rule is not None:
                assert ex.size_rule(dict(case)) == "", case
            if isinstance(ex, CallExercise):
                assert ex.case_bytes(case) <= hidden.MAX_CASE_BYTES
            else:
                assert check_launch_result(ex.launch(dict(case), dict(ex.launch_defaults))) == "", case
                for p in ex.params:
                    if isinstance(p, _Array):
                        assert all(d >= 1 for d in shape_of(p.shape, case)), (p.name, case)
                for c in ex.constants:
                    assert math.prod(shape_of(c.shape, case)) <= ex.constant_capacity(c), case
                assert ex.array_bytes(case) <= hidden.MAX_CASE_BYTES, case
            assert hidden.case_problem(ex, case) == ""


@pytest.mark.parametrize("chapter,name", KERNELS)
def test_numpy_reference_runs_at_hidden_cases(chapter, name):
    """Does the exercise's NumPy reference run on inputs drawn at hidden cases and give outputs of the
    declared shapes?"""
    ex = get_exercise(chapter, name)
    assert callable(ex.reference)
    for seed in range(6):
        for case in hidden.draw_cases(ex, seed):
            host, scalars = make_inputs(ex, case, np.random.default_rng(seed))
            raw = ex.reference({**case, **scalars, **{k: v.copy() for k, v in host.items()}})
            out = numpy_reference(ex, case, host, scalars)
            for p in ex.arrays:
                if isinstance(p, (Out, InOut)):
                    assert np.asarray(raw[p.name]).size == math.prod(shape_of(p.shape, case)), (p.name, case)
                    assert out[p.name].shape == shape_of(p.shape, case)
                    if p.np_dtype.kind == "f":
                        assert np.isfinite(out[p.name]).all(), (p.name, case)


@pytest.mark.parametrize("chapter,name", CALLS)
def test_reference_call_passes_at_hidden_cases(chapter, name):
    """Does the reference cuBLAS call pass the grader's driver (on its NumPy model of cuBLAS) at hidden
    cases, whose leading dimensions are padded by arbitrary amounts?"""
    from autograder.launchcfg import parse_call_cell
    from drivers.cublas_calls import grade_case
    from drivers.two_stage import case_verdict
    ex = get_exercise(chapter, name)
    call = parse_call_cell(reference_source(ex), ex.name, ex.parser)
    for seed in range(4):
        for case in hidden.draw_cases(ex, seed):
            if ex.magic == "%%streams":  # chapter 03's schedule: its order, the driver's pure part
                assert case_verdict(call, case["n"]) == ([], None), case
            else:
                assert grade_case(ex.name, call, case, seed, backend="numpy")["status"] == "passed", case


def test_values_cover_odd_multiples_and_tile_edges():
    """Over many seeds, do a variable's values include odd ones, primes, multiples of 4 (not of 32), of 32
    and of the tile, and tile multiples plus and minus one?"""
    ex = get_exercise("01_first_kernel", "saxpy")
    assert hidden.tiles(ex) == {"n": 256}
    seen = {"odd": 0, "prime": 0, "mult4 only": 0, "mult32": 0, "tile": 0, "tile+1": 0, "tile-1": 0}
    for seed in range(200):
        for case in hidden.draw_cases(ex, seed):
            n = case["n"]
            seen["odd"] += n % 2 == 1
            seen["prime"] += "prime" in hidden.categories_of(n, 1, 256)
            seen["mult4 only"] += n % 4 == 0 and n % 32 != 0
            seen["mult32"] += n % 32 == 0
            seen["tile"] += n % 256 == 0
            seen["tile+1"] += n > 256 and n % 256 == 1
            seen["tile-1"] += n % 256 == 255
    assert all(v >= 5 for v in seen.values()), seen


@pytest.mark.parametrize("chapter,name", ALL)
def test_every_grading_tests_a_tile_edge_and_an_aligned_value(chapter, name):
    """In a single grading (3 cases), does each size variable take a value just off a tile multiple (tile * j
    +- its unit) and an aligned one (a multiple of 4 and of its unit): always where no size_rule refuses cases,
    and in most gradings where one does (a refused plan gives way)?"""
    ex = get_exercise(chapter, name)
    units, tiles, bounds = hidden.units(ex), hidden.tiles(ex), hidden.bounds(ex)
    covered = total = 0
    for seed in range(100):
        cases = hidden.draw_cases(ex, seed)
        for k in ex.size_names:
            u, t, hi = units[k], tiles[k], bounds[k][1]
            if hi < 2 * t:
                continue
            values = [c[k] for c in cases]
            ok = (any(v % t in (u % t, (t - u) % t) for v in values)
                  and any(v % math.lcm(u, 4) == 0 for v in values))
            assert ok or ex.size_rule is not None, (seed, k, values)
            covered, total = covered + ok, total + 1
    assert covered >= 0.8 * total, (covered, total)


@pytest.mark.parametrize("chapter,name,size,unit,tile", [
    ("08_tensor_cores", "wmma_gemm", "n", 16, 64),
    ("08_tensor_cores", "mma_gemm", "k", 8, 32),
    ("07_staged_gemm", "sgemm_regtile", "k", 1, 8),
])
def test_multiples_contract_moves_tile_edges_to_the_unit(chapter, name, size, unit, tile):
    """For a size that must be a multiple of u, are all values multiples of u, and do 'just above/below a
    tile multiple' become tile * j +- u, next to plain tile multiples and odd numbers of units?"""
    ex = get_exercise(chapter, name)
    assert hidden.units(ex)[size] == unit and hidden.tiles(ex)[size] == tile
    values = [c[size] for seed in range(200) for c in hidden.draw_cases(ex, seed)]
    assert all(v % unit == 0 for v in values)
    assert any(v > tile and v % tile == unit for v in values)
    assert any(v % tile == tile - unit for v in values)
    assert any(v % tile == 0 for v in values)
    assert any((v // unit) % 2 == 1 for v in values)


def test_cross_size_contracts_hold():
    """Are conv_const's taps within its __constant__ w[1024], colmajor_index's lda >= rows, the call
    exercises' leading dimensions >= their row lengths, and mma_gemm's m free while n, k stay multiples of 8?"""
    conv = get_exercise("09_convolution", "conv_const")
    assert hidden.bounds(conv)["g"] == (1, 1024)
    col = get_exercise("10_cublas", "colmajor_index")
    sg = get_exercise("10_cublas", "sgemm_rowmajor")
    lin = get_exercise("10_cublas", "linear_rowmajor")
    mma = get_exercise("08_tensor_cores", "mma_gemm")
    odd_m = False
    for seed in range(100):
        assert all(c["g"] <= 1024 for c in hidden.draw_cases(conv, seed))
        assert all(c["lda"] >= c["rows"] for c in hidden.draw_cases(col, seed))
        assert all(c["lda"] >= c["k"] and c["ldb"] >= c["n"] and c["ldc"] >= c["n"]
                   for c in hidden.draw_cases(sg, seed))
        assert all(c["ldx"] >= c["k"] and c["ldw"] >= c["k"] and c["ldy"] >= c["n"]
                   for c in hidden.draw_cases(lin, seed))
        cases = hidden.draw_cases(mma, seed)
        assert all(c["n"] % 8 == 0 and c["k"] % 8 == 0 for c in cases)
        odd_m |= any(c["m"] % 2 for c in cases)
    assert odd_m
    assert "lda" in hidden.case_problem(col, {"rows": 40, "cols": 3, "lda": 39})
    assert "Constant 'w'" in hidden.case_problem(conv, {"n": 5, "g": 1025}) or "range" in hidden.case_problem(
        conv, {"n": 5, "g": 1025})


def test_case_problem_names_what_is_wrong():
    """Does case_problem say why a case is refused: a missing size, a non-multiple, out of range, too big?"""
    wmma = get_exercise("08_tensor_cores", "wmma_gemm")
    assert "sizes" in hidden.case_problem(wmma, {"m": 16, "n": 16})
    assert "multiple of 16" in hidden.case_problem(wmma, {"m": 17, "n": 16, "k": 16})
    assert "range" in hidden.case_problem(wmma, {"m": 16, "n": 16, "k": 4096})
    scale = get_exercise("04_coalescing", "row_scale")
    assert "MiB" in hidden.case_problem(scale, {"rows": 1009, "cols": 100_000})
    assert hidden.case_problem(scale, {"rows": 3, "cols": 129}) == ""


def test_template_loads_with_hidden_fields(tmp_path):
    """Do tile, size_range and hidden_sizes load, and does hidden_sizes=0 draw nothing?"""
    (ex,) = load(tmp_path, 'tile={"n": 128}, size_range={"n": (1, 5000)}, hidden_sizes=4,')
    cases = hidden.draw_cases(ex, 1)
    assert len(cases) == 4 and all(1 <= c["n"] <= 5000 for c in cases)
    (ex,) = load(tmp_path, "hidden_sizes=0,")
    assert hidden.draw_cases(ex, 1) == []


def test_impossible_size_rule_fails_loading(tmp_path):
    """Does a size_rule that allows nothing but the public cases fail at load, saying it cannot draw
    hidden cases and why the last draw was refused?"""
    msg = load_error(tmp_path, 'size_rule=lambda s: "" if s["n"] in (1, 2, 33, 1_000_003) else "only the public '
                               'sizes",')
    assert "exercise 'saxpy', field 'hidden_sizes'" in msg and "cannot draw hidden size cases" in msg
    assert "only the public sizes" in msg or "repeats a public case" in msg


def test_size_rule_that_refuses_a_public_case_fails_loading(tmp_path):
    """Does a size_rule that refuses one of the spec's own public cases fail at load, naming the case?"""
    msg = load_error(tmp_path, 'size_rule=lambda s: "too small" if s["n"] < 3 else "",')
    assert "field 'size_rule'" in msg and "{'n': 1}" in msg and "too small" in msg
    msg = load_error(tmp_path, "size_rule=42,")
    assert "field 'size_rule'" in msg


@pytest.mark.parametrize("extra,field,says", [
    ('tile={"nn": 32},', "tile", "Did you mean 'n'?"),
    ('tile={"n": 0},', "tile", "positive int"),
    ('size_range={"m": (1, 9)},', "size_range", "'m' is not a size of this exercise. Sizes: n"),
    ('size_range={"n": (9, 2)},', "size_range", "1 <= lo <= hi"),
    ('size_range={"n": [1, 9]},', "size_range", "(lo, hi)"),
    ("hidden_sizes=-1,", "hidden_sizes", "from 0"),
    ("hidden_sizes=True,", "hidden_sizes", "int"),
    ('size_range={"n": (1, 1)}, hidden_sizes=2,', "hidden_sizes", "cannot draw"),
])
def test_hidden_fields_are_validated(tmp_path, extra, field, says):
    """Is each malformed hidden-size field refused at load, naming file, exercise and field?"""
    msg = load_error(tmp_path, extra)
    assert "01_first_kernel.py" in msg and "exercise 'saxpy'" in msg and f"field {field!r}" in msg and says in msg


def test_misspelt_hidden_field_says_did_you_mean(tmp_path):
    """Does a misspelt new field name get a did-you-mean?"""
    msg = load_error(tmp_path, "hiden_sizes=2,")
    assert "no field 'hiden_sizes'" in msg and "Did you mean 'hidden_sizes'?" in msg


@pytest.mark.parametrize("peak,says", [("fp23", "Did you mean 'fp32'?"), ("BF16", "Did you mean 'bf16'?"),
                                       ("fp64", "should be one of")])
def test_peak_is_validated(tmp_path, peak, says):
    """Is an unknown peak refused at load with the allowed values and a did-you-mean?"""
    msg = load_error(tmp_path, f"peak={peak!r},")
    assert "field 'peak'" in msg and says in msg


def test_peaks_of_the_chapters():
    """Do tensor-core exercises divide their FLOP floor by the BF16 peak, and the FP32 SGEMMs, the
    convolution and the damped waves by the FP32 one?"""
    for ch, name in KERNELS:
        assert get_exercise(ch, name).peak in PEAKS
    assert get_exercise("08_tensor_cores", "mma_gemm").peak == "bf16"
    assert get_exercise("08_tensor_cores", "wmma_gemm").peak == "bf16"
    for ch, name in [("07_staged_gemm", "sgemm_tiled"), ("07_staged_gemm", "sgemm_regtile"),
                     ("10_cublas", "sgemm_bias_relu"), ("09_convolution", "conv_blocked"),
                     ("09_convolution", "damped_waves")]:
        assert get_exercise(ch, name).peak == "fp32"
    (ex,) = load_chapter("01_first_kernel")[:1]
    assert ex.peak == "fp32"


GPU_SCRIPT = r'''
# the reference kernels through course.compile (not the harness's internals), checked as the grader checks
import json, sys
import numpy as np
import cupy as cp
import course
from autograder import chapters, hidden, load_chapter
from autograder.loader import reference_source
from autograder.spec import CallExercise, Constant, In, InOut, Out, Scalar, Tolerance
try:
    from autograder.buffers import make_inputs, numpy_reference
except ImportError:
    from autograder.harness import make_inputs, numpy_reference
bad, counted = [], 0
for ch in chapters():
    for ex in load_chapter(ch):
        cases = [c for s in range(int(sys.argv[1])) for c in hidden.draw_cases(ex, s)]
        counted += len(cases)
        if isinstance(ex, CallExercise):
            from autograder.launchcfg import parse_call_cell
            from drivers.cublas_calls import grade_case
            call = parse_call_cell(reference_source(ex), ex.name)
            for i, c in enumerate(cases):
                r = grade_case(ex.name, call, c, i)
                if r["status"] != "passed":
                    bad.append([ex.name, c, r["message"]])
            continue
        module = course.compile(reference_source(ex), options=tuple(ex.options), name=ex.source_file)
        kernel = module.kernel(ex.kernel)
        for i, c in enumerate(cases):
            host, scalars = make_inputs(ex, c, np.random.default_rng([5, i]))
            want = numpy_reference(ex, c, host, scalars)
            dev = {}
            for p in ex.params:
                if isinstance(p, (In, InOut)):
                    dev[p.name] = cp.asarray(host[p.name])
                elif isinstance(p, Out):
                    fill = p.fill if p.fill != "poison" else np.nan if p.np_dtype.kind == "f" else 0
                    dev[p.name] = cp.full(want[p.name].shape, fill, dtype=p.np_dtype)
                elif isinstance(p, Constant):
                    w = cp.asarray(host[p.name])
                    module.get_global(p.name).copy_from_device(w.data, w.nbytes)
            args = [scalars[p.name] if isinstance(p, Scalar) else dev[p.name] for p in ex.kernel_params]
            grid, block, smem = ex.launch(dict(c), dict(ex.launch_defaults))
            kernel(grid, block, *args, shared_mem=smem)
            cp.cuda.runtime.deviceSynchronize()
            tol = ex.tolerance
            rtol, atol = ((0.0, 0.0) if tol == "exact" else (tol.rtol, tol.atol) if isinstance(tol, Tolerance)
                          else (None, None))
            for name, ref in want.items():
                r = course.check(cp.asnumpy(dev[name]), ref, rtol=rtol, atol=atol, name=name)
                if not r.ok:
                    bad.append([ex.name, c, r.message])
print(json.dumps({"bad": bad, "cases": counted}))
'''


@pytest.mark.gpu
def test_reference_solutions_pass_at_hidden_cases():
    """On a GPU, does every reference kernel (and reference cuBLAS call) give the NumPy reference's output,
    within the spec's tolerance, at the hidden cases of 20 seeds?"""
    r = subprocess.run([sys.executable, "-c", GPU_SCRIPT, "20"], capture_output=True, text=True, cwd=str(ROOT),
                       timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["cases"] > 0 and got["bad"] == [], got["bad"]
