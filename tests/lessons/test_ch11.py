"""Chapter 11 helpers: the profile targets (lesson cells of chapters 04, 05, 07, launched as those chapters launch
them), the tables drawn from profiles, the benchmark rows (the two-sided 5% check, the gallery, the occupancy
agreement), the notebook's CPU story (every live measurement has a replay) and its text (no figure quoted that
no recording holds); on a GPU, the measurements themselves."""
from __future__ import annotations

import importlib
import json
import re

import pytest

from repo_helpers import REPO, chapter_markdown, fail_on, import_course, read_json_notebook

STEM = "11_profiling"


@pytest.fixture(scope="module")
def ch11():
    import_course()
    from course.lessons import ch11
    return ch11


@pytest.fixture(scope="module")
def disc():
    import_course()
    from course.lessons import ch11_discipline
    return ch11_discipline


@pytest.fixture(scope="module")
def rows11():
    import_course()
    return importlib.import_module("benchmarks.rows.11_profiling")


def _code_cells() -> list:
    nb = read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


# --- the targets ---------------------------------------------------------------------------------------------

def test_every_target_is_a_lesson_cell_with_a_recordable_name(ch11):
    """Does every profiled kernel come from a `%%cuda` cell of its chapter, under a unique name that
    `course.profile` accepts as a recording's name?"""
    course = import_course()
    keys = [t.key for t in ch11.TARGETS]
    assert len(set(keys)) == len(keys), keys
    for t in ch11.TARGETS:
        assert t.kernel in course.lesson_cell(t.chapter, t.kernel).kernels, t
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", t.key), t.key
        assert ch11.target(t.key) is t
    with pytest.raises(KeyError):
        ch11.target("11-no-such-kernel")


def test_gemm_launches_are_chapter_07s(ch11):
    """Are the GEMM stages profiled with chapter 07's own block tiles and block sizes?"""
    import_course()
    from course.lessons import ch07
    stages = {s.kernel: s for s in ch07.STAGES}
    for kernel, (tile, block) in ch11.GEMM_LAUNCH.items():
        assert (stages[kernel].block_tile, stages[kernel].block) == (tile, block), kernel
        assert ch11.GEMM % tile[0] == 0 and ch11.GEMM % tile[1] == 0


def test_every_target_is_profiled_by_the_notebook(ch11):
    """Does the notebook show every target's profile (so every recording is read somewhere)?"""
    text = "\n".join(_code_cells())
    missing = [t.key for t in ch11.TARGETS if f'"{t.key}"' not in text]
    fail_on([missing and f"the notebook never profiles {missing}"], f"chapters/{STEM}.ipynb:")


# --- tables from profiles -----------------------------------------------------------------------------------

def _profile(metrics, source="recorded", device="NVIDIA H100 80GB HBM3", reason="Recorded."):
    course = import_course()
    return course.Profile(metrics=metrics, source=source, device=device, reason=reason)


