"""Chapter 03 helpers: the lesson's kernel cells, the chunk kernel's reference, the stream demonstrations and
the sweep's runner (GPU). The pipeline engine they run on is tested in tests/library/test_streams.py."""
from __future__ import annotations


import numpy as np
import pytest

from repo_helpers import REPO, check_quotes, import_course, recorded_rows

STEM = "03_streams"


@pytest.fixture(scope="module")
def ch03():
    import_course()
    from course.lessons import ch03
    return ch03


def test_lesson_kernels_compile(ch03):
    """Do the notebook's demonstration and pipeline cells, and the exercise's reference chunk kernel, compile
    for sm_75..sm_90?"""
    course = import_course()
    spin = course.lesson_cell(STEM, "spin")
    assert spin.kernels == ("spin", "produce", "consume", "bump")
    ref = (REPO / "solutions" / STEM / "process_chunk.cu").read_text()
    for arch in ("sm_75", "sm_80", "sm_90"):
        assert spin.compile_for_arch(arch).cubin
        assert course.lesson_cell(STEM, "chunk_work").compile_for_arch(arch).cubin
        assert course.compile_for_arch(ref, arch).cubin


def test_work_reference_is_rounds_of_the_fma(ch03):
    """Is chunk_work's reference `rounds` times v = 0.999 v + 0.001, and zero rounds the identity?"""
    x = np.array([0.0, 1.0, -2.0], dtype=np.float32)
    assert np.array_equal(ch03.work_reference(x, 0), x.astype(np.float64))
    want = x.astype(np.float64)
    for _ in range(3):
        want = want * 0.999 + 0.001
    assert np.allclose(ch03.work_reference(x, 3), want, rtol=0, atol=1e-15)


@pytest.mark.gpu
def test_stream_demos(ch03):
    """Do blocking streams serialize around the default stream, non-blocking ones not, and events order work?"""
    course = import_course()
    m = course.lesson_cell(STEM, "spin").compile()
    blocking = ch03.default_stream_demo(m.kernel("spin"), non_blocking=False, ms=1.0)
    free = ch03.default_stream_demo(m.kernel("spin"), non_blocking=True, ms=1.0)
    span = lambda sp: max(s[3] for s in sp) - min(s[2] for s in sp)  # noqa: E731
    assert span(blocking) > 2.5 and span(free) < 2.0
    _spans, ok = ch03.dependency_demo(m.kernel("produce"), m.kernel("consume"), wait=True, ms=1.0)
    assert ok
    g = ch03.graph_vs_stream(m.kernel("bump"), launches=200, repeats=2)
    assert g["graph_us"] > 0 and g["stream_us"] > 0


@pytest.mark.gpu
def test_chunk_work_through_the_pipeline_and_the_runner(ch03):
    """Does the notebook's chunk_work, through `chunk_process` in the pipeline, give the reference's values at
    both ends of an odd-sized array, and does the sweep's runner (built on the cell) time it?"""
    import cupy
    course = import_course()
    import course.streams as pl
    n, rounds = (1 << 22) + 3, 50
    k = course.lesson_cell(STEM, "chunk_work").kernel()
    bufs = pl.PipelineBuffers(n, seed=3)
    pool = [cupy.cuda.Stream(non_blocking=True) for _ in range(3)]
    pl.run_pipeline(ch03.chunk_process(k, rounds, max_grid=256), bufs, n_streams=3, n_chunks=7, streams=pool)
    res = ch03.check_work(bufs, rounds)
    assert res, res.message
    run = ch03.pipeline_runner(course.lesson_cell(STEM, "chunk_work"), n=n, repeats=1)
    assert run(chunks=4, streams=2, rounds=0) > 0 and run(chunks=1, streams=9, rounds=10) > 0


def test_quoted_figures_match_the_recordings():
    """Issue #22: do the figures of section 4 (link rate, time of a 256 MiB copy, duplex total against the
    sum of each direction alone) equal the recorded chapter 02 and 03 rows?"""
    link, _ = recorded_rows("02_memory_transfer")
    rows, _ = recorded_rows("03_streams")
    h2d = link["pinned H2D 256 MiB"]["value"]
    duplex = rows["pinned H2D + D2H at once, total GB/s"]
    check_quotes(STEM, [
        ("At about 55 GB/s each way", [h2d]),
        ("each copy takes about 5 ms", [1e3 * (256 << 20) / (h2d * 1e9)]),
        ("moved 92 GB/s with both copies running against 110 GB/s as the sum of each alone, 84%)",
         [duplex["value"], duplex["anchor_value"], 100 * duplex["ratio"]]),
    ])


def test_recorded_pipeline_is_drawn_without_a_gpu(ch03, monkeypatch):
    """Issue #22: on a CPU-only machine, does chapter 03 draw the recorded pipeline (after its %%gpu
    timeline cell, in a cell that is not %%gpu), with the recorded totals and the modeled ones in the titles?"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from repo_helpers import read_json_notebook
    monkeypatch.setattr("course._env.gpu_available", lambda: False)
    rows, _ = recorded_rows(STEM)
    ref = next(r for n, r in rows.items() if n.startswith("reference pipeline"))
    rec = ch03.recorded_pipeline()
    assert rec["total_ms"] == ref["value"] and rec["chunks"] == 16 and rec["streams"] == 4
    assert set(rec["stages"]) == {"H2D", "kernel", "D2H"} and all(v > 0 for v in rec["stages"].values())
    axes = ch03.plot_recorded_pipeline()
    st = rec["stages"]
    model = import_course().streams.ideal_pipeline_ms(st["H2D"], st["kernel"], st["D2H"], 16)
    assert f"modeled {model:.2f} ms, recorded {ref['value']:.2f} ms" in axes[1].get_title()
    assert f"recorded {rows['same pipeline on one stream']['value']:.2f} ms" in axes[0].get_title()
    plt.close("all")
    cells = ["".join(c["source"]) for c in read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")["cells"]]
    timeline_cell = next(i for i, c in enumerate(cells) if c.startswith("%%gpu run 256 MiB through one stream"))
    replay = next(i for i, c in enumerate(cells) if "ch03.plot_recorded_pipeline()" in c)
    assert replay > timeline_cell and not cells[replay].startswith("%%gpu")
