"""Chapter 12's graded side on the CPU: the cluster launch, the hot-bin inputs, the reference's barriers,
the signature parser on `__cluster_dims__`, and the float sum's tolerance.

The GPU side (exact counts on views, a cluster of 2, the sum's scalar path) is tests/autograder/test_ch12_gpu.py;
the verdicts of tests/autograder/corpus/12_clusters/ run with test_corpus_gpu.py.
"""
import re

import numpy as np
import pytest

from ag_helpers import ROOT
from autograder import get_exercise
from autograder.hidden import draw_cases
from autograder.signature import compare_signature

CH = "12_clusters"
SOLUTIONS = ROOT / "solutions" / CH
CORPUS = ROOT / "tests" / "autograder" / "corpus" / CH


def _cases(ex, seeds=range(8)):
    """The public cases (L2 resolved for an H100's 50 MiB) and hidden ones for a few seeds."""
    cases = [ex.resolve_sizes(c, 50 << 20) for c in ex.sizes]
    return cases + [c for s in seeds for c in draw_cases(ex, s)]


def test_histogram_grid_is_whole_clusters():
    """Is every grid the launch makes a multiple of the cluster size the LAUNCH line names (a cluster kernel
    launched otherwise fails), with at least one cluster and at most max_clusters of them?"""
    ex = get_exercise(CH, "cluster_histogram")
    for case in _cases(ex):
        for cluster in (1, 2, 4, 8):
            for block in (32, 256, 512, 1024):
                cfg = {**ex.launch_defaults, "cluster": cluster, "block": block}
                grid, threads, smem = ex.launch(dict(case), cfg)
                assert grid % cluster == 0 and cluster <= grid <= cluster * cfg["max_clusters"], (case, cfg, grid)
                assert (threads, smem) == (block, 0)


def test_histogram_launch_refuses_what_cannot_run():
    """Are a cluster size that is not portable and a block that is not whole warps refused with a message?"""
    ex = get_exercise(CH, "cluster_histogram")
    for bad, words in (({"cluster": 3}, "1, 2, 4 or 8"), ({"cluster": 16}, "1, 2, 4 or 8"),
                       ({"block": 500}, "multiple of 32"), ({"max_clusters": 0}, "positive")):
        with pytest.raises(ValueError, match=words):
            ex.launch({"n": 1000}, {**ex.launch_defaults, **bad})


def test_launch_cluster_default_is_the_references():
    """Does the launch's default cluster equal the CLUSTER the reference is compiled with, so the reference's
    own grid is whole clusters?"""
    ex = get_exercise(CH, "cluster_histogram")
    text = (SOLUTIONS / "cluster_histogram.cu").read_text()
    m = re.search(r"^#define CLUSTER (\d+)", text, re.M)
    assert m and int(m.group(1)) == ex.launch_defaults["cluster"]
    assert "__cluster_dims__(CLUSTER, 1, 1)" in text and text.startswith("// requires: sm_90\n")
    assert ex.min_cc == (9, 0)