def test_profile_table_shows_counts_and_where_they_come_from(ch11, capsys):
    """Does the side-by-side table print a recorded profile's sectors per request and GB/s, say where it was
    recorded, and give an empty profile's reason instead of a row?"""
    p = _profile({"gpu__time_duration.sum": 1e6, "dram__bytes_read.sum": 1.0e9, "dram__bytes_write.sum": 1.0e9,
                  "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 1600.0,
                  "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 100.0})
    empty = _profile({}, source="none", device="", reason="ncu is not installed here.")
    rows = ch11.profile_table({"11-scale-vec4-grid": p, "11-strided-32": empty},
                              ("dram_gbps", "sectors_per_request_ld"))
    out = capsys.readouterr().out
    assert len(rows) == 1 and rows[0]["DRAM GB/s"] == "2000" and rows[0]["sect/req ld"] == "16.0"
    assert "recorded on NVIDIA H100 80GB HBM3" in out and "ncu is not installed here." in out


def test_roofline_points_use_counted_dram_bytes(ch11):
    """Is a GEMM's point at FLOPs per DRAM byte and TFLOP/s from the counters, and a copy (no FLOPs) left out?"""
    gemm = _profile({"gpu__time_duration.sum": 1e6, "dram__bytes_read.sum": 4e8, "dram__bytes_write.sum": 1e8,
                     "sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 5e9})
    copy = _profile({"gpu__time_duration.sum": 1e6, "dram__bytes_read.sum": 1e9, "dram__bytes_write.sum": 1e9})
    pts = ch11.roofline_points({"11-gemm-reg2d": gemm, "11-scale-scalar": copy})
    assert len(pts) == 1
    label, ai, tflops = pts[0]
    assert label == "gemm_reg2d" and ai == pytest.approx(1e10 / 5e8) and tflops == pytest.approx(10.0)


def test_tolerance_is_two_sided(ch11):
    """Is agreement within 5% on either side, and no ratio never agreement?"""
    assert ch11.within_tolerance(0.95) and ch11.within_tolerance(1.05) and ch11.within_tolerance(1.0)
    assert not ch11.within_tolerance(0.949) and not ch11.within_tolerance(1.051)
    assert not ch11.within_tolerance(None)


# --- the benchmark rows, from measured values ------------------------------------------------------------------

class _Ctx:
    copy_gbps = 3000.0

    def row(self, name, value, unit, anchor=None, anchor_value=None, target=None, note="", higher_is_better=True):
        from benchmarks._suite import Row
        return Row(STEM, name, value, unit, anchor, anchor_value, target, note, higher_is_better)


class _Ch11:
    BANDWIDTH_TOLERANCE = 0.05

    def __init__(self, ratio):
        self.ratio = ratio

    def bandwidth_vs_events(self):
        class P:
            reason = "ncu is not installed here."
        ev = 2800.0
        return {"event_gbps": ev, "event_ms": 0.77, "event_iqr": 0.01, "ratio": self.ratio, "profile": P(),
                "ncu_gbps": None if self.ratio is None else ev * self.ratio, "dram_bytes": 2.1e9, "ncu_us": 760.0,
                "useful_bytes": 2 ** 31}


def test_bandwidth_rows_check_both_sides(rows11):
    """Do the ncu rows pass at a ratio of 0.97, fail above 1.05 and below 0.95, and fall back to the event row
    alone, with the reason, where ncu gave nothing?"""
    ok = rows11._bandwidth_rows(_Ctx(), _Ch11(0.97))
    assert [r.ok for r in ok] == [None, True, True] and all(r.anchor_value == 2800.0 for r in ok[1:])
    assert [r.ok for r in rows11._bandwidth_rows(_Ctx(), _Ch11(1.07))][1:] == [True, False]
    assert [r.ok for r in rows11._bandwidth_rows(_Ctx(), _Ch11(0.93))][1:] == [False, True]
    alone = rows11._bandwidth_rows(_Ctx(), _Ch11(None))
    assert len(alone) == 1 and "ncu is not installed here." in alone[0].note


def test_gallery_rows_pair_each_wrong_number_with_the_right_one(rows11, disc, monkeypatch):
    """One row per gallery case, the wrong number as the value and the right one of the same run as anchor?"""
    fake = [{"case": k, "wrong": 2.0, "right": 1.0, "unit": u, "wrong way": w, "right way": r, "why": y}
            for k, w, r, u, y, _fn in disc.GALLERY]
    monkeypatch.setattr(disc, "gallery", lambda: fake)
    rows = rows11._gallery_rows(_Ctx(), disc)
    assert len({r.name for r in rows}) == len(disc.GALLERY) and all(r.ratio == 2.0 for r in rows)
    assert all(r.name.startswith("gallery: ") and r.anchor.endswith("same run") for r in rows)
    assert {u for *_x, u, _y, _f in disc.GALLERY} <= {"ms", "us", "GB/s"}


def _point(block, smem, predicted, api, gbps=1000.0):
    return {"kernel": "scale_scalar", "block": block, "smem": smem, "registers": 10, "predicted": predicted,
            "limiter": "warps", "occupancy": 1.0, "api": api, "gbps": gbps}


def test_occupancy_rows_fail_when_the_rules_and_the_api_disagree(rows11, disc, monkeypatch):
    """Does the agreement row pass when every configuration agrees and fail, naming it, when one does not?"""
    pts = [_point(256, 0, 8, 8, 2400.0), _point(64, 100 << 10, 2, 2, 300.0)]
    monkeypatch.setattr(disc, "occupancy_table", lambda: pts)
    rows = rows11._occupancy_rows(_Ctx(), disc)
    assert rows[0].ok is True and rows[-1].ratio == pytest.approx(300.0 / 2400.0)
    pts[1] = _point(64, 100 << 10, 2, 1)
    rows = rows11._occupancy_rows(_Ctx(), disc)
    assert rows[0].ok is False and "64 threads, 100 KiB: 2 vs 1" in rows[0].note


def test_the_notebooks_replays_find_the_rows(rows11, disc, monkeypatch):
    """Does every `show_recorded("11_profiling", ...)` filter of the notebook match a row the suite writes?"""
    monkeypatch.setattr(disc, "gallery", lambda: [
        {"case": k, "wrong": 2.0, "right": 1.0, "unit": u, "wrong way": w, "right way": r, "why": y}
        for k, w, r, u, y, _fn in disc.GALLERY])
    monkeypatch.setattr(disc, "occupancy_table", lambda: [_point(256, 0, 8, 8)])
    names = [r.name for r in rows11._bandwidth_rows(_Ctx(), _Ch11(1.0)) + rows11._gallery_rows(_Ctx(), disc)
             + rows11._occupancy_rows(_Ctx(), disc)]
    filters = re.findall(r'show_recorded\("11_profiling", "([^"]*)"\)', "\n".join(_code_cells()))
    assert filters
    fail_on([f"show_recorded filter {f!r} matches no row of benchmarks/rows/11_profiling.py"
             for f in filters if not any(f in n for n in names)], f"chapters/{STEM}.ipynb:")


# --- the notebook's CPU story and its text -------------------------------------------------------------------------

def test_every_gpu_cell_is_followed_by_a_replay():
    """Is every `%%gpu` cell followed by a cell that shows the suite's recording of it (the CPU story)?"""
    cells = _code_cells()
    problems = [f"the %%gpu cell {c.splitlines()[0]!r} is not followed by course.results.show_recorded"
                for i, c in enumerate(cells) if c.startswith("%%gpu")
                and not (i + 1 < len(cells) and "show_recorded(" in cells[i + 1])]
    fail_on(problems, f"chapters/{STEM}.ipynb:")


# "N unit" figures the text may state: specifications and the course's own rules, not measurements
STATED = {"5%", "2%", "50 MiB", "128 bytes", "512 bytes", "32 bytes", "228 KiB", "227 KiB", "48 KiB", "1 KiB",
          "256 MiB", "16 MiB", "8 MiB", "1 GiB", "100 us"}   # 100 us: the timer's spacer (course._timing.SPACER_NS)
FIGURE = re.compile(r"(?<![\w.])\d[\d,.]*\s?(?:%|GB/s|TB/s|GFLOP/s|TFLOP/s|MHz|us|ms|W|MiB|KiB|GiB|MB|bytes)(?![\w/])")


def test_text_quotes_no_unrecorded_figure():
    """Does the chapter's text state no measured figure? Until its recordings exist, every rate, time, clock
    or share it gives must be a specification or a rule of the course (STATED); measured figures are printed
    by the cells from the recordings."""
    found = re.findall(FIGURE, " ".join(chapter_markdown(STEM)))
    fail_on([f"the text states {f!r}: print it from a recording in a cell, or add it to the quote guard"
             for f in dict.fromkeys(found) if f not in STATED], f"chapters/{STEM}.ipynb:")


def test_sweep_builds_without_a_gpu(disc):
    """Does the occupancy sweep build on a CPU with its parameters (and replay nothing until recorded)?"""
    s = disc.occupancy_sweep(record=False)
    assert s.params["kernel"] == list(disc.OCC_KERNELS) and s.params["smem_kib"][0] == 0
    assert set(disc.OCC_KERNELS) <= set(import_course().lesson_cell("04_coalescing", "scale_scalar").kernels)


def test_occupancy_configurations_span_the_limits(disc):
    """Do the table's configurations, at the register count NVRTC gives scale_scalar on sm_90, reach at least
    four different occupancies and both the warp and the shared-memory limit (else the table teaches nothing)?"""
    course = import_course()
    from course import occupancy
    try:
        res = course.lesson_cell("04_coalescing", "scale_scalar").compile_for_arch("sm_90").resources
    except course.CompileError as exc:
        pytest.skip(f"no NVRTC here: {exc}")
    regs = res["scale_scalar"].registers
    preds = [occupancy.predict(b, regs, s, cc=(9, 0)) for b, s in disc.OCC_CONFIGS]
    assert len({p["occupancy"] for p in preds}) >= 4
    assert {"warps", "shared memory"} <= {p["limiter"] for p in preds}


# --- GPU ----------------------------------------------------------------------------------------------------

def _live_or_skip(profile):
    if profile.source != "ncu":
        pytest.skip(f"no live profile: {profile.reason}")
    return profile


@pytest.mark.gpu
def test_ncu_bandwidth_agrees_with_events_within_5_percent(ch11):
    """On the GPU, does ncu's DRAM bandwidth of chapter 04's float4 scale agree with the event-timed one?"""
    r = ch11.bandwidth_vs_events(record=False)
    _live_or_skip(r["profile"])
    assert ch11.within_tolerance(r["ratio"]), json.dumps({k: v for k, v in r.items() if k != "profile"})


@pytest.mark.gpu
def test_counters_match_the_sector_model(ch11):
    """Does ncu count 4 sectors per request for the one-float kernel, 16 for the float4 one, 32 at stride 32,
    and no bank conflicts for the padded transpose but many for the unpadded one?"""
    got = {}
    for key in ("11-scale-scalar", "11-scale-vec4-grid", "11-strided-32", "11-transpose-smem", "11-transpose-pad"):
        got[key] = _live_or_skip(ch11.profile_target(ch11.target(key), record=False)).derived
    assert got["11-scale-scalar"]["sectors_per_request_ld"] == pytest.approx(4, rel=0.05)
    assert got["11-scale-vec4-grid"]["sectors_per_request_ld"] == pytest.approx(16, rel=0.05)
    assert got["11-strided-32"]["sectors_per_request_ld"] == pytest.approx(32, rel=0.05)
    assert got["11-transpose-pad"]["bank_conflicts"] < 0.01 * got["11-transpose-smem"]["bank_conflicts"]


@pytest.mark.gpu
def test_gallery_numbers_are_wrong_the_way_the_text_says(disc):
    """Is each wrong number off in the direction the chapter explains?"""
    g = {c["case"]: c for c in disc.gallery()}
    assert g["host timer, no sync"]["wrong"] < 0.5 * g["host timer, no sync"]["right"]
    assert g["first launch included"]["wrong"] > g["first launch included"]["right"]
    assert g["no L2 flush, 16 MiB"]["wrong"] > g["no L2 flush, 16 MiB"]["right"]
    assert g["one sample"]["wrong"] >= g["one sample"]["right"]
    assert g["events on an idle GPU"]["wrong"] > 1.5 * g["events on an idle GPU"]["right"]
    assert g["async copy from pinned memory, no sync"]["ratio"] > 2


@pytest.mark.gpu
def test_occupancy_rules_match_the_api(disc):
    """At every configuration, for both kernels, do the hardware rules give the occupancy API's blocks per SM?"""
    state = {}
    bad = [p for k in disc.OCC_KERNELS for b, s in disc.OCC_CONFIGS
           if (p := disc.occupancy_point(k, b, s, state))["predicted"] != p["api"]]
    assert not bad, bad


@pytest.mark.gpu
def test_first_launch_costs_more_than_a_warm_one(disc):
    """Does the fresh compile, load and first launch cost more than a warm launch, each part positive?"""
    c = disc.first_launch_cost(1 << 24)
    assert min(c.values()) > 0 and c["total_ms"] > c["warm_ms"]
