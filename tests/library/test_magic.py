"""The %%cuda and %%gpu magics, without a GPU."""
import pytest

from course import _env, _magic

GOOD = 'extern "C" __global__ void k(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 1; }'


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(_env, "_probe", lambda: (None, "no driver"))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))


def test_cuda_cell_compiles_and_keeps_source(capsys):
    """Without a GPU, does %%cuda compile for sm_80, say so, and keep the source for grading?"""
    ns = {}
    _magic.cuda_cell("--name ex1", GOOD, ns)
    out = capsys.readouterr().out
    assert "Compiled k for sm_80" in out and "needs a GPU" in out and "registers" in out
    assert _magic.cell_sources["ex1"] == GOOD and ns == {}


def test_compile_error_is_a_usage_error_with_numbered_source():
    """Is a compile error shown as a short UsageError with numbered source, not a traceback wall? The
    cell's one line of source is the cell's line 2 (Jupyter numbers the %%cuda line 1)."""
    from IPython.core.error import UsageError
    with pytest.raises(UsageError) as ei:
        _magic.cuda_cell("", GOOD.replace("y[i] = 1", "y[i] = z"), {})
    assert ">   2 |" in str(ei.value) and '"z"' in str(ei.value)


def test_no_run_compile_error_is_printed_not_raised(capsys):
    """In an exercise cell (--no-run), is a compile error printed so later cells still run?"""
    _magic.cuda_cell("--name ex2 --no-run", "__global__ void k( {", {})
    assert "could not compile" in capsys.readouterr().out
    assert "ex2" in _magic.cell_sources


def test_requires_flag_compiles_for_that_arch(capsys):
    """Does --requires sm_90 compile for sm_90 when there is no GPU?"""
    _magic.cuda_cell("--requires sm_90", GOOD, {})
    assert "for sm_90" in capsys.readouterr().out


def test_include_compiles_the_named_cell_ahead_and_keeps_line_numbers(capsys):
    """Does --include compile another cell's device functions ahead of this one, refuse a cell not yet run, and
    number an error in this cell by this cell's lines?"""
    from IPython.core.error import UsageError
    _magic.cuda_cell("--name parts_t", "__device__ float one() { return 1.0f; }", {})
    user = 'extern "C" __global__ void k2(float* y) { y[threadIdx.x] = one(); }'
    _magic.cuda_cell("--name step_t --include parts_t", user, {})
    assert "Compiled k2" in capsys.readouterr().out
    with pytest.raises(UsageError, match="run the `%%cuda --name never_run` cell above first"):
        _magic.cuda_cell("--include never_run", user, {})
    with pytest.raises(UsageError) as ei:
        _magic.cuda_cell("--include parts_t", "int a;\n" + user.replace("one()", "two()"), {})
    assert ">   3 |" in str(ei.value) and "two" in str(ei.value)


def test_headers_adds_a_header_library_or_says_what_to_install(monkeypatch, capsys):
    """Does --headers cute compile a cell that includes CuTe (where its headers are installed), print one sentence
    saying what to install (and keep the source) where they are not, and refuse a library it does not know?"""
    from IPython.core.error import UsageError
    import course
    user = ('#include <cute/layout.hpp>\n'
            'extern "C" __global__ void kc(int* y) { y[0] = cute::size(cute::Layout<cute::Shape<cute::_8, cute::_64>>{}); }')
    if course.cute.available()[0]:
        _magic.cuda_cell("--name cute_t --headers cute", user, {})
        assert "Compiled kc" in capsys.readouterr().out
    with pytest.raises(UsageError, match="unknown header library 'cutlass3'; known: cute"):
        _magic.cuda_cell("--headers cutlass3", user, {})
    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    monkeypatch.setattr(course.cute, "_from_wheel", lambda: None)
    assert _magic.cuda_cell("--name cute_t2 --headers cute", user, {}) == {}
    assert capsys.readouterr().out.strip() == course.cute.MISSING
    assert _magic.cell_sources["cute_t2"] == user


def test_arch_specific_requirements_mean_that_gpu_only(monkeypatch, capsys):
    """Is sm_90a satisfied by an sm_90 GPU only (not sm_80, not sm_100), sm_90 by it and newer, and does
    %%gpu --requires sm_90a skip with one sentence elsewhere?"""
    from types import SimpleNamespace
    for cc, exact, at_least in (((9, 0), True, True), ((8, 0), False, False), ((10, 0), False, True)):
        monkeypatch.setattr(_env, "device_info", lambda cc=cc: SimpleNamespace(cc=cc, arch=f"sm_{cc[0]}{cc[1]}"))
        assert _magic._arch_satisfied("sm_90a") is exact and _magic._arch_satisfied("sm_90") is at_least

    class Shell:
        def run_cell(self, cell):
            raise AssertionError("must not run")
    monkeypatch.setattr(_env, "gpu_available", lambda: True)
    _magic.gpu_cell("--requires sm_90a time the ladder", "1/0", Shell())
    out = capsys.readouterr().out.strip()
    assert out.startswith("Not run: time the ladder needs sm_90a (this GPU is sm_100)") and out.count("\n") == 0


