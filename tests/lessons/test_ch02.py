"""Chapter 02 helpers: sizes, formatting, host windows over raw memory, and (GPU) the allocators, the
transfer timing and the notebook's scale_copy cell over mapped and managed memory."""
from __future__ import annotations


import numpy as np
import pytest

from repo_helpers import check_quotes, import_course, recorded_rows


@pytest.fixture(scope="module")
def ch02():
    import_course()
    from course.lessons import ch02
    return ch02


def test_transfer_sizes_span_1k_to_1g(ch02):
    """Do the sweep sizes run from 1 KiB to 1 GiB in steps of 4?"""
    s = ch02.TRANSFER_SIZES
    assert s[0] == 1024 and s[-1] == 1 << 30 and all(b == 4 * a for a, b in zip(s, s[1:]))


def test_fmt_bytes(ch02):
    """Are sizes printed in the largest binary unit that divides them?"""
    assert [ch02.fmt_bytes(n) for n in (1024, 3 << 20, 1 << 30, 1000)] == ["1 KiB", "3 MiB", "1 GiB", "1000 B"]


def test_host_array_keeps_owner_alive(ch02):
    """Does a NumPy view made from a raw address keep the buffer's owner alive after the name is gone?"""
    import gc
    import weakref

    class Owner:
        def __init__(self):
            self.buf = np.arange(8, dtype=np.float32)

    o = Owner()
    alive = weakref.ref(o)
    view = ch02.host_array(o.buf.ctypes.data, (2, 4), np.float32, owner=o)
    del o
    gc.collect()
    assert alive() is not None
    assert view.shape == (2, 4) and view[1, 3] == 7.0
    del view
    gc.collect()
    assert alive() is None


def test_plot_transfer_sweep_from_rows(ch02):
    """Does the sweep plot draw from recorded rows, with the link's rate as a dashed line?"""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [{"kind": k, "direction": d, "bytes": n, "gbps": g}
            for k, g0 in (("pageable", 10.0), ("pinned", 50.0)) for d in ("h2d", "d2h")
            for n, g in ((1024, g0 / 100), (1 << 20, g0))]
    ax = ch02.plot_transfer_sweep(rows, link={"gen": 5, "width": 16, "gbps": 63.0})
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "pinned H2D" in labels and any("gen5" in t for t in labels)
    plt.close("all")


def test_link_rate_without_gpu_is_none(ch02, monkeypatch):
    """Without a GPU, is the link rate None rather than an error?"""
    import course
    monkeypatch.setattr("course._env.gpu_available", lambda: False)
    monkeypatch.setattr(course, "gpu_available", lambda: False)
    assert ch02.link_rate() is None


@pytest.mark.gpu
def test_mapped_memory_is_read_by_a_kernel(ch02):
    """Does a kernel see the host's writes to mapped memory, and the host see the kernel's?"""
    import cupy
    host, dev = ch02.mapped_empty(1000, np.float32)
    host[:] = np.arange(1000, dtype=np.float32)
    dev *= 2  # an elementwise CuPy kernel, reading and writing host memory over the link
    cupy.cuda.Device().synchronize()
    assert np.array_equal(host, 2 * np.arange(1000, dtype=np.float32))


@pytest.mark.gpu
def test_managed_memory_and_prefetch(ch02):
    """Does managed memory work from both sides, device prefetch succeed, and host prefetch explain itself?"""
    import cupy
    import course
    dev, host = ch02.managed_empty(1 << 20, np.float32)
    host[:] = 3.0
    ch02.prefetch(dev, "device")
    dev += 1
    cupy.cuda.Device().synchronize()
    assert float(host[12345]) == 4.0
    with pytest.raises(course.FeatureUnavailable, match="CPU"):
        ch02.prefetch(dev, "host")


