"""Chapter 12 helpers: the cluster and bin arithmetic, co-residency, inputs, the text's claims about SASS and
registers (compiled here with NVRTC), the figures it quotes from chapter 06's recordings, and (GPU) every
kernel of the lesson checked against NumPy, the cooperative sums, and (sm_90) the cluster kernels."""
from __future__ import annotations

import re

import numpy as np
import pytest

from repo_helpers import (QUOTE_NUMBER, chapter_markdown, check_quotes, fail_on, import_course, quote_close,
                          recorded_rows, recorded_sweep)

STEM = "12_clusters"


@pytest.fixture(scope="module")
def ch12():
    import_course()
    from course.lessons import ch12
    return ch12


def test_every_kernel_the_module_names_is_a_lesson_cell(ch12):
    """Does every kernel the tables launch come from a `%%cuda` cell of the chapter, cluster cells marked sm_90?"""
    cells = import_course().lesson_cells(STEM)
    for name in (*ch12.TILE_KERNELS, *ch12.SUM_KERNELS, *ch12.HIST_KERNELS, "hist_private_pass", "hist_cluster",
                 "reduce_cluster", "cluster_ring"):
        assert name in cells[name].kernels
    for name in ("hist_cluster", "reduce_cluster", "cluster_ring"):
        assert cells[name].requires == "sm_90" and "__cluster_dims__" in cells[name].source
    for name in (*ch12.TILE_KERNELS, *ch12.SUM_KERNELS, *ch12.HIST_KERNELS, "hist_private_pass"):
        assert cells[name].requires is None, f"{name} should run on any GPU"
    for name in ("hist_global", "hist_private_pass", "hist_cluster"):   # one cell serves both bin counts
        assert "#ifndef BINS" in cells[name].source, f"{name}'s cell should take its bin count from -DBINS"


def test_owner_and_slices(ch12):
    """Does every bin have exactly one owner (rank, index) whose slice holds it, for every cluster size?"""
    bins = np.arange(ch12.BINS)
    for c in ch12.CLUSTER_SIZES:
        per = ch12.slice_bytes(c) // 4
        rank, index = ch12.owner(bins, c)
        assert per * c == ch12.BINS and rank.max() == c - 1 and index.max() == per - 1
        assert np.array_equal(rank * per + index, bins)
    assert tuple(int(v) for v in ch12.owner(10000, 4)) == (2, 1808)      # micro-exercise 4.1
    assert ch12.slice_bytes(1) == 65536
    for bad in (0, 3, 32):
        with pytest.raises(ValueError, match="power of two"):
            ch12.slice_bytes(bad)


def test_blocks_per_sm_on_the_h100(ch12):
    """Do the limits come out as the text says: three 64 KiB blocks, six 32 KiB ones, then 8 by threads?"""
    assert ch12.blocks_per_sm(256, 65536) == (3, "shared memory")
    assert ch12.blocks_per_sm(256, 32768) == (6, "shared memory")
    assert ch12.blocks_per_sm(256, 16384) == (8, "threads")
    assert ch12.blocks_per_sm(1024, 0) == (2, "threads")
    assert ch12.blocks_per_sm(32, 0) == (32, "blocks")
    assert ch12.blocks_per_sm(256, 300_000)[0] == 0
    # 65,536 bins (the text): no block holds them; a cluster of 2 gives 128 KiB a block, one block an SM
    assert ch12.blocks_per_sm(1024, 4 * ch12.BINS_LARGE) == (0, "shared memory")
    assert ch12.slice_bytes(2, ch12.BINS_LARGE) == 131072 and ch12.slice_bytes(4, ch12.BINS_LARGE) == 65536
    assert ch12.blocks_per_sm(1024, 131072) == (1, "shared memory")
    assert ch12.BINS_LARGE % ch12.RANGE == 0 and 4 * ch12.RANGE == 65536
    rows = {r["cluster"]: r for r in ch12.cluster_table()}
    assert [rows[c]["blocks per SM"] for c in (1, 2, 4, 8)] == [3, 6, 8, 8]
    assert rows[1]["threads per SM"] == 768 and rows[4]["threads per SM"] == 2048
    # a wave merges 16,384 counters per cluster: clusters of 8 hold 8/3 the blocks and merge a third as much
    assert rows[8]["merge atomics per wave"] * 3 == rows[1]["merge atomics per wave"]