def test_hot_bins_put_contention_in_every_slice():
    """Are the histogram's values in range, with a quarter in 16 hot bins that every block of a cluster of
    2, 4 or 8 owns some of (so every slice sees contention), and the rest spread over all bins?"""
    ex = get_exercise(CH, "cluster_histogram")
    gen = ex.params[0].gen
    v = gen(np.random.default_rng(0), (400_000,), np.uint32)
    assert v.dtype == np.uint32 and v.max() < 16384
    counts = np.bincount(v, minlength=16384)
    hot = np.argsort(counts)[-16:]
    share = counts[hot].sum() / v.size
    assert 0.25 < share < 0.27, share                       # 25% drawn hot, plus their uniform share
    assert (counts > 0).mean() > 0.99                        # the uniform three quarters reach every bin
    for cluster in (2, 4, 8):
        assert set(hot // (16384 // cluster)) == set(range(cluster)), cluster


def test_signature_reads_cluster_dims():
    """Does the kernel parser see through `__cluster_dims__` (before or after `void`, with `__launch_bounds__`),
    so the grader checks a cluster kernel's parameters instead of calling it a missing kernel?"""
    from course.source import parse_kernels
    params = "const unsigned int* data, unsigned int* hist, int n"
    for head in ('extern "C" __global__ void __cluster_dims__(4, 1, 1) cluster_histogram',
                 'extern "C" __global__ __cluster_dims__(2,1,1) void cluster_histogram',
                 'extern "C" __global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(512) cluster_histogram'):
        kernels = parse_kernels(f"{head}({params}) {{ }}")
        assert list(kernels) == ["cluster_histogram"], head
        assert [p.name for p in kernels["cluster_histogram"]] == ["data", "hist", "n"]
    ex = get_exercise(CH, "cluster_histogram")
    assert compare_signature(ex, (SOLUTIONS / "cluster_histogram.cu").read_text()) == ""
    swapped = (SOLUTIONS / "cluster_histogram.cu").read_text().replace("unsigned int* __restrict__ hist, int n",
                                                                      "int n, unsigned int* __restrict__ hist")
    assert compare_signature(ex, swapped) != ""


def _cluster_barriers(source: str) -> int:
    course = pytest.importorskip("course")
    try:
        sass = course.compile_for_arch(source, "sm_90").sass()
    except (course.CompileError, FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"no NVRTC or SASS here: {exc}")
    return len(re.findall(r"\bUCGABAR_WAIT\b", sass))


def test_reference_waits_for_its_cluster_twice_and_the_race_case_never():
    """Does the reference's SASS hold two cluster barriers (zeroed before counting, counted before flushing and
    exiting), and the corpus's no_cluster_sync none, so its verdict tests the grader on a real race?"""
    assert _cluster_barriers((SOLUTIONS / "cluster_histogram.cu").read_text()) == 2
    assert _cluster_barriers((CORPUS / "cluster_histogram" / "no_cluster_sync.cu").read_text()) == 0


def _parallel_float32_sum(x, blocks, rng):
    """A float32 sum in the reference's shape: per-block partials, then block totals added one at a time into
    a float32 running total, in a random order (the order atomics land in)."""
    partials = [np.sum(part, dtype=np.float32) for part in np.array_split(x, blocks)]
    total = np.float32(0)
    for i in rng.permutation(blocks):
        total = np.float32(total + partials[i])
    return float(total)


def test_sum_tolerance_holds_parallel_orders_and_catches_a_lost_element():
    """Does rtol 1e-4 on positive inputs leave a parallel float32 sum 10x room at 2^24 values, while still
    failing a sum that lost one element at n = 1,009?"""
    ex = get_exercise(CH, "tile_reduce")
    rtol = ex.tolerance.rtol
    assert not ex.deterministic and ex.params[0].gen.low >= 0     # positive inputs: |sum| is the error's scale
    rng = np.random.default_rng(1)
    x = rng.random(1 << 24, dtype=np.float32)
    want = float(x.astype(np.float64).sum())
    for seed in range(3):
        got = _parallel_float32_sum(x, 1024, np.random.default_rng(seed))
        assert abs(got - want) <= 0.1 * rtol * want, (got, want)
    small = rng.random(1009, dtype=np.float32)
    want = float(small.astype(np.float64).sum())
    lost = want - float(small[np.argmax(small)])
    assert abs(lost - want) > rtol * want


def test_corpus_technique_verdicts():
    """Does the distributed_shared check (compiled for sm_90, as on an H100) pass the reference and every cluster
    kernel of the corpus, and fail the ones without a cluster, as their expect lines assume (speed points
    withheld for global_atomics and shared_spill_global)?"""
    course = pytest.importorskip("course")
    from autograder import techniques
    ex = get_exercise(CH, "cluster_histogram")
    assert ex.techniques == ("distributed_shared",)
    want = {"cluster2": True, "no_cluster_sync": True, "lesson_dynamic_shared": True, "global_atomics": False,
            "shared_spill_global": False, "shared_only_partial": False}
    paths = {p.stem: p for p in (CORPUS / "cluster_histogram").glob("*.cu")}
    assert set(want) == set(paths)
    paths["reference"], want["reference"] = SOLUTIONS / "cluster_histogram.cu", True
    for stem, path in paths.items():
        try:
            prog = course.compile_for_arch(path.read_text(), "sm_90", name=path.name)
        except course.CompileError as exc:
            pytest.skip(f"NVRTC: {exc}")
        (v,) = techniques.evaluate(ex, prog)
        if v.passed is None:
            pytest.skip(v.message)
        assert v.passed is want[stem], (stem, v.message)
        if not want[stem]:
            assert re.search(r"withheld", techniques.withheld_reason(ex, [v.message]))
            assert re.search(r"distributed shared memory", v.message)
