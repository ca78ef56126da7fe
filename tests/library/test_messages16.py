"""Issue #16 items 8 and 10 in the course library, without a GPU: compile errors of a `%%cuda` cell are
numbered as Jupyter numbers the cell's lines (its `%%cuda` line is line 1) wherever the cell is compiled;
a resource report that shows local memory says what it is; the no-GPU line reads as one sentence."""
import re

import pytest

import course
from course import _env, _magic

HEAD = 'extern "C" __global__ void k(float* y, int n)\n{\n    int i = threadIdx.x;\n'
BAD_LINE = "    if (i < n) y[i] = z;"
BODY = HEAD + BAD_LINE + "\n}\n"
BODY_LINE = BODY.split("\n").index(BAD_LINE) + 1  # 4: where the error is in the source text
CELL_LINE = BODY_LINE + 1                          # 5: where Jupyter shows it, below the %%cuda line

# a per-thread array indexed at run time cannot live in registers: ptxas gives it a stack frame
LOCAL = r'''extern "C" __global__ void pick(const int* idx, float* y, int n) {
    float a[64];
    for (int j = 0; j < 64; ++j) a[j] = y[j * n + threadIdx.x];
    float s = 0.f;
    for (int j = 0; j < n; ++j) s += a[idx[j] & 63];
    y[threadIdx.x] = s;
}
'''


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch, tmp_path):
    monkeypatch.setattr(_env, "_probe", lambda: (None, "no driver"))
    monkeypatch.setenv("COURSE_CACHE_DIR", str(tmp_path))
    saved = dict(_magic.cell_sources)
    yield
    _magic.cell_sources.clear()
    _magic.cell_sources.update(saved)


def marked(text: str) -> list:
    return [int(n) for n in re.findall(r"^>\s*(\d+) \|", text, flags=re.M)]


def test_cuda_cell_error_is_numbered_as_the_cell(capsys):
    """Item 8: the excerpt, its header and NVRTC's own log all give the cell's line (magic line = 1)."""
    _magic.cuda_cell("--name k --no-run", BODY, {})
    out = capsys.readouterr().out
    assert marked(out) == [CELL_LINE], out
    assert f"kernel.cu({CELL_LINE}): error" in out and "its %%cuda line being 1" in out
    assert f">{CELL_LINE:4d} | {BAD_LINE}" in out  # the marked number is the line shown next to it


def test_compile_for_arch_numbers_from_first_line():
    """`first_line` shifts the numbers and only the numbers; the default numbers the text from 1; a
    number that is not a line number is refused with the reason."""
    for first_line in (1, 2, 10):
        with pytest.raises(course.CompileError) as ei:
            course.compile_for_arch(BODY, "sm_80", first_line=first_line)
        msg = str(ei.value)
        assert marked(msg) == [BODY_LINE + first_line - 1], msg
        assert f">{BODY_LINE + first_line - 1:4d} | {BAD_LINE}" in msg
        assert ei.value.source == BODY  # the error carries the student's text, without the #line directive
    with pytest.raises(course.CompileError) as ei:
        course.compile_for_arch(BODY, "sm_80")
    assert "%%cuda" not in str(ei.value)
    for bad in (0, -3, 1.5, True, "2"):
        with pytest.raises(ValueError, match="first_line"):
            course.compile_for_arch(BODY, "sm_80", first_line=bad)
    good = course.compile_for_arch(BODY.replace("= z", "= 1"), "sm_80", first_line=2)
    assert good.source == BODY.replace("= z", "= 1") and good.kernel_names == ["k"]


def test_lesson_cells_and_course_compile_number_as_the_cell(monkeypatch):
    """A `CudaCell` (a lesson's %%cuda cell read back) and `course.compile` of a cell the student ran
    (``course.cell_sources[...]``, as the exercises' self-check cells do) number as the magic does."""
    cell = course.CudaCell("chapters/x.ipynb", "k", BODY, ("k",))
    with pytest.raises(course.CompileError) as ei:
        cell.compile_for_arch("sm_80")
    assert marked(str(ei.value)) == [CELL_LINE]

    class Dev:
        arch = "sm_80"
    monkeypatch.setattr(_env, "device_info", lambda: Dev())
    with pytest.raises(course.CompileError) as ei:
        course.compile(BODY)  # text of no cell: numbered from 1
    assert marked(str(ei.value)) == [BODY_LINE]
    _magic.cell_sources["k"] = BODY
    with pytest.raises(course.CompileError) as ei:
        course.compile(course.cell_sources["k"])
    assert marked(str(ei.value)) == [CELL_LINE]


def test_local_memory_is_explained_once_on_one_line():
    """Item 10: "N B local" comes with what local memory is, only where N > 0, once per report line."""
    used, unused = course.Resources(20, 0, 32, 0, 0, 0, 1024), course.Resources(20, 0, 0, 0, 0, 0, 1024)
    assert "32 B local (per-thread stack memory in DRAM" in used.summary()
    assert "spills" in used.summary() and "slower" in used.summary() and "\n" not in used.summary()
    assert "stack" not in unused.summary() and "stack" not in used.summary(explain=False)
    from course._compile import resource_lines
    lines = resource_lines([("a", unused), ("b", used), ("c", used)])
    assert ["stack" in line for line in lines] == [False, True, False]


def test_cuda_cell_report_explains_local_memory(capsys):
    """The no-GPU compile line of a kernel that has local memory says what it is, in one line."""
    _magic.cuda_cell("", LOCAL, {})
    out = capsys.readouterr().out.strip()
    m = re.search(r"pick: .*?(\d+) B local", out)
    assert m and int(m.group(1)) > 0, out
    assert out.count("\n") == 0 and out.count("per-thread stack memory in DRAM") == 1, out


def test_no_gpu_message_reads_as_a_sentence(capsys):
    """Item 10: "[no GPU] Skipped: <what> (it needs an NVIDIA GPU). <where to run it>" for an action, a
    noun phrase or nothing; one line even if `what` spans lines."""
    for what, shown in [("launch 3 blocks of 48 threads and print who ran where",
                         "launch 3 blocks of 48 threads and print who ran where"),
                        ("The benchmark suite.", "The benchmark suite"),
                        ("time the copy\n  twice", "time the copy twice")]:
        msg = course.no_gpu_message(what)
        assert msg.startswith(f"[no GPU] Skipped: {shown} (it needs an NVIDIA GPU). "), msg
        assert "Colab" in msg and "\n" not in msg
    assert course.no_gpu_message().startswith("[no GPU] Skipped: this cell (it needs an NVIDIA GPU).")
    assert "needs an NVIDIA GPU, so it was skipped" not in course.no_gpu_message("x")

    class Shell:
        def run_cell(self, cell):
            raise AssertionError("must not run")
    _magic.gpu_cell("", "1/0", Shell())
    assert capsys.readouterr().out.startswith("[no GPU] Skipped: this cell (it needs an NVIDIA GPU).")