def test_hist_inputs_are_skewed_and_in_range(ch12):
    """Do the inputs stay in [0, BINS), with a quarter in 16 hot bins (and hot=0 uniform)?"""
    v = ch12.hist_inputs(200_000, seed=1)
    assert v.dtype == np.uint32 and v.max() < ch12.BINS
    counts = np.bincount(v, minlength=ch12.BINS)
    top16 = np.sort(counts)[-16:].sum()
    assert 0.24 < top16 / v.size < 0.27
    u = np.bincount(ch12.hist_inputs(200_000, hot=0.0, seed=1), minlength=ch12.BINS)
    assert np.sort(u)[-16:].sum() / 200_000 < 0.01


def test_exact_inputs(ch12):
    """Are the sums' inputs small integers whose float32 sum is exact in any order?"""
    x, want = ch12.exact_inputs(1_000_003, seed=2)
    for order in (x, x[::-1], np.sort(x)):
        assert float(np.cumsum(order, dtype=np.float32)[-1]) == want


def test_cooperative_problem_is_what_the_text_computes():
    """Micro-exercise 2.1's figures: 6 blocks of 40-register threads per SM (792 on 132 SMs) fit a cooperative
    launch, 793 do not; at 80 registers, 3 per SM (396)."""
    import_course()
    from course._launch import cooperative_problem
    regs_per_sm, threads = 65536, 256
    for regs, per_sm, total in ((40, 6, 792), (80, 3, 396)):
        assert regs_per_sm // (regs * threads) == per_sm and per_sm * 132 == total
        assert cooperative_problem("k", total, threads, 0, per_sm, 132) is None
        assert cooperative_problem("k", total + 1, threads, 0, per_sm, 132)


def _sass_or_skip(prog):
    try:
        return prog.sass()
    except (FileNotFoundError, RuntimeError) as exc:
        pytest.skip(f"no disassembler here: {exc}")


def test_tile_collectives_are_the_hand_written_shuffles(ch12):
    """Section 1's claim, from the SASS: cg::reduce on 32 lanes is the five SHFL.BFLY of the hand-written
    butterfly, cg::inclusive_scan the five SHFL.UP of chapter 06's scan, on sm_75, sm_80 and sm_90."""
    course = import_course()
    _sass_or_skip(course.lesson_cell(STEM, "tile_sum_cg32").compile_for_arch("sm_90"))
    for arch in ("sm_75", "sm_80", "sm_90"):
        c = ch12.shuffle_counts(arch)
        assert c["tile_sum_cg32"] == c["tile_sum_shfl32"] == {"SHFL.BFLY": 5}, (arch, c)
        assert c["tile_scan_cg32"] == c["tile_scan_shfl32"] == {"SHFL.UP": 5}, (arch, c)
        assert sum(k for op, k in c["tile_sum_cg16"].items()) >= 4


def test_dsmem_sass_is_as_described():
    """Section 3's claim: the DSMEM atomic is a generic ATOM with an address built from SR_SWINHI and
    SR_CgaCtaId, and each cluster.sync() is a UCGABAR_ARV / UCGABAR_WAIT pair."""
    course = import_course()
    prog = course.lesson_cell(STEM, "hist_cluster").compile_for_arch("sm_90")
    sass = _sass_or_skip(prog)
    ops = course.sass_opcodes(sass)["hist_cluster"]
    assert ops["ATOM"] >= 1 and ops["UCGABAR_ARV"] == ops["UCGABAR_WAIT"] == 2
    assert "SR_SWINHI" in sass and "SR_CgaCtaId" in sass


def test_register_count_quoted_in_the_text():
    """Micro-exercise 2.1 says sum_grid_sync uses 34 registers on sm_90: is that what NVRTC gives?"""
    course = import_course()
    regs = course.lesson_cell(STEM, "sum_grid_sync").compile_for_arch("sm_90").resources["sum_grid_sync"].registers
    text = " ".join(chapter_markdown(STEM))
    assert f"uses {regs} registers per thread" in text, f"NVRTC gives {regs} registers now: update the text"


def test_kernels_compile_without_spills():
    """Do the chapter's cells compile for every arch they allow (cluster sizes 1-8 too) with no spills?"""
    course = import_course()
    seen = set()
    for cell in course.lesson_cells(STEM).values():
        if cell.key in seen:
            continue
        seen.add(cell.key)
        archs = ("sm_90",) if cell.requires == "sm_90" else ("sm_75", "sm_80", "sm_90")
        options = [(f"-DCLUSTER={c}",) for c in (1, 2, 4, 8)] if "ifndef CLUSTER" in cell.source else [()]
        if "ifndef BINS" in cell.source:
            options += [(*o, "-DBINS=65536") for o in options]
        for arch in archs:
            for opt in options:
                res = cell.compile_for_arch(arch, options=opt).resources
                assert all(r.spill_stores == 0 for r in res.values()), (cell.key, arch, opt)


