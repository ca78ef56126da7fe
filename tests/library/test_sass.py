"""SASS without a GPU: the disassembler the install brings, where the lookup finds it, and what it shows."""
from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest

from repo_helpers import REPO, import_course, load_tool, read_json_notebook

# The message cuobjdump prints when it runs without nvdisasm beside it (the cuobjdump wheel alone).
CUOBJDUMP_ALONE = ("cuobjdump fatal   : Could not find executable file 'nvdisasm'; you can try adding path "
                   "to environment variables PATH or NVDISASM_PATH")


def fake_tool(folder, name: str, script: str = "echo fake", executable: bool = True):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755 if executable else 0o644)
    return path


def test_sass_of_saxpy_for_sm90_without_a_gpu():
    """Does a kernel compiled for sm_90 disassemble here, from the install's own disassembler, into SASS
    with the multiply-add as one FFMA and the loads and the store as LDG and STG?

    No skip: the bootstrap installs nvdisasm (pyproject's CUDA extras), so a missing one is a failure."""
    course = import_course()
    sass = course.lesson_cell("01_first_kernel", "saxpy").compile_for_arch("sm_90").sass()  # chapter 01's cell
    ops = course.sass_opcodes(sass)["saxpy"]
    assert ops["FFMA"] == 1 and ops["LDG"] == 2 and ops["STG"] == 1, sass[:3000]
    assert "saxpy" in sass, sass[:3000]


# A piece of nvdisasm -c output: two kernels, guarded instructions, an address past 0xffff.
TWO_KERNELS = """
//--------------------- .text.first               --------------------------
\t.section\t.text.first,"ax",@progbits
first:
.text.first:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.CONSTANT R2, desc[UR4][R2.64] ;
        /*0020*/               @P0 EXIT ;
        /*0030*/              @!UP1 LDG.E R7, desc[UR4][R4.64] ;
        /*10000*/                  STG.E desc[UR4][R4.64], R7 ;
.L_x_0:
        /*0040*/                   BRA `(.L_x_0) ;
//--------------------- .text.second              --------------------------
.text.second:
        /*0000*/                   F2FP.BF16.F32.PACK_AB R0, R1, R2 ;
        /*0010*/                   HMMA.16816.F32.BF16 R4, R8, R12, R4 ;
"""


def test_sass_opcodes_counts_per_kernel():
    """Does course.sass_opcodes count each kernel's instructions by opcode (guards and modifiers set aside,
    or kept with modifiers=True), with digits in opcodes and addresses of five digits?"""
    course = import_course()
    ops = course.sass_opcodes(TWO_KERNELS)
    assert set(ops) == {"first", "second"}
    assert ops["first"] == {"LDC": 1, "LDG": 2, "EXIT": 1, "STG": 1, "BRA": 1}, ops["first"]
    assert ops["second"] == {"F2FP": 1, "HMMA": 1}, ops["second"]
    full = course.sass_opcodes(TWO_KERNELS, modifiers=True)
    assert full["first"]["LDG.E.CONSTANT"] == 1 and full["first"]["LDG.E"] == 1 and "LDG" not in full["first"]
    assert full["second"]["HMMA.16816.F32.BF16"] == 1
    assert course.sass_opcodes("") == {} and "sass_opcodes" in course.__all__


def test_sass_is_parsed_in_one_place():
    """Issue #22: does every notebook and test count SASS instructions with course.sass_opcodes, rather than
    with its own copy of the instruction-line pattern?"""
    own = re.compile(r"\[0-9a-f\]\{4")          # the address pattern ([0-9a-f]{4) a private parser starts with
    paths = [*REPO.glob("chapters/*.ipynb"), *REPO.glob("exercises/source/*/*.ipynb"),
             *(p for p in REPO.glob("tests/**/*.py") if p.resolve() != Path(__file__).resolve()),
             *REPO.glob("course/lessons/*.py"), *REPO.glob("benchmarks/**/*.py"), *REPO.glob("autograder/**/*.py")]
    copies = [p.relative_to(REPO).as_posix() for p in paths if own.search(p.read_text(encoding="utf-8"))]
    assert copies == [], f"parse SASS with course.sass_opcodes instead of a private pattern in: {copies}"


