"""course.l2 on chapter 04's hints cell: what each load and store path becomes in PTX and SASS (CPU: NVRTC and
nvdisasm), the message without cuda-python (CPU), and on a GPU a persisting window that the kernel's result
does not notice and that leaves nothing behind."""
from __future__ import annotations

import sys

import pytest

from repo_helpers import import_course

course = import_course()
STREAMS = ("stream_plain", "stream_restrict", "stream_ldg", "stream_cg", "stream_cs", "lookup_plain", "lookup_cs")


def table(arch):
    return {r["kernel"]: r for r in course.l2.paths_table(course.lesson_cell("04_coalescing", "hints").source,
                                                          STREAMS, arch=arch)}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_each_hint_reaches_the_machine_code_as_the_chapter_says(arch):
    """The chapter's reading of its table: __ldg and const __restrict__ alike (CONSTANT), .cs as EF on loads and
    stores, .cg at GPU scope, the plain stream without a modifier, the table's load plain in both lookups."""
    t = table(arch)
    assert t["stream_plain"]["SASS loads"] == "LDG.E.128" and t["stream_plain"]["SASS stores"] == "STG.E.128"
    assert t["stream_ldg"]["SASS loads"] == t["stream_restrict"]["SASS loads"] == "LDG.E.128.CONSTANT"
    assert t["stream_ldg"]["PTX loads"] == t["stream_restrict"]["PTX loads"] == "ld.global.nc.v4.f32"
    assert t["stream_cs"]["SASS loads"] == "LDG.E.EF.128" and t["stream_cs"]["SASS stores"] == "STG.E.EF.128"
    assert t["stream_cg"]["SASS loads"] == "LDG.E.128.STRONG.GPU"
    assert t["lookup_cs"]["SASS loads"] == "LDG.E, LDG.E.EF.128" and t["lookup_plain"]["SASS loads"] == "LDG.E, LDG.E.128"


def test_turing_adds_sys_to_every_access_but_the_l2_only_ones():
    """The chapter's note for sm_75: the same modifiers, each access with .SYS except the .cg ones (STRONG.GPU)."""
    t = table("sm_75")
    ops = {k: r["SASS loads"].split(", ") + r["SASS stores"].split(", ") for k, r in t.items()}
    assert all(".SYS" in op for k, v in ops.items() if k != "stream_cg" for op in v)
    assert ops["stream_cg"] == ["LDG.E.128.STRONG.GPU", "STG.E.128.STRONG.GPU"]
    assert t["stream_cs"]["SASS loads"] == "LDG.E.EF.128.SYS"


def test_without_cuda_python_the_window_says_what_to_install(monkeypatch):
    import numpy as np
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(course.FeatureUnavailable, match="pip install 'cuda-python"):
        with course.l2.persisting(np.zeros(4, np.float32), stream=None):
            pass


@pytest.mark.gpu
def test_a_persisting_window_changes_no_result_and_is_undone():
    """On a GPU: the lookup under a window computes what it computes without one; on exit the set-aside is 0."""
    if not course.gpu_available():
        pytest.skip("needs an NVIDIA GPU")
    pytest.importorskip("cuda.bindings", reason="the window needs cuda-python")
    import cupy
    from cuda.bindings import runtime as rt
    m = course.lesson_cell("04_coalescing", "hints").compile()
    n4, words = 1 << 20, 1 << 20
    x = cupy.random.default_rng(1).random(4 * n4, dtype=cupy.float32)
    t = cupy.random.default_rng(2).random(words, dtype=cupy.float32)
    want, got = cupy.empty_like(x), cupy.full_like(x, cupy.nan)
    m.lookup_plain(256, 256, x, t, want, words - 1, n4)
    s = cupy.cuda.Stream(non_blocking=True)
    lim = course.l2.limits()
    assert lim["l2_bytes"] > 0 and lim["max_persisting_bytes"] > 0
    with course.l2.persisting(t, stream=s) as w:
        assert w["set_aside_bytes"] == min(t.nbytes, lim["max_persisting_bytes"]) and 0 < w["hit_ratio"] <= 1
        err, size = rt.cudaDeviceGetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize)
        assert int(err) == 0 and size > 0
        with s:
            m.lookup_plain(256, 256, x, t, got, words - 1, n4)
    assert bool((got == want).all())
    err, size = rt.cudaDeviceGetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize)
    assert int(err) == 0 and size == 0