def _rows06():
    rows, ceil = recorded_rows("06_building_blocks")
    return rows, ceil["copy_gbps"]


def _hist16(rows12, name):
    return rows12[f"histogram 16,384 bins, {name}, 2^26 values"]


def test_quoted_figures_match_the_recordings():
    """Are the figures the text quotes what the recordings hold: chapter 06's variant 4 and copy ceiling, this
    chapter's histogram and sum rows, and its two sweeps (cluster size and input; grid sync and two launches)?"""
    rows, copy = _rows06()
    r12, _ = recorded_rows(STEM)
    hs, gs = recorded_sweep("12_clusters_histogram"), recorded_sweep("12_clusters_grid_sync")
    priv = [_hist16(r12, f"privatized, block {b}")["value"] for b in (256, 512, 1024)]
    dsmem = [_hist16(r12, f"DSMEM, cluster {c}")["value"] for c in (2, 4, 8)]
    best = _hist16(r12, "DSMEM at its best cluster size")
    total = {k: r12[f"sum of 2^28 floats, {k}"] for k in ("grid sync", "two launches", "ch06 variant 4",
                                                          "ch06 variant 5", "cluster of 8")}
    small = r12["sum of 2^16 floats, one cooperative launch with grid.sync()"]
    check_quotes(STEM, [
        ("recorded it at 1,093 GB/s against a copy ceiling of 3,002 GB/s",
         [rows["sum variant 4: reduce4_shuffle"]["value"], copy]),
        # section 2
        ("7.12 us for the cooperative launch against 8.10 us for two launches",
         [gs[1024, "grid sync"], gs[1024, "two launches"]]),
        ("7.52 us against 8.42 us", [small["value"], small["anchor_value"]]),
        ("361.0 against 362.7 us", [gs[1 << 28, "grid sync"], gs[1 << 28, "two launches"]]),
        # section 4, 16,384 bins
        ("global atomics at 135 GB/s", [_hist16(r12, "global atomics")["value"]]),
        ("global atomics too, at 105 GB/s", [_hist16(r12, "global atomics")["anchor_value"]]),
        ("the privatized histogram at 935, 1,635 and 1,962 GB/s", priv),
        ("the DSMEM histogram at 566, 210 and 167 GB/s", dsmem),
        ("it is 0.29 times the best privatized version", [best["ratio"]]),
        ("(0.29 times the best privatized version)", [best["ratio"]]),
        ("the rate goes from 935 to 1,962 GB/s", [priv[0], priv[2]]),
        ("817 GB/s on uniform data, a little below the 935 GB/s", [hs[1, "uniform"], priv[0]]),
        ("(clusters of 2): 592 GB/s; three quarters (4): 215 GB/s; seven eighths (8): 189 GB/s",
         [2, hs[2, "uniform"], 4, hs[4, "uniform"], 8, hs[8, "uniform"]]),
        ("536 GB/s at 2, 156 GB/s at 8, where a cluster of 1 does not move (818 GB/s)",
         [hs[2, "hot"], 2, hs[8, "hot"], 8, 1, hs[1, "hot"]]),
        ("264 blocks and 16,384 bins, counts about 15.5 values", [264, 16384, (1 << 26) / 264 / 16384]),
        # the 65,536-bin case's prediction
        ("copy ceiling: 3,002 / 4, about 750 GB/s", [copy, 4, copy / 4]),
        ("there a cluster of 2 reached 566 GB/s", [2, dsmem[0]]),
        # section 5
        ("`cupy.sum` at 2,958 GB/s, variant 5 at 2,985, the grid-sync sum at 2,983 and its two-launch twin at "
         "2,955 GB/s", [total["grid sync"]["anchor_value"], 5, total["ch06 variant 5"]["value"],
                        total["grid sync"]["value"], total["two launches"]["value"]]),
        ("Variant 4 ran at 1,012 GB/s", [4, total["ch06 variant 4"]["value"]]),
        ("803 GB/s, below variant 4", [total["cluster of 8"]["value"], 4]),
        ("(803 against 1,013 GB/s)", [total["cluster of 8"]["value"], total["ch06 variant 4"]["value"]]),
    ])
    # "wins at every size of the sweep"; the best privatized run had 264 blocks (the 15.5 values per bin)
    assert all(gs[n, "grid sync"] < gs[n, "two launches"] for n, _how in gs), "the barrier no longer wins everywhere"
    assert best["value"] == max(dsmem) and "block 1024" in best["anchor"]