def test_tool_lookup_finds_the_wheels_bin_folders(tmp_path, monkeypatch):
    """Is a tool found where the CUDA 13 wheels put it (nvidia/cu13/bin) and where the CUDA 12 ones do
    (nvidia/<component>/bin), ahead of PATH, and is a file that cannot be executed passed over?"""
    import_course()
    from course import _compile
    site13, site12, on_path = tmp_path / "site13", tmp_path / "site12", tmp_path / "path"
    wheel13 = fake_tool(site13 / "nvidia" / "cu13" / "bin", "nvdisasm")
    wheel12 = fake_tool(site12 / "nvidia" / "cuda_nvdisasm" / "bin", "nvdisasm")
    fake_tool(on_path, "nvdisasm")
    monkeypatch.setenv("PATH", str(on_path))
    monkeypatch.setattr(sys, "path", [str(site13)])
    assert _compile._find_tool("nvdisasm") == str(wheel13)
    monkeypatch.setattr(sys, "path", [str(site12)])
    assert _compile._find_tool("nvdisasm") == str(wheel12)
    wheel12.chmod(0o644)
    assert _compile._find_tool("nvdisasm") == str(on_path / "nvdisasm")


def test_nvdisasm_is_preferred_and_cuobjdump_alone_is_explained(tmp_path, monkeypatch):
    """Is nvdisasm run when present (cuobjdump needs it anyway), and does cuobjdump without it give the
    package to install instead of cuobjdump's own complaint?"""
    course = import_course()
    from course import _compile
    both, alone = tmp_path / "both", tmp_path / "alone"
    fake_tool(both, "nvdisasm", 'echo "nvdisasm $1"')
    fake_tool(both, "cuobjdump", 'echo "cuobjdump $1"')
    fake_tool(alone, "cuobjdump", f'echo "{CUOBJDUMP_ALONE}" >&2; exit 1')
    monkeypatch.setattr(_compile, "_tool_dirs", lambda: [both])
    assert course.sass_of(b"\x7fELF").startswith("nvdisasm -c")
    monkeypatch.setattr(_compile, "_tool_dirs", lambda: [alone])
    with pytest.raises(FileNotFoundError, match="needs nvdisasm") as exc:
        course.sass_of(b"\x7fELF")
    assert "nvidia-cuda-nvdisasm" in str(exc.value) and "cuda-nvdisasm" in str(exc.value)
    monkeypatch.setattr(_compile, "_tool_dirs", lambda: [tmp_path / "empty"])
    with pytest.raises(FileNotFoundError, match="nvidia-cuda-nvdisasm"):
        course.sass_of(b"\x7fELF")


def test_every_install_route_brings_nvdisasm():
    """Do both CUDA extras of pyproject.toml and environment.yml install nvdisasm, and does the
    `--minimal` wheelhouse keep it (a CUDA Python image seldom has it)?"""
    tomllib = pytest.importorskip("tomllib")
    yaml = pytest.importorskip("yaml")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    cuda_extras = [e for e in extras if re.fullmatch(r"cuda\d+", e)]
    assert cuda_extras, "pyproject.toml has no cudaNN extra"
    for extra in cuda_extras:
        assert any(r.startswith("nvidia-cuda-nvdisasm") for r in extras[extra]), extra
    conda = yaml.safe_load((REPO / "environment.yml").read_text())["dependencies"]
    assert any(isinstance(d, str) and d.split()[0] == "cuda-nvdisasm" for d in conda)
    wheelhouse = load_tool("wheelhouse")
    assert "nvidia-cuda-nvdisasm" not in wheelhouse.skip_set("test", True, [])


def test_chapter01_sass_cell_shows_what_its_text_names():
    """Does chapter 01's SASS cell run without a GPU and print every instruction its text tells the reader
    to look for (two LDG, one FFMA, STG, the bound check's @P0 EXIT), and is the one it names for
    vec_add instead, FADD, really in vec_add's SASS and FFMA not?"""
    course = import_course()
    cells = read_json_notebook(REPO / "chapters" / "01_first_kernel.ipynb")["cells"]
    text = ["".join(c["source"]) for c in cells]
    (at,) = [i for i, t in enumerate(text) if cells[i]["cell_type"] == "code" and ".sass()" in t]
    intro = next(text[i] for i in range(at - 1, -1, -1) if cells[i]["cell_type"] == "markdown")
    assert "SASS" in intro and "FFMA" in intro, "the SASS cell should follow the text that explains it"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(text[at], {"course": course})
    printed = out.getvalue()
    named = set(re.findall(r"`(?:@P0 )?([A-Z][A-Z0-9]+(?:\.[A-Z]+)?)`", intro))
    absent = {op for op in named if not re.search(rf"(?<![\w.]){re.escape(op)}(?![\w])", printed)}
    assert absent == {"FADD"}, f"named in the text but not printed: {absent}\n{printed}"
    assert len(re.findall(r"\bLDG\b", printed)) == 2 and "FFMA" in printed and "@P0 EXIT" in printed, printed
    vec_sass = course.lesson_cell("01_first_kernel", "vec_add").compile_for_arch("sm_90").sass()
    assert "FADD" in vec_sass and "FFMA" not in vec_sass, vec_sass[:3000]
