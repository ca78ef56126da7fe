"""Chapter 09's damped_waves exercise (fast math only where it is safe) on the CPU: the spec's inputs keep w x
exact in float32, its float64 reference's table lookup is the direct sum, every kernel of the exercise (the
reference, the notebook's starter, the corpus) compiles for sm_75, sm_80 and sm_90, the reference's machine code
is the intrinsics without the library's slow paths, the corpus states what the notebook hands out, and a float32
model of each kernel puts the reference and the accurate library inside the tolerance and naive fast math and
the flawed reductions outside it, at every draw of the coefficients tried.

The model rounds as the GPU does where that is documented (float32 products and sums, fmaf's single rounding,
__cosf's FMUL.RZ by 1/(2 pi) before MUFU.COS) and adds the special-function unit's own error as uniform noise at
its documented bound (2^-21.41 absolute for MUFU.COS, on every term), which overstates it: a margin, not a claim.
Without that noise the same model reproduces the errors chapter 09's section 9 recorded on an H200, IEEE and
--use_fast_math alike (test_model_reproduces_section_9s_recording).

On a GPU: tests/autograder/test_corpus_gpu.py -k damped_waves -s (verdicts, speed ratios) and
test_measured_errors_agree_with_the_model below (-m gpu -s: the measured errors next to the tolerance).
"""
import json
import re

import numpy as np
import pytest

from ag_corpus import parse_expect
from ag_helpers import ROOT, gpu_present
from repo_helpers import nvrtc_or_skip
from autograder import get_exercise

CH, NAME = "09_convolution", "damped_waves"
CORPUS = ROOT / "tests" / "autograder" / "corpus" / CH / NAME
NOTEBOOK = ROOT / "exercises" / "source" / CH / f"{CH}.ipynb"
SOLUTION = ROOT / "solutions" / CH / f"{NAME}.cu"
STARTER = f"{NAME}_starter"
ARCHS = ("sm_75", "sm_80", "sm_90")
F32 = np.float32
INV_2PI, HI, LO = F32(1 / (2 * np.pi)), F32(2 * np.pi), F32(2 * np.pi - float(F32(2 * np.pi)))
LOG2E = F32(np.log2(np.e))
MUFU_COS_ABS = 2.0 ** -21.41       # CUDA's documented bound for __cosf on [-pi, pi]
RCP_REL, EX2_REL = 2.0 ** -23, 2.0 ** -22


@pytest.fixture(scope="module")
def ex():
    return get_exercise(CH, NAME)


def draw(ex, n, seed):
    """x, d, w, c from the spec's own generators (the grader's draws), in signature order."""
    rng = np.random.default_rng(seed)
    return {p.name: p.gen(rng, (n,) if p.name == "x" else (32,), np.float32)
            for p in ex.params if p.name in ("x", "d", "w", "c")}


# -- a float32 model of the kernels ---------------------------------------------------------------------------

def rn(v):
    """Round a float64 array to float32 (to nearest)."""
    return np.asarray(v, np.float64).astype(F32)


def mul(a, b):
    return rn(np.float64(a) * np.asarray(b, np.float64))     # exact in float64, then one rounding


def fma(a, b, c):
    return rn(np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64))


def mul_rz(a, b):
    """float32 a * b rounded toward zero: the FMUL.RZ __cosf puts before MUFU.COS."""
    exact = np.asarray(a, np.float64) * np.float64(b)
    r = exact.astype(F32)
    over = np.abs(r.astype(np.float64)) > np.abs(exact)
    r[over] = np.nextafter(r[over], F32(0))
    return r


def noise(rng, shape, bound):
    return rng.uniform(-bound, bound, shape)


def mufu(fn, r, rng, bound=MUFU_COS_ABS):
    """__cosf / __sinf: the argument to turns by FMUL.RZ, then the special-function unit (noise up to ``bound``)."""
    return fn(2 * np.pi * mul_rz(r, INV_2PI).astype(np.float64)) + noise(rng, r.shape, bound)


def mufu_cos(r, rng):
    return mufu(np.cos, r, rng)


def fast_exp(v, rng):
    return np.exp2(mul(v, LOG2E).astype(np.float64)) * (1 + noise(rng, v.shape, EX2_REL))


def fast_div(a, b, rng):
    return (np.asarray(a, np.float64) / b) * (1 + noise(rng, a.shape, RCP_REL))