LARGE_MARK = "The H100's figures for this table go here after its first recording"


def _large_section() -> str:
    text = " ".join(chapter_markdown(STEM))
    start = text.index("**Where clusters win: 65,536 bins.**")
    return text[start:text.index("**Micro-exercise 4.1.**", start)]


def test_65536_bin_figures_are_quoted_once_recorded():
    """Before the 65,536-bin rows are recorded, does the text claim no figure (the marked sentence stands)? After,
    does it quote the recorded DSMEM rate, the best non-cluster rate and their ratio, with the marker gone, and
    do the passes stay under a quarter of the copy ceiling, as the text predicts?"""
    r12, ceil = recorded_rows(STEM)
    large = {k: r for k, r in r12.items() if k.startswith("histogram 65,536 bins")}
    text = _large_section()
    if not large:
        assert LARGE_MARK in text, "no 65,536-bin recording yet, so the section should keep its marked sentence"
        return
    problems = [f"the 65,536-bin rows are recorded: replace the sentence {LARGE_MARK!r}... with their figures"
                if LARGE_MARK in text else ""]
    copy = ceil["copy_gbps"]
    problems += [f"{k}: {r['value']:.0f} GB/s, above the quarter of the copy ceiling ({copy / 4:.0f}) the text says "
                 "bounds four passes" for k, r in large.items() if "passes" in k and r["value"] > 1.1 * copy / 4]
    top = large.get("histogram 65,536 bins, DSMEM at its best cluster size, 2^26 values")
    if top:
        nums = re.findall(QUOTE_NUMBER, text)
        for what, v, decimals in (("the DSMEM rate", top["value"], False), ("the best non-cluster rate",
                                  top["anchor_value"], False), ("their ratio", top["ratio"], True)):
            if not any(quote_close(q, v) for q in nums if ("." in q) == decimals):
                problems.append(f"the section does not quote {what}, recorded as {v:.3g}")
    fail_on(problems, f"chapters/{STEM}.ipynb, the 65,536-bin part of section 4:")


def test_every_rate_in_the_text_is_recorded_or_derived():
    """Is every "N GB/s" of the text a recorded figure (chapter 06 or 12: a row, its anchor, the histogram sweep)
    or a stated derivation (bytes per atomic over 1.9 ns; a quarter of the copy ceiling for four passes)?"""
    rows, copy = _rows06()
    rows12, _ = recorded_rows(STEM)
    recorded = ([r[k] for r in (*rows.values(), *rows12.values()) for k in ("value", "anchor_value") if r.get(k)]
                + [copy] + list(recorded_sweep("12_clusters_histogram").values()))
    derived = {"1,100": 2048 / 1.9, "8,600": 8 * 2048 / 1.9, "2,150": 4096 / 1.9, "4,300": 4 * 2048 / 1.9,
               "750": copy / 4}
    problems = []
    for q in re.findall(rf"({QUOTE_NUMBER}) GB/s", " ".join(chapter_markdown(STEM))):
        ok = (abs(float(q.replace(",", "")) / derived[q] - 1) < 0.03 if q in derived
              else any(quote_close(q, v) for v in recorded if v))
        if not ok:
            problems.append(f"{q} GB/s is neither recorded in benchmarks/results nor a stated derivation")
    fail_on(problems, f"chapters/{STEM}.ipynb:")


def test_sweeps_build_without_a_gpu(ch12):
    """Do both sweeps build on a CPU with their parameters (and replay nothing until recorded)?"""
    s = ch12.sync_sweep(record=False)
    assert s.params["how"] == ["grid sync", "two launches"] and s.params["n"][0] == 1024
    h = ch12.hist_sweep(record=False)
    assert h.params["cluster"] == [1, 2, 4, 8] and h.params["data"] == ["uniform", "hot"]


# --- GPU ---------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_tiles_match_numpy(ch12):
    """Do the five tile kernels give NumPy's sums and scans exactly?"""
    assert len(ch12.check_tiles()) == len(ch12.TILE_KERNELS)


@pytest.mark.gpu
def test_grid_sync_and_two_launches_sum_exactly(ch12):
    """Do the cooperative one-launch sum and its two-launch twin give the exact sum at odd sizes, twice?"""
    import cupy
    ks = ch12.lesson_kernels(ch12.SUM_KERNELS)
    partials = cupy.empty(8192, dtype=cupy.float32)
    for how in ("grid sync", "two launches"):
        for _ in range(2):
            assert ch12.check_sum(lambda a, b, how=how: ch12.grid_sum(ks, how, a, b, partials), how)