@pytest.mark.gpu
def test_transfer_timing_small(ch02):
    """Do copies of two sizes give positive bandwidths, pinned at least as fast as pageable at 16 MiB, and
    does the sweep's runner measure the same copy?"""
    bufs = ch02.HostBuffers(1 << 24)
    g = {(k, d, n): ch02.time_transfer(bufs, k, d, n, budget_s=0.2).gbps(n)
         for k in ch02.KINDS for d in ch02.DIRECTIONS for n in (1 << 12, 1 << 24)}
    assert len(g) == 8 and all(v > 0 for v in g.values())
    assert g["pinned", "h2d", 1 << 24] >= g["pageable", "h2d", 1 << 24]
    assert ch02.transfer_runner(1 << 24)(bytes=1 << 24, kind="pinned", direction="h2d") > 0


def test_rows_from_a_recorded_sweep(ch02, tmp_path, monkeypatch):
    """Without a GPU, are the rows of a recorded transfer sweep recovered, and the fit's two numbers right?"""
    import json
    import course.widgets
    monkeypatch.setattr("course._env.gpu_available", lambda: False)
    sizes = [1 << 10, 1 << 20, 1 << 30]
    params = {"bytes": sizes, "kind": ["pageable", "pinned"], "direction": ["h2d", "d2h"]}
    # time = 10 us + bytes / 50 GB/s for pinned; pageable twice as slow
    pts = [{"values": {"bytes": n, "kind": k, "direction": d},
            "value": n / ((10e-6 + n / 50e9) * (2 if k == "pageable" else 1)) / 1e9, "note": ""}
           for n in sizes for k in params["kind"] for d in params["direction"]]
    rec = tmp_path / "copies.json"
    rec.write_text(json.dumps({"name": "c", "gpu": "Test GPU", "metric": "GB/s", "params": params, "points": pts}))
    s = course.widgets.sweep(ch02.transfer_runner(), params, metric="GB/s", recorded=rec)
    rows = ch02.rows_from_sweep(s)
    assert len(rows) == 12
    t0, bw = ch02.fit_latency_bandwidth(rows, "pinned", "h2d")
    assert t0 == pytest.approx(10.0, rel=1e-6) and bw == pytest.approx(50.0, rel=1e-6)


def test_pcie_theoretical_rates(ch02):
    """Is gen5 x16 about 63 GB/s and gen4 x16 about 31.5 GB/s per direction?"""
    assert ch02.pcie_theoretical(5) == pytest.approx(63.0, abs=0.1)
    assert ch02.pcie_theoretical(4, 16) == pytest.approx(31.5, abs=0.1)
    assert ch02.pcie_theoretical(3, 8) == pytest.approx(7.9, abs=0.1)
    with pytest.raises(ValueError, match="`gen`"):
        ch02.pcie_theoretical(9)


@pytest.mark.gpu
def test_scale_copy_cell_over_mapped_and_managed_memory(ch02):
    """Does the notebook's scale_copy, compiled from its cell, read mapped host memory and prefetched managed
    memory right, on an odd size (a partial last block)?"""
    import cupy
    course = import_course()
    k = course.lesson_cell("02_memory_transfer", "scale_copy").kernel()
    n = (1 << 20) + 1
    y = cupy.empty(n, dtype=cupy.float32)
    host, mapped = ch02.mapped_empty(n, np.float32)
    host[:] = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    k(64, 256, mapped, y, 3.0, n)
    cupy.cuda.Device().synchronize()
    assert np.array_equal(y.get(), np.float32(3.0) * host)
    dev, view = ch02.managed_empty(n, np.float32)
    view[:] = 1.0
    ch02.prefetch(dev, "device")
    k(64, 256, dev, y, 2.0, n)
    cupy.cuda.Device().synchronize()
    assert bool((y == 2.0).all())