def cosine(kind, t, rng):
    """cos(t) for float32 t = w x as each kernel computes it."""
    if kind in ("library", "fast_exp_div"):
        return np.cos(t.astype(np.float64))                 # cosf: within 2 ulp, modelled exact
    if kind == "naive":
        return mufu_cos(t, rng)
    q = rn(np.rint(mul(t, INV_2PI)))
    if kind == "reference":
        return mufu_cos(fma(-q, LO, fma(-q, HI, t)), rng)
    if kind == "one_constant":
        return mufu_cos(fma(-q, HI, t), rng)
    if kind == "turns":
        u = mul(t, INV_2PI)
        return mufu_cos(mul(HI, rn(u - np.rint(u))), rng)
    raise ValueError(kind)


def model(kind, v, seed=0):
    """y as the kernel ``kind`` computes it in float32, one term after the other."""
    rng = np.random.default_rng(seed)
    x = v["x"]
    s = np.zeros_like(x)
    for d, w, c in zip(v["d"], v["w"], v["c"]):
        t = mul(w, x)
        arg = rn(-np.float64(d) * x)
        e = np.exp(arg.astype(np.float64)) if kind == "library" else fast_exp(arg, rng)
        num = mul(rn(e), rn(cosine(kind, t, rng)))
        den = fma(c, x, F32(1))
        term = rn(num.astype(np.float64) / den) if kind == "library" else rn(fast_div(num, den, rng))
        s = rn(s.astype(np.float64) + term)
    return s


def excess(ex, got, want64):
    """How far each element is past the tolerance (<= 0 passes), as the grader checks: want rounded to float32."""
    want = want64.astype(F32).astype(np.float64)
    tol = ex.tolerance
    return np.abs(got.astype(np.float64) - want) - (tol.atol + tol.rtol * np.abs(want))


def test_model_reproduces_section_9s_recording():
    """Section 9 of the chapter recorded its damped_sum kernel (32 terms e^{-kx/32} sin(kx) / (1 + k x^2), x in
    [0, 4)) on an H200, IEEE and --use_fast_math. Does the model, without MUFU's noise, give the recorded median
    and 99th-percentile errors (units of 2^-24 of the terms' magnitudes) to within 20%? Then FMUL.RZ is where
    __sinf's error at large arguments comes from, and MUFU's own error is far below its documented bound."""
    path = ROOT / "benchmarks" / "results" / "profiles" / "09-fp-flags-nvidia-h200.json"
    if not path.is_file():
        pytest.skip("no recording of chapter 09's section 9")
    rows = {r["flags"]: r for r in json.loads(path.read_text())["rows"]}
    x = np.random.default_rng(9).random(1 << 17, dtype=np.float32) * F32(4)
    k = np.arange(1, 33, dtype=np.float64)[:, None]
    terms = np.exp(-k * x / 32) * np.sin(k * x) / (1 + k * x.astype(np.float64) ** 2)
    want, scale = terms.sum(axis=0), np.abs(terms).sum(axis=0)
    rng = np.random.default_rng(0)
    for flags, fast in (("default (IEEE)", False), ("--use_fast_math", True)):
        s = np.zeros_like(x)
        for kk in range(1, 33):
            kx = mul(F32(kk), x)
            arg = mul(-kx, F32(1 / 32))
            e = fast_exp(arg, rng) if fast else np.exp(arg.astype(np.float64))
            sn = mufu(np.sin, kx, rng, bound=0.0) if fast else np.sin(kx.astype(np.float64))
            num, den = mul(rn(e), rn(sn)), fma(kx, x, F32(1))
            s = rn(s.astype(np.float64) + rn(fast_div(num, den, rng) if fast else num.astype(np.float64) / den))
        err = np.abs(s.astype(np.float64) - want) / scale / 2.0 ** -24
        for stat, q in (("median error", 0.5), ("99th pct", 0.99)):
            assert np.quantile(err, q) == pytest.approx(rows[flags][stat], rel=0.2), (flags, stat)


# -- the spec -------------------------------------------------------------------------------------------------

def test_inputs_keep_w_x_exact_and_in_range(ex):
    """Do the generators draw x in [0, 8) on 2^-12, w in [0, 80) on 1/4, d in [0, 0.125), c in [0, 0.25), so that
    every float32 w x is exact and the cosine's arguments reach several hundred radians?"""
    v = draw(ex, 200_000, 1)
    x, d, w, c = (v[k].astype(np.float64) for k in "xdwc")
    assert all(v[k].dtype == np.float32 for k in v)
    assert 0 <= x.min() and x.max() < 8 and np.all(x * 4096 == np.rint(x * 4096))
    assert 0 <= w.min() and w.max() < 80 and np.all(w * 4 == np.rint(w * 4))
    assert 0 <= d.min() and d.max() < 0.125 and 0 <= c.min() and c.max() < 0.25
    prod = np.outer(w, x)
    assert np.array_equal(np.outer(v["w"], v["x"]).astype(np.float64), prod)   # float32 products, exact
    big = draw(ex, 1 << 16, 2)
    assert (big["w"].max() * big["x"].max()) > 400