@pytest.mark.gpu
def test_single_block_histograms_match_numpy(ch12):
    """Do the global-atomic and 64 KiB privatized histograms count exactly (hot bins, out-of-range values)?"""
    ks = ch12.lesson_kernels(ch12.HIST_KERNELS)
    for kind, block in (("global", 256), ("private", 256), ("private", 1024)):
        assert ch12.check_hist(lambda a, b, kind=kind, block=block: ch12.hist_launch(kind, ks[f"hist_{kind}"], a, b,
                                                                                       block), kind)


def _needs_sm90():
    course = import_course()
    if not course.supports("clusters"):
        pytest.skip("thread-block clusters need sm_90")


@pytest.mark.gpu
@pytest.mark.parametrize("cluster", [1, 2, 4, 8])
def test_cluster_histogram_matches_numpy(ch12, cluster):
    """On sm_90, does the DSMEM histogram count exactly at every cluster size?"""
    _needs_sm90()
    k = ch12.cluster_kernel(cluster)
    assert ch12.check_hist(lambda a, b: ch12.hist_launch("cluster", k, a, b, 256, cluster), f"cluster {cluster}")


@pytest.mark.gpu
def test_65536_bin_histograms_match_numpy(ch12):
    """At 65,536 bins, do global atomics and the four passes (blocks 512 and 1024) count exactly, and on sm_90
    the DSMEM histogram with clusters of 2 and 4 at 1,024 threads (128 and 64 KiB a block)?"""
    course = import_course()
    bins, opt = ch12.BINS_LARGE, ("-DBINS=65536",)
    runs = [("global", course.lesson_cell(STEM, "hist_global").kernel("hist_global", options=opt), 256, 1)]
    runs += [("passes", course.lesson_cell(STEM, "hist_private_pass").kernel("hist_private_pass", options=opt), b, 1)
             for b in (512, 1024)]
    if course.supports("clusters"):
        runs += [("cluster", ch12.cluster_kernel(c, bins=bins), 1024, c) for c in (2, 4)]
    for kind, k, block, c in runs:
        assert ch12.check_hist(lambda a, b, kind=kind, k=k, block=block, c=c:
                               ch12.hist_launch(kind, k, a, b, block, c, bins), f"{kind} {block} {c}", bins=bins)


@pytest.mark.gpu
@pytest.mark.parametrize("cluster", [2, 8])
def test_cluster_reduction_sums_exactly(ch12, cluster):
    """On sm_90, does the cluster reduction (one atomic per cluster) give the exact sum at odd sizes?"""
    _needs_sm90()
    k = ch12.cluster_kernel(cluster, "reduce_cluster")
    assert ch12.check_sum(lambda a, b: ch12.reduce_cluster_launch(k, a, b, cluster), f"reduce_cluster {cluster}")


@pytest.mark.gpu
def test_cluster_ring_reads_the_neighbours_shared_memory():
    """On sm_90, does every block read its cluster neighbour's value through DSMEM?"""
    _needs_sm90()
    import cupy
    course = import_course()
    k = course.lesson_cell(STEM, "cluster_ring").kernel("cluster_ring")
    seen, sm_of = cupy.zeros(32, dtype=cupy.int32), cupy.zeros(32, dtype=cupy.uint32)
    k(32, 128, seen, sm_of)
    b = np.arange(32)
    assert np.array_equal(seen.get(), 1000 + b // 4 * 4 + (b % 4 + 1) % 4)


@pytest.mark.gpu
@pytest.mark.slow
def test_tables_run(ch12):
    """Do both tables check and time every row (small sizes), cluster rows included on sm_90?"""
    course = import_course()
    h = ch12.histogram_table(n=1 << 22, verbose=False)
    assert ch12.best_private(h)["rate"] > 0
    assert any(r["name"].startswith("DSMEM") for r in h) == course.supports("clusters")
    big = ch12.large_histogram_table(n=1 << 22, verbose=False)
    assert ch12.best_non_cluster(big)["rate"] > 0
    assert any(r["name"].startswith("DSMEM") for r in big) == course.supports("clusters")
    s = ch12.reduction_table(n=1 << 24, verbose=False)
    assert {"grid sync", "two launches", "cupy.sum"} <= {r["name"] for r in s}
