"""Chapter 01, section 8: the vector add as a standalone CUDA C++ program (issue #22).

The program lives in one `%%cuda --name vec_add_program` cell; NVRTC sees only its kernel (the host part is
behind `#ifndef __CUDACC_RTC__`), nvcc builds the whole file. These tests read the cell with
`course.lesson_cell`: its kernel builds with NVRTC and is the chapter's `vec_add`, it uses the runtime API the
section teaches, every runtime call goes through `CUDA_CHECK`, the host part type-checks (g++ with the pip
headers; nvcc where there is one), and the notebook's build cell says in one sentence what is missing.
GPU tier: `pytest -m gpu tests/lessons/test_ch01_host.py` builds and runs it with nvcc.
"""
from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from repo_helpers import REPO, import_course, read_json_notebook

STEM = "01_first_kernel"
# what the program and the CuPy cell both print
RESULT = re.compile(r"vec_add: n = (\d+), grid = (\d+) blocks of (\d+) threads, (\d+) wrong")
CALL = re.compile(r"\b(cuda[A-Z]\w*)\s*\(")
CHECKED_LAUNCH = re.compile(r"\s*CUDA_CHECK\(\s*cudaGetLastError\(\)\s*\);"
                            r"\s*CUDA_CHECK\(\s*cudaDeviceSynchronize\(\)\s*\);")


@pytest.fixture(scope="module")
def course():
    return import_course()


@pytest.fixture(scope="module")
def ch01(course):
    from course.lessons import ch01
    return ch01


@pytest.fixture(scope="module")
def program(course) -> str:
    return course.lesson_cell(STEM, "vec_add_program").source


def _cells() -> list[dict]:
    return read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")["cells"]