def test_reference_lookup_is_the_direct_sum(ex):
    """Does the float64 reference's table lookup (taken for more than 32,768 elements on the grid) give the sum of
    the formula, and does an x off the grid take the direct path?"""
    v = draw(ex, 50_000, 3)
    got = ex.reference(v)["y"]
    x = v["x"].astype(np.float64)[:, None]
    d, w, c = (v[k].astype(np.float64)[None, :] for k in "dwc")
    want = (np.exp(-d * x) * np.cos(w * x) / (1 + c * x)).sum(axis=1)
    assert got.dtype == np.float64 and np.abs(got - want).max() < 1e-12
    off = dict(v, x=v["x"] + F32(1e-5))
    x = off["x"].astype(np.float64)[:, None]
    want = (np.exp(-d * x) * np.cos(w * x) / (1 + c * x)).sum(axis=1)
    assert np.abs(ex.reference(off)["y"] - want).max() < 1e-12


def test_spec_fields(ex):
    """Correctness and speed points, a threshold with the reference's room, the tolerance the model was run
    against, the speed size the benchmark row uses, one element per thread."""
    assert ex.points.correctness > 0 and ex.points.speed > 0 and ex.speed_threshold <= 0.9
    assert (ex.tolerance.rtol, ex.tolerance.atol) == (2e-6, 2e-5)
    assert ex.speed_size == {"n": 1 << 24}
    for n in (1, 255, 256, 257, 100_003):
        grid, block, smem = ex.launch({"n": n}, dict(ex.launch_defaults))
        assert grid * block >= n > (grid - 1) * block and smem == 0


# -- the model against the tolerance --------------------------------------------------------------------------

SEEDS = range(6)
N_MODEL = 20_000


@pytest.fixture(scope="module")
def modelled(ex):
    """{kind: [fraction of elements past the tolerance, per coefficient draw]} and the largest excess of each."""
    kinds = ("library", "fast_exp_div", "reference", "one_constant", "turns", "naive")
    frac, worst = {k: [] for k in kinds}, {k: -np.inf for k in kinds}
    for seed in SEEDS:
        v = draw(ex, N_MODEL, 100 + seed)
        want = ex.reference(v)["y"]
        for k in kinds:
            e = excess(ex, model(k, v, seed), want)
            frac[k].append(float((e > 0).mean()))
            worst[k] = max(worst[k], float(e.max()))
    print({k: (min(f), max(f)) for k, f in frac.items()})
    return frac, worst


def test_accurate_kernels_pass_with_room(ex, modelled):
    """Do the accurate library, the fast exp and division with cosf, and the reference stay inside the
    tolerance at every element of every draw, with at least half of the absolute term to spare?"""
    frac, worst = modelled
    for kind in ("library", "fast_exp_div", "reference"):
        assert max(frac[kind]) == 0, kind
        assert worst[kind] <= -ex.tolerance.atol / 2, (kind, worst[kind])


@pytest.mark.parametrize("kind,at_least", [("naive", 0.2), ("turns", 0.05), ("one_constant", 0.001)])
def test_flawed_kernels_fail_at_every_draw(modelled, kind, at_least):
    """Does each flawed kernel put at least this share of the elements past the tolerance at every draw, so that
    it fails at the public n = 100,003 (and, the first two, at n = 1009) whatever the coefficients?"""
    frac, _ = modelled
    assert min(frac[kind]) >= at_least, (kind, frac[kind])


# -- the kernels ----------------------------------------------------------------------------------------------

def notebook_starter() -> str:
    """The body of the exercise notebook's `%%cuda --name damped_waves_starter` cell."""
    magic = f"%%cuda --name {STARTER}\n"
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    found = ["".join(c["source"]) for c in nb["cells"] if "".join(c["source"]).startswith(magic)]
    assert len(found) == 1, f"{NOTEBOOK.name}: expected one cell starting {magic!r}, found {len(found)}"
    return found[0][len(magic):]


def kernel_sources():
    """(id, source, kernel name): the reference, the notebook's starter, the corpus."""
    out = [("solution", SOLUTION.read_text(), NAME), ("starter", notebook_starter(), STARTER)]
    return out + [(f"corpus/{p.stem}", p.read_text(), NAME) for p in sorted(CORPUS.glob("*.cu"))]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_compiles(arch):
    course = nvrtc_or_skip()
    for ident, src, kernel in kernel_sources():
        prog = course.compile_for_arch(src, arch, name=f"{ident.replace('/', '_')}.cu")
        assert kernel in prog.kernel_names and prog.cubin, ident