def test_bad_magic_arguments():
    """Does an unknown option give a usage line?"""
    from IPython.core.error import UsageError
    with pytest.raises(UsageError, match="--name"):
        _magic.cuda_cell("--bogus", GOOD, {})


def test_gpu_cell_skips_with_one_sentence(capsys):
    """Does %%gpu print one sentence and run nothing without a GPU?"""
    class Shell:
        def run_cell(self, cell):
            raise AssertionError("must not run")
    _magic.gpu_cell("time the copy", "1/0", Shell())
    out = capsys.readouterr().out.strip()
    assert out.startswith("[no GPU] Skipped: time the copy (it needs an NVIDIA GPU).") and out.count("\n") == 0


def test_cublas_cell_tries_the_call_on_the_numpy_model(capsys):
    """Without a GPU, does %%cublas check the call, make it on the NumPy model and keep it for grading?"""
    from repo_helpers import REPO
    right = (REPO / "solutions" / "10_cublas" / "sgemm_rowmajor.py").read_text()
    assert _magic.cublas_cell("--name sgemm_rowmajor", right) is True
    out = capsys.readouterr().out
    assert "right on a small case" in out and "NumPy model" in out
    assert _magic.cell_sources["sgemm_rowmajor"] == right
    wrong = right.replace('"ldc": "ldc"', '"ldc": "n"')
    assert _magic.cublas_cell("--name sgemm_rowmajor", wrong) is False
    assert "wrong on a small case" in capsys.readouterr().out
    assert _magic.cublas_cell("--name sgemm_rowmajor", "{\n    // YOUR CODE HERE\n}") is False
    assert "not filled in" in capsys.readouterr().out


def test_cublas_cell_needs_a_known_name():
    from IPython.core.error import UsageError
    with pytest.raises(UsageError, match="sgemm_rowmajor"):
        _magic.cublas_cell("", "{}")


@pytest.mark.parametrize("magic, name, cell", [
    (_magic.cublas_cell, "sgemm_rowmajor", '{"transa": "N", [1]: 2}'),
    (_magic.streams_cell, "two_stage", '{"streams": 2, [1]: 2}'),
    (_magic.cublas_cell, "sgemm_rowmajor", '{"transa": "N", {"a": 1}: 2}'),
    (_magic.streams_cell, "two_stage", '{"streams": 2, {}: 2}'),
])
def test_data_cells_with_an_unhashable_key_get_a_teachers_message(magic, name, cell, capsys):
    """A list or dict as a key makes ast.literal_eval raise TypeError: does a %%cublas or %%streams cell print
    what to write (and return False) instead of a traceback?"""
    assert magic(f"--name {name}", cell) is False
    out = capsys.readouterr().out
    assert out.startswith(f"{name}: ") and "literal dict" in out and "no list or dict as a key" in out


@pytest.mark.parametrize("magic, name", [(_magic.cublas_cell, "sgemm_rowmajor"), (_magic.streams_cell, "two_stage")])
def test_data_cells_longer_than_the_cap_are_refused_unread(magic, name, capsys):
    from course._sources import MAX_DATA_CELL_CHARS
    cell = '{"streams": 2}  # ' + "x" * MAX_DATA_CELL_CHARS
    assert magic(f"--name {name}", cell) is False
    out = capsys.readouterr().out
    assert f"at most {MAX_DATA_CELL_CHARS:,}" in out and len(out) < 1000


def test_streams_cell_refuses_more_events_than_the_cap(capsys):
    """Does the %%streams magic apply course.schedule's caps (one home for them) before judging the order?"""
    from course import schedule as sched
    events = {f"e{i}": "produce" for i in range(sched.MAX_EVENTS + 1)}
    cell = repr({"streams": 2, "chunks": 4, "stream": {st: [0, 1] for st in sched.STAGES}, "record": events})
    assert _magic.streams_cell("--name two_stage", cell) is False
    assert f"at most {sched.MAX_EVENTS}" in capsys.readouterr().out


@pytest.mark.parametrize("line,says", [("", "takes --name EXERCISE (two_stage)"),
                                       ("--name two_stages", "unknown exercise 'two_stages'; known: two_stage")])
def test_streams_cell_names_its_exercises(line, says):
    """Does %%streams, like %%cublas, refuse a missing or unknown --name and list the exercises it knows?"""
    with pytest.raises(Exception) as err:
        _magic.streams_cell(line, "{}")
    assert says in str(err.value)


def test_schedule_exercises_are_the_specs():
    """Are course.schedule.EXERCISES exactly the spec exercises whose cells are %%streams cells?"""
    from autograder import chapters, load_chapter
    from course import schedule as sched
    named = {e.name for ch in chapters() for e in load_chapter(ch) if getattr(e, "magic", None) == "%%streams"}
    assert named == set(sched.EXERCISES)