def _text(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def _cell_line(source: str, needle: str, first_line: int) -> int:
    """The notebook's line number of the first source line containing ``needle``."""
    return next(i for i, line in enumerate(source.splitlines()) if needle in line) + first_line


def unchecked_calls(source: str, first_line: int = 2) -> list[str]:
    """Runtime calls of ``source`` not wrapped in CUDA_CHECK, and launches not followed by the two checks of
    section 5 (``cudaGetLastError``, then ``cudaDeviceSynchronize``), as teacher's messages with cell lines."""
    from course.source import strip_comments
    text = strip_comments(source)
    # the macro's own body calls cudaGetErrorString: blank it, keeping its lines so numbers stay right
    text = re.sub(r"#define\s+CUDA_CHECK\b(?:[^\n]*\\\n)*[^\n]*", lambda m: "\n" * m.group().count("\n"), text)
    problems = []
    for m in CALL.finditer(text):
        line = text.count("\n", 0, m.start()) + first_line
        if not re.search(r"CUDA_CHECK\(\s*$", text[max(0, m.start() - 40):m.start()]):
            problems.append(f"line {line}: {m.group(1)}(...) is not checked; write CUDA_CHECK({m.group(1)}(...))")
    for m in re.finditer(r"<<<[^;]*;", text):
        if not CHECKED_LAUNCH.match(text, m.end()):
            line = text.count("\n", 0, m.start()) + first_line
            problems.append(f"line {line}: the launch should be followed by CUDA_CHECK(cudaGetLastError()); "
                            "then CUDA_CHECK(cudaDeviceSynchronize());")
    return problems


def _n_and_block(program: str) -> tuple[int, int]:
    """The program's n and block size, as its source sets them."""
    return (int(re.search(r"const int n = (\d+);", program).group(1)),
            int(re.search(r"dim3 block\((\d+)\);", program).group(1)))


def _kernel(source: str) -> str:
    """The vec_add kernel's text from `__global__` to its closing brace, comments, `extern "C"` and spacing
    left out."""
    from course.source import strip_comments
    text = strip_comments(source)
    start = text.index("__global__ void vec_add(")
    body = text[start:text.index("}", text.index("{", start)) + 1]
    return " ".join(body.split())


# --- the cell and its kernel (NVRTC) ----------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_program_kernel_compiles_with_nvrtc(course, program, arch):
    """Does NVRTC build the program cell (its kernel; the host part hidden by `#ifndef __CUDACC_RTC__`)?"""
    cell = course.lesson_cell(STEM, "vec_add_program")
    try:
        prog = cell.compile_for_arch(arch)
    except course.CompileError as exc:
        if "could not be loaded" in str(exc):
            pytest.skip("NVRTC cannot be loaded here")
        raise
    assert prog.cubin and cell.kernels == ("vec_add",)
    assert "__global__" not in program.split("#ifndef __CUDACC_RTC__")[2], "the kernel must stay outside the guards"


def test_program_kernel_is_the_chapters_vec_add(course, program):
    """Is the program's kernel section 2's vec_add as written (only `extern "C"` and comments may differ), and
    does `lesson_cell(..., "vec_add")` still give section 2's cell?"""
    lesson = course.lesson_cell(STEM, "vec_add")
    assert lesson.key == "vec_add" and lesson.index < course.lesson_cell(STEM, "vec_add_program").index
    assert _kernel(program) == _kernel(lesson.source).replace('extern "C" ', ""), (
        f"the program's kernel drifted from section 2's vec_add:\n{_kernel(program)}\n{_kernel(lesson.source)}")


def test_program_uses_the_runtime_api_the_section_teaches(program):
    """Does the program hold each step the section names: the check macro (file, line, call, error string),
    cudaMalloc, cudaMemcpy both ways, dim3 with a ceil-div, the <<<grid, block>>> launch, cudaGetLastError,
    cudaDeviceSynchronize, a host check, and cudaFree for every pointer cudaMalloc gave?"""
    from course.source import strip_comments
    text = strip_comments(program)
    macro = re.search(r"#define\s+CUDA_CHECK\(call\)((?:[^\n]*\\\n)*[^\n]*)", text)
    assert macro, "no CUDA_CHECK(call) macro"
    for part in ("!= cudaSuccess", "__FILE__", "__LINE__", "#call", "cudaGetErrorString(", "exit("):
        assert part in macro.group(1), f"the CUDA_CHECK macro should use {part}"
    wanted = {
        "cudaMalloc": r"CUDA_CHECK\(cudaMalloc\(&\w+, bytes\)\)",
        "cudaMemcpy host to device": r"cudaMemcpy\(\w+, \w+\.data\(\), bytes, cudaMemcpyHostToDevice\)",
        "cudaMemcpy device to host": r"cudaMemcpy\(\w+\.data\(\), \w+, bytes, cudaMemcpyDeviceToHost\)",
        "dim3 block": r"dim3 block\(\d+\);",
        "dim3 grid with a ceil-div": r"dim3 grid\(\(n \+ block\.x - 1\) / block\.x\);",
        "the launch": r"vec_add<<<grid, block>>>\(\w+, \w+, \w+, n\);",
        "cudaGetLastError": r"cudaGetLastError\(\)",
        "cudaDeviceSynchronize": r"cudaDeviceSynchronize\(\)",
        "a host check": r"wrong \+= \(z\[i\] != x\[i\] \+ y\[i\]\)",
        "cudaFree": r"cudaFree\(\w+\)",
        "the guard NVRTC reads": r"#ifndef __CUDACC_RTC__",
    }
    missing = [name for name, pattern in wanted.items() if not re.search(pattern, text)]
    assert not missing, f"the program lacks: {missing}"
    allocated = set(re.findall(r"cudaMalloc\(&(\w+)", text))
    freed = set(re.findall(r"cudaFree\((\w+)\)", text))
    assert allocated == freed, f"allocated {sorted(allocated)} but freed {sorted(freed)}"


def test_every_runtime_call_is_checked(program):
    """Does every CUDA runtime call of the program go through CUDA_CHECK, with the launch followed by both
    checks of section 5?"""
    assert unchecked_calls(program) == []
    assert len(CALL.findall(program)) >= 10, "the call finder found too few calls to mean anything"


def test_the_check_catches_unchecked_calls(program):
    """Are an unchecked cudaFree, a launch without cudaGetLastError and an unchecked synchronize caught, with
    their cell lines, while a call named only in a comment is not?"""
    free_line = _cell_line(program, "CUDA_CHECK(cudaFree(dz));", 2)
    bare_free = program.replace("CUDA_CHECK(cudaFree(dz));", "cudaFree(dz);")
    assert unchecked_calls(bare_free) == [
        f"line {free_line}: cudaFree(...) is not checked; write CUDA_CHECK(cudaFree(...))"]
    launch_line = _cell_line(program, "vec_add<<<", 2)
    (problem,) = unchecked_calls(program.replace("CUDA_CHECK(cudaGetLastError());", ""))
    assert problem.startswith(f"line {launch_line}: the launch should be followed"), problem
    bare_sync = unchecked_calls(program.replace("CUDA_CHECK(cudaDeviceSynchronize());", "cudaDeviceSynchronize();"))
    assert len(bare_sync) == 2 and "cudaDeviceSynchronize(...) is not checked" in bare_sync[0], bare_sync
    assert bare_sync[1].startswith(f"line {launch_line}: the launch should be followed"), bare_sync
    assert unchecked_calls(program + "\n// cudaFree(dz) once more: only a comment\n") == []


# --- the host part: g++ (pip headers), nvcc -------------------------------------------------------------

def _gxx_syntax(course, source: str):
    """g++ -fsyntax-only on ``source`` with the launch's <<<...>>> removed (a plain call, so g++ still checks
    the arguments against the kernel); None where g++ or the CUDA runtime headers are missing."""
    gxx = shutil.which("g++")
    dirs = [d for d in course.include_dirs()
            if (Path(d) / "cuda_runtime.h").is_file() and (Path(d) / "device_launch_parameters.h").is_file()]
    if not gxx or not dirs:
        return None
    cmd = [gxx, "-std=c++17", "-fsyntax-only", "-x", "c++", *(f"-I{d}" for d in dirs),
           "-include", "device_launch_parameters.h", "-"]
    return subprocess.run(cmd, input=re.sub(r"<<<[^>]*>>>", "", source), capture_output=True, text=True, timeout=120)


def test_host_part_type_checks_with_gxx(course, program):
    """With g++ and the CUDA runtime headers (pip wheels or a toolkit), does the host part compile, and is a
    wrong runtime call (cudaFree with two arguments) refused?"""
    good = _gxx_syntax(course, program)
    if good is None:
        pytest.skip("g++ or the CUDA runtime headers (pip: nvidia-cuda-runtime) are missing here")
    assert good.returncode == 0, good.stderr[-3000:]
    bad = _gxx_syntax(course, program.replace("cudaFree(dz)", "cudaFree(dz, 1)"))
    assert bad.returncode != 0 and "cudaFree" in bad.stderr


def test_program_builds_with_nvcc_and_its_macro_reports_without_gpu(course, ch01, program):
    """Where nvcc is here and no GPU: does the whole file build, and does the program stop at its first
    runtime call with the macro's message (file and cell line, the call, the reason)?"""
    nvcc = ch01.nvcc_path()
    if nvcc is None:
        pytest.skip("nvcc is not installed here")
    if course.gpu_available():
        pytest.skip("a GPU is here: test_program_builds_runs_and_adds_exactly runs the program")
    ok, text = ch01.build_and_run(program, "sm_80", nvcc=nvcc, first_line=course.CELL_FIRST_LINE)
    line = _cell_line(program, "CUDA_CHECK(cudaMalloc(&dx, bytes));", course.CELL_FIRST_LINE)
    assert not ok and f"vec_add.cu:{line}: cudaMalloc(&dx, bytes) failed: " in text, text
    assert re.search(r"failed: .+ \(cudaError\w+\)", text) and "exited with status 1" in text, text


# --- the notebook's build cell ------------------------------------------------------------------------

def test_host_program_names_what_is_missing(ch01, monkeypatch):
    """Without nvcc, without a GPU, or without both: is it one sentence naming what is missing and pointing
    to the CuPy cell, and is nothing built?"""
    monkeypatch.setattr(ch01, "build_and_run", lambda *a, **k: pytest.fail("nothing should be built"))
    for nvcc, gpu, missing in ((None, False, "no nvcc (looked for on PATH, in $CUDA_HOME/bin and "
                                                   "/usr/local/cuda/bin) and no GPU"),
                               ("/x/nvcc", False, "no GPU."), (None, True, "/usr/local/cuda/bin).")):
        monkeypatch.setattr(ch01, "nvcc_path", lambda nvcc=nvcc: nvcc)
        monkeypatch.setattr(ch01, "gpu_available", lambda gpu=gpu: gpu)
        text = ch01.host_program("int main() {}")
        assert missing in text and "The next cell takes the same steps through CuPy." in text, text
        assert "\n" not in text and "Traceback" not in text


def _fake_nvcc(tmp_path, body: str) -> Path:
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir(parents=True, exist_ok=True)
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    return fake


def test_host_program_builds_and_runs_through_nvcc(ch01, course, monkeypatch, tmp_path):
    """With nvcc and a GPU (both faked): is the source written with the cell's line numbering, built for this
    GPU's arch, and the program's output printed after the command; and does a failed build print nvcc's
    message instead of raising?"""
    seen = tmp_path / "seen"
    ok = _fake_nvcc(tmp_path, f'echo "$@" > {seen}.args\nfor a; do last="$a"; done\ncp "$last" {seen}.cu\n'
                              'while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done\n'
                              'printf \'#!/bin/sh\\necho "vec_add: ran"\\n\' > "$out"; chmod +x "$out"\n')
    monkeypatch.setattr(ch01, "nvcc_path", lambda: str(ok))
    monkeypatch.setattr(ch01, "gpu_available", lambda: True)
    monkeypatch.setattr(ch01, "device_info", lambda: SimpleNamespace(arch="sm_90"))
    text = ch01.host_program("int main() {}\n")
    assert text == "$ nvcc -O2 -arch=sm_90 -o vec_add vec_add.cu && ./vec_add\nvec_add: ran", text
    assert "-O2 -arch=sm_90 -o" in Path(f"{seen}.args").read_text()
    assert Path(f"{seen}.cu").read_text() == f'#line {course.CELL_FIRST_LINE} "vec_add.cu"\nint main() {{}}\n'
    bad = _fake_nvcc(tmp_path, 'echo "vec_add.cu(25): error: identifier \\"blockIdx\\" is undefined" >&2; exit 2\n')
    monkeypatch.setattr(ch01, "nvcc_path", lambda: str(bad))
    text = ch01.host_program("int main() {}\n")
    assert "nvcc stopped with exit status 2:" in text and 'vec_add.cu(25): error: identifier "blockIdx"' in text


def test_nvcc_path_looks_on_path_then_cuda_home(ch01, monkeypatch, tmp_path):
    """Is nvcc found on PATH first, and under $CUDA_HOME/bin when PATH has none?"""
    home = tmp_path / "cuda"
    in_home = _fake_nvcc(home, "exit 0\n")
    on_path = _fake_nvcc(tmp_path, "exit 0\n")
    monkeypatch.setenv("CUDA_HOME", str(home))
    monkeypatch.setenv("PATH", str(on_path.parent))
    assert ch01.nvcc_path() == str(on_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ch01.nvcc_path() == str(in_home)


def test_section_cells_in_order_and_the_table_covers_the_program(program, ch01, monkeypatch):
    """Do the program cell, the build cell and the CuPy cell follow each other (the build cell's sentence
    points to the next cell); does the build cell print one sentence here without a GPU; does the CuPy cell
    print the program's line for the same n and block; and does the table name every runtime call the
    program makes and the CuPy steps that replace them?"""
    course = import_course()
    cells = _cells()
    texts = [_text(c) for c in cells]
    at = next(i for i, t in enumerate(texts) if t.startswith("%%cuda --name vec_add_program"))
    build, cupy_cell = texts[at + 1], texts[at + 2]
    assert "ch01.host_program(" in build and cupy_cell.startswith("%%gpu") and "import cupy" in cupy_cell
    assert next(i for i, t in enumerate(texts) if t.startswith("## Summary")) > at + 2
    monkeypatch.setattr(ch01, "gpu_available", lambda: False)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(build, {"course": course, "ch01": ch01})
    assert out.getvalue().count("\n") == 1 and "no GPU" in out.getvalue() and "CuPy" in out.getvalue()
    printf = re.search(r'printf\("(vec_add: [^"]*)\\n"', program).group(1)
    fstring = re.search(r'print\(f"(vec_add: [^"]*)"\)', cupy_cell).group(1)
    assert re.sub(r"%[du]", "{}", printf) == re.sub(r"\{[^{}]*\}", "{}", fstring)
    n, block = re.search(r"n, block = ([\d_]+), (\d+)", cupy_cell).groups()
    assert (int(n), int(block)) == _n_and_block(program), "the CuPy cell should use the program's n and block"
    table = next(t for t in texts[at:] if t.lstrip().startswith("**The program line by line"))
    named = set(CALL.findall(program)) - {"cudaGetErrorString", "cudaGetErrorName"}
    absent = [f for f in sorted(named) if f"`{f}(" not in table and f"`CUDA_CHECK({f}(" not in table]
    absent += [s for s in ("cupy.empty(", "cupy.asarray(", ".get()", "vec_add(grid, block,", "LaunchError",
                           "course.grid_for(", "course.check(") if s not in table]
    assert not absent, f"the mapping table does not name: {absent}"


# --- GPU tier --------------------------------------------------------------------------------------------

def _nvcc_or_skip(ch01) -> str:
    nvcc = ch01.nvcc_path()
    if nvcc is None:
        pytest.skip("nvcc is not installed here (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    return nvcc


@pytest.mark.gpu
def test_program_builds_runs_and_adds_exactly(course, ch01, program):
    """Does nvcc build the program for this GPU, and does it print a ceil-div grid and 0 wrong, exit 0?"""
    ok, text = ch01.build_and_run(program, course.device_info().arch, nvcc=_nvcc_or_skip(ch01),
                                  first_line=course.CELL_FIRST_LINE)
    m = RESULT.search(text)
    assert ok and m, text
    n, grid, block, wrong = map(int, m.groups())
    assert (n, block) == _n_and_block(program), text
    assert grid == -(-n // block) and wrong == 0, text
    assert ch01.host_program(program) == text


@pytest.mark.gpu
def test_macro_pins_a_bad_launch_to_its_line(course, ch01, program):
    """Micro-exercise 8.1: with 2,048-thread blocks, does CUDA_CHECK(cudaGetLastError()) stop the program on
    its own cell line with an invalid-launch error (CUDA 13 on the H100 names it cudaErrorInvalidValue, older
    runtimes cudaErrorInvalidConfiguration, as the answer says), before any result is printed?"""
    bad = program.replace("dim3 block(256);", "dim3 block(2048);")
    assert bad != program
    ok, text = ch01.build_and_run(bad, course.device_info().arch, nvcc=_nvcc_or_skip(ch01),
                                  first_line=course.CELL_FIRST_LINE)
    line = _cell_line(program, "CUDA_CHECK(cudaGetLastError());", course.CELL_FIRST_LINE)
    assert not ok and f"vec_add.cu:{line}: cudaGetLastError() failed: " in text, text
    assert re.search(r"cudaErrorInvalid(Value|Configuration)\)", text) and not RESULT.search(text), text


@pytest.mark.gpu
def test_cupy_cell_prints_the_programs_line(course, program):
    """Does the CuPy cell, run with section 2's vec_add, print the line the program prints (0 wrong)?"""
    import numpy as np
    texts = [_text(c) for c in _cells()]
    at = next(i for i, t in enumerate(texts) if t.startswith("%%cuda --name vec_add_program"))
    body = texts[at + 2].split("\n", 1)[1]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(body, {"np": np, "course": course, "vec_add": course.lesson_cell(STEM, "vec_add").kernel()})
    n, block = _n_and_block(program)
    assert out.getvalue().strip() == f"vec_add: n = {n}, grid = {-(-n // block)} blocks of {block} threads, 0 wrong"
