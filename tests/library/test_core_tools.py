"""The shared lesson tools in the core library: lesson cells read from the notebooks, the variant
harness, the recorded results, the Nsight Compute glue."""
from __future__ import annotations


import pytest

from repo_helpers import REPO, import_course

course = import_course()
from course import ncu  # noqa: E402


NCU_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3)
hello from the profiled script
==PROF== Profiling "probe_0": 0%....50%....100% - 1 pass
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","127.0.0.1","probe_0","1","7","(128, 1, 1)","(256, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","request","1,024"
"0","4242","python3","127.0.0.1","probe_0","1","7","(128, 1, 1)","(256, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","sector","4,096"
"1","4242","python3","127.0.0.1","probe_1","1","7","(128, 1, 1)","(256, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum","request","1024"
"1","4242","python3","127.0.0.1","probe_1","1","7","(128, 1, 1)","(256, 1, 1)","0","9.0","Command line profiler metrics","l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum","sector","n/a"
'''


def test_parse_ncu_csv():
    """Are metric rows read from ncu's CSV among the program's output, with thousands separators and n/a?"""
    rows = ncu.parse_ncu_csv(NCU_CSV)
    assert len(rows) == 4
    assert rows[0]["kernel"] == "probe_0" and rows[0]["value"] == 1024.0 and rows[1]["value"] == 4096.0
    assert rows[3]["value"] is None
    assert ncu.parse_ncu_csv("no csv here\n") == []


def test_run_ncu_without_ncu(monkeypatch):
    """Without ncu, is the result falsy with a sentence instead of an exception?"""
    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    res = ncu.run_ncu("print(1)", ["x.sum"], kernel="k")
    assert not res and "not installed" in res.reason


def test_run_ncu_permission_and_parsing(monkeypatch):
    """Is ERR_NVGPUCTRPERM reported as a permission problem, and good output summed per kernel?"""
    monkeypatch.setattr(ncu, "ncu_path", lambda: "/usr/bin/true")

    def fake(out):
        return lambda cmd, **k: (0, out)
    monkeypatch.setattr(ncu, "run_profiled", fake("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"))
    res = ncu.run_ncu("print(1)", ["m"], kernel="k")
    assert not res and "ERR_NVGPUCTRPERM" in res.reason
    monkeypatch.setattr(ncu, "run_profiled", lambda cmd, **k: (None, ""))
    assert "did not finish" in ncu.run_ncu("print(1)", ["m"], kernel="k", timeout=5).reason
    monkeypatch.setattr(ncu, "run_profiled", fake(NCU_CSV))
    res = ncu.run_ncu("print(1)", ["m"], kernel="regex:^probe_")
    assert res and res.by_kernel["probe_0"]["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == 4096.0
    assert res.metrics["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 2048.0


def test_recorded_views_without_results(capsys):
    """Do the recorded-results views say there is nothing yet, instead of failing?"""
    import matplotlib
    matplotlib.use("Agg")
    course.results.show_recorded("99_no_such_chapter")
    assert course.results.plot_recorded("99_no_such_chapter") is None
    assert "No recorded" in capsys.readouterr().out
    course.plots.vs_ceiling({"a": 1000.0, "b": 2500.0}, 3000.0, title="t")
    assert course.results.rows_of(("99_no_such_chapter",)) == []


def test_lesson_cell_reads_the_notebook():
    """Is a %%cuda cell found by --name and by every kernel it defines, with its magic's flags?"""
    cell = course.lesson_cell("01_first_kernel", "mul_add_strict")
    assert cell.options == ("-fmad=false",) and "mul_add_strict" in cell.kernels
    both = course.lesson_cell("06_building_blocks", "reduce2_sequential")
    assert both is course.lesson_cell("06_building_blocks", "reduce1_interleaved") or both.key == "reduce1_interleaved"
    assert "__global__" in both.source and not both.source.startswith("%%")
    assert course.lesson_cell("07_staged_gemm", "gemm_wmma").requires == "sm_80"


def test_lesson_cell_names_what_exists():
    """Does a wrong chapter or cell name say what there is?"""
    with pytest.raises(course.CourseError, match="did you mean '06_building_blocks'"):
        course.lesson_cell("06_blocks", "x")
    with pytest.raises(course.CourseError, match="reduce1_interleaved"):
        course.lesson_cell("06_building_blocks", "reduce9")


def test_lesson_cell_prefers_the_cell_that_ran(monkeypatch):
    """In a session where the student edited and ran the cell, is the edit what helpers compile?"""
    edited = 'extern "C" __global__ void vec_add(const float* x, const float* y, float* z, int n) { }\n'
    monkeypatch.setitem(course.cell_sources, "vec_add", edited)
    assert course.lesson_cell("01_first_kernel", "vec_add").source == edited
    monkeypatch.delitem(course.cell_sources, "vec_add")
    assert course.lesson_cell("01_first_kernel", "vec_add").source != edited


def test_every_lesson_cell_compiles_from_the_api():
    """Does every chapter's %%cuda cell compile for sm_80 through the public API (what helpers use)?"""
    for nb in sorted((REPO / "chapters").glob("*.ipynb")):
        seen = set()
        for cell in course.lesson_cells(nb.stem).values():
            if cell.key in seen:
                continue
            seen.add(cell.key)
            assert cell.compile_for_arch(cell.requires or "sm_80").cubin, (nb.stem, cell.key)


def test_solution_source():
    assert "__global__" in course.solution_source("07_staged_gemm", "sgemm_tiled")
    assert course.solution_source("07_staged_gemm", "no_such_kernel") is None


class _Res:
    def __init__(self, ms):
        self.median_ms, self.rel_iqr = ms, 0.01

    def gbps(self, nbytes):
        return nbytes / self.median_ms / 1e6

    def tflops(self, flops):
        return flops / self.median_ms / 1e9


def test_compare_checks_everything_before_timing(monkeypatch):
    """Is a wrong variant reported, by name, before anything is timed?"""
    from course import variants
    timed = []
    monkeypatch.setattr("course._timing.benchmark", lambda fn, **kw: timed.append(kw["name"]) or _Res(1.0))
    good = variants.Variant("good", lambda: None, check=lambda: True)
    bad = variants.Variant("bad", lambda: None, check=lambda: course.check([1.0], [2.0]))
    with pytest.raises(course.CheckError, match="variant 'bad' is wrong, so nothing was timed"):
        variants.compare([good, bad], verbose=False)
    assert timed == []


def test_compare_rows_ratios_table_and_plot(monkeypatch, capsys):
    """Are the rows' rates and anchor ratios right, per-variant anchors honoured, and the table printed?"""
    import matplotlib
    matplotlib.use("Agg")
    from course import variants
    times = {"copy": 1.0, "cublas": 2.0, "a": 2.0, "b": 4.0}
    monkeypatch.setattr("course._timing.benchmark", lambda fn, **kw: _Res(times[kw["name"]]))
    V = variants.Variant
    rows = variants.compare([V("a", lambda: None, about="first"), V("b", lambda: None, anchor="cublas")],
                            anchors=[V("copy", lambda: None), V("cublas", lambda: None)], work=1e9, title="demo")
    by = {r["name"]: r for r in rows}
    assert by["a"]["rate"] == pytest.approx(500.0) and by["a"]["of_anchor"] == pytest.approx(0.5)
    assert by["b"]["anchor"] == "cublas" and by["b"]["of_anchor"] == pytest.approx(0.5)
    out = capsys.readouterr().out
    assert "demo" in out and "first" in out and "0.5x" in out
    rows.plot()
    with pytest.raises(ValueError, match="unit"):
        variants.compare([V("a", lambda: None)], unit="GFLOP")


def test_recorded_views_read_only_the_suites_records(tmp_path, monkeypatch):
    """Beside the suite's <gpu>.json, benchmarks/results keeps other records with "rows" of their own (the
    grading cost per chapter, the class batches): are they left out of the lessons' recorded rows?"""
    import json
    import course._ceilings
    suite = {"device": {"name": "GPU A"}, "ceilings": {"copy_gbps": 1000.0},
             "rows": [{"chapter": "01_first_kernel", "name": "copy", "value": 900.0, "unit": "GB/s"}]}
    other = {"device": {"name": "GPU A"}, "rows": [{"chapter": "01_first_kernel", "grade_s": 6.5}]}
    (tmp_path / "a-grading-cost.json").write_text(json.dumps(other))   # sorts first
    (tmp_path / "gpu-a.json").write_text(json.dumps(suite))
    monkeypatch.setattr(course._ceilings, "results_dir", lambda: tmp_path)
    rows, gpu, ceil = course.results.recorded_rows("01_first_kernel")
    assert [r["name"] for r in rows] == ["copy"] and gpu == "GPU A" and ceil["copy_gbps"] == 1000.0
    assert [r["name"] for r in course.results.rows_of(("01_first_kernel",), tmp_path)] == ["copy"]