def test_quoted_figures_match_the_recordings():
    """Issue #22: do the figures of cells 0, 11 and the summary (link rate, fraction of the link, pageable
    rates, device-over-link factor) equal the recorded chapter 02 rows and copy ceiling?"""
    rows, ceil = recorded_rows("02_memory_transfer")
    h2d, d2h = rows["pinned H2D 256 MiB"], rows["pinned D2H 256 MiB"]
    page_h2d = rows["pinned H2D over pageable H2D, 256 MiB"]["anchor_value"]
    page_d2h = rows["pinned D2H over pageable D2H, 256 MiB"]["anchor_value"]
    copy, factor = ceil["copy_gbps"], ceil["copy_gbps"] / h2d["value"]
    check_quotes("02_memory_transfer", [
        ("copies device to device at 3,001 GB/s", [copy]),
        ("55.0 GB/s recorded for a pinned copy). Every byte that crosses it costs about 55 times",
         [h2d["value"], factor]),
        ("55.0 GB/s to the device and 55.1 GB/s back at 256 MiB, 87% of the 63 GB/s theoretical",
         [h2d["value"], d2h["value"], 256, 100 * h2d["ratio"], h2d["anchor_value"]]),
        ("(9.1 and 13.5 GB/s in the same recording)", [page_h2d, page_d2h]),
        ("about 55 times slower than device memory (55.0 against 3,001 GB/s", [factor, h2d["value"], copy]),
    ])
    assert abs(d2h["ratio"] - h2d["ratio"]) < 0.005, "87% stands for both directions only while they agree"


def test_exercise_gather_box_counts_sectors_as_chapter_04_does():
    """Issue #22: exercise 02's gather needs coalescing, taught in chapter 04. Does the box before its kernel
    cell quote the sectors that chapter 04's model (course.access.warp_access) gives for the two mappings, on
    random table rows of dim = 256 floats, and say how much of them is used?"""
    import re
    from repo_helpers import REPO, read_json_notebook
    course = import_course()
    nb = read_json_notebook(REPO / "exercises" / "source" / "02_memory_transfer" / "02_memory_transfer.ipynb")
    texts = ["".join(c["source"]) for c in nb["cells"]]
    kernel = next(i for i, c in enumerate(nb["cells"]) if "kernel:gather_rows" in c["metadata"].get("tags", []))
    box = next((i for i, t in enumerate(texts) if "one warp per row" in t.lower() and "sector" in t), None)
    assert box is not None and box < kernel, "the box on warp-per-row mapping should come before the kernel cell"
    dim = int(re.search(r"`dim = (\d+)`", texts[box]).group(1))
    rows = np.random.default_rng(0).choice(1 << 16, 32, replace=False)
    per_thread = course.access.warp_access(lambda lane: int(rows[lane]) * dim)   # step j = 0
    per_warp = course.access.warp_access(lambda lane: int(rows[0]) * dim + lane)
    assert per_thread.sectors_per_request == 32 and per_warp.sectors_per_request == 4
    text = re.sub(r"\s+", " ", texts[box])
    assert f"{per_thread.sectors_per_request} sectors fetched ({32 * per_thread.sectors_per_request:,} bytes)" in text
    assert f"for {per_thread.useful_bytes} useful bytes: 1/{32 * per_thread.sectors_per_request // per_thread.useful_bytes} used" in text
    assert f"{per_warp.useful_bytes} contiguous bytes = {per_warp.sectors_per_request} sectors, all used" in text


def test_managed_and_zero_copy_recordings_shown_without_a_gpu():
    """Issue #22: does chapter 02 show the recorded managed-memory and zero-copy rows in cells that run
    without a GPU, each right after the %%gpu cell that measures the same thing, and does each filter match
    a recorded row?"""
    from repo_helpers import REPO, read_json_notebook
    course = import_course()
    cells = ["".join(c["source"]) for c in read_json_notebook(REPO / "chapters" / "02_memory_transfer.ipynb")["cells"]]
    rows, _, _ = course.results.recorded_rows("02_memory_transfer")
    for measured, word in (("%%gpu run scale_copy over 256 MiB of managed memory", "managed"),
                           ("%%gpu time R passes of scale_copy", "zero-copy")):
        i = next(k for k, c in enumerate(cells) if c.startswith(measured))
        assert f'course.results.show_recorded("02_memory_transfer", "{word}")' in cells[i + 1], word
        assert any(word in r["name"] for r in rows), f"no recorded row has {word!r} in its name"