def test_reference_is_the_intrinsics_and_the_starter_is_not():
    """On sm_90: does the reference hold one MUFU.COS, .EX2 and .RCP per term and neither the library's slow paths
    (CALL) nor local memory, while the starter's cosf is a polynomial (no MUFU.COS)?"""
    course = nvrtc_or_skip()
    try:
        ref = course.sass_opcodes(course.sass_of(course.compile_for_arch(SOLUTION.read_text(), "sm_90").cubin),
                                  modifiers=True)[NAME]
        start = course.sass_opcodes(course.sass_of(course.compile_for_arch(notebook_starter(), "sm_90").cubin),
                                    modifiers=True)[STARTER]
    except FileNotFoundError as exc:
        pytest.skip(f"no disassembler: {exc}")
    loop = ref["MUFU.COS"]                  # terms in the unrolled loop body (the tail loop, if any, too)
    assert loop >= 8 and ref["MUFU.EX2"] == loop and ref["MUFU.RCP"] == loop and ref["FMUL.RZ"] == loop, ref
    assert not any(op.startswith(("CALL", "LDL", "STL")) for op in ref), ref
    assert "MUFU.COS" not in start and "MUFU.SIN" not in start, start


def test_corpus_states_what_the_notebook_hands_out(ex):
    """Is corpus starter.cu the notebook's starter renamed (comments aside), expected slow with the correctness
    points; the stub zero; the calibration case (fast exp and division, accurate cosf) correct but slow, as
    measured on an H200 (0.71 of the reference); and at least three flawed kernels expected to fail?"""
    def code(src):
        return [ln.strip() for ln in src.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    assert code((CORPUS / "starter.cu").read_text()) == code(notebook_starter().replace(STARTER, NAME))
    exp = {p.stem: parse_expect(p) for p in CORPUS.glob("*.cu")}
    assert (exp["starter"]["status"], exp["starter"]["points"]) == ("slow", ex.points.correctness)
    assert (exp["stub"]["status"], exp["stub"]["points"]) == ("failed", 0.0)
    assert (exp["fast_exp_div"]["status"], exp["fast_exp_div"]["points"]) == ("slow", ex.points.correctness)
    wrong = sorted(s for s, e in exp.items() if s != "stub" and e.get("points") == 0.0)
    assert wrong == ["naive_fast_math", "no_hi_lo_split", "reduce_in_turns"], wrong


def test_solution_region_is_the_whole_body():
    """Does the stub the student gets keep only the signature (the solution region holds every statement), so
    the untouched stub writes nothing and scores 0?"""
    src = SOLUTION.read_text()
    body = src[src.index("{", src.index("damped_waves(")) + 1:src.rindex("}")]
    assert re.fullmatch(r"\s*// ### BEGIN SOLUTION\n.*// ### END SOLUTION\s*", body, re.S), body[:200]


# -- GPU: the measured errors ----------------------------------------------------------------------------------

@pytest.mark.gpu
def test_measured_errors_agree_with_the_model(ex):
    """On the GPU, at 2^20 elements and three draws: do the reference, the starter and fast_exp_div pass with
    room and the flawed corpus kernels fail, as the model says? Prints each kernel's largest error and the share
    of elements past the tolerance (-s), for calibrating the tolerance."""
    if not gpu_present():
        pytest.skip("needs an NVIDIA GPU")
    import cupy
    course = nvrtc_or_skip()
    kernels = {ident: course.compile(src).kernel(kernel) for ident, src, kernel in kernel_sources()
               if ident != "corpus/stub"}
    n = 1 << 20
    for seed in range(3):
        v = draw(ex, n, 500 + seed)
        args = [cupy.asarray(a) for a in v.values()]
        want = ex.reference(v)["y"]
        for ident, k in kernels.items():
            y = cupy.full(n, np.nan, dtype=cupy.float32)
            k(-(-n // 256), 256, *args, y, n)
            e = excess(ex, y.get(), want)
            err = np.abs(y.get().astype(np.float64) - want.astype(F32).astype(np.float64))
            print(f"seed {seed} {ident:26s} max |err| {err.max():.2e}  past the tolerance {100 * (e > 0).mean():6.3f}%")
            if ident in ("solution", "starter", "corpus/starter", "corpus/fast_exp_div"):
                assert e.max() <= -ex.tolerance.atol / 4, (ident, seed, e.max())
            else:
                assert (e > 0).mean() >= 1e-3, (ident, seed)
