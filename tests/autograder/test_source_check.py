"""The source check run before a submission is compiled, the compile-log scrubber, and the linear-time
reading of kernel source that both (and the signature check) rely on. CPU only.
"""
import ast
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

import course._signature as signature_lib
from autograder import source_check
from autograder.source_check import (ALLOWED_FOLDERS, ALLOWED_HEADERS, MAX_SOURCE_BYTES, check_source,
                                     header_allowed, scrub_log, strip_comments)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus" / "01_first_kernel" / "saxpy"
KERNEL = ('extern "C" __global__ void saxpy(int n, float a, const float* x, float* y)\n{\n'
          '    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)\n'
          '        y[i] = a * x[i] + y[i];\n}\n')
REFERENCE = "../../solutions/01_first_kernel/saxpy.cu"
DECOY = '#if 0\nextern "C" __global__ void saxpy(int n, float a, const float* x, float* y) {}\n#endif\n'
OUTSIDE = "reaches outside your source"
NOT_ALLOWED = "is not allowed"


def fast(fn, *args, bound=2.0):
    """Run fn(*args) and fail if it takes longer than ``bound`` CPU seconds (generous: 1 MB inputs). CPU
    time, not wall time: the suite runs in parallel and a busy machine must not fail a linear scanner,
    while a backtracking one takes minutes either way."""
    t = time.process_time()
    out = fn(*args)
    took = time.process_time() - t
    assert took < bound, f"{getattr(fn, '__name__', fn)} took {took:.1f} s of CPU time"
    return out


def nvrtc_view(src: str) -> str:
    """The source as NVRTC compiles it: regions under ``#ifndef __CUDACC_RTC__`` (host code for nvcc, as in
    chapter 01's standalone program) dropped up to their matching ``#endif`` (or ``#else``)."""
    out, depth, skip = [], 0, None
    for line in src.split("\n"):
        d = line.strip()
        if skip is None and re.match(r"#\s*ifndef\s+__CUDACC_RTC__\b", d):
            skip, depth = True, 1
            continue
        if skip:
            if re.match(r"#\s*if", d):
                depth += 1
            elif re.match(r"#\s*endif", d):
                depth -= 1
            elif depth == 1 and re.match(r"#\s*else", d):
                skip, depth = None, 0   # the #else part is what NVRTC compiles; its #endif stays harmless
                continue
            if depth == 0:
                skip = None
            continue
        out.append(line)
    return "\n".join(out)


def test_nvrtc_view_drops_only_host_regions():
    src = "a\n#ifndef __CUDACC_RTC__\n#include <cstdio>\n#if X\nb\n#endif\n#endif\nc\n#ifndef OTHER\nd\n#endif"
    assert nvrtc_view(src) == "a\nc\n#ifndef OTHER\nd\n#endif"


def course_kernels(library_cells: bool = False):
    """(id, source as NVRTC sees it) of every solution file and every %%cuda cell of the chapters and exercises.
    Cells that compile against an optional header library (`%%cuda --headers cute`) are lesson-only: the grader
    offers no such library, so they are listed only with ``library_cells`` (and then only they are)."""
    out = [] if library_cells else [(str(p.relative_to(ROOT)), p.read_text())
                                    for p in sorted((ROOT / "solutions").rglob("*.cu"))]
    books = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "exercises" / "source").glob("*/*.ipynb"))
    for nb in books:
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            if cell["cell_type"] == "code" and src.lstrip().startswith("%%cuda"):
                magic, body = src.lstrip().split("\n", 1)
                if ("--headers" in magic) == library_cells:
                    out.append((f"{nb.relative_to(ROOT)}#{i}", nvrtc_view(body)))
    return out


COURSE_KERNELS = course_kernels()


def test_lesson_cells_on_a_header_library_cannot_be_handed_in():
    """Chapter 13's CuTe cell includes CUTLASS's headers, which the grader does not offer: handed in, it is refused
    by the source check with a reason, before anything compiles."""
    cells = course_kernels(library_cells=True)
    assert any("13_hopper_gemm" in k for k, _ in cells)
    for key, source in cells:
        assert "is not allowed" in check_source(source) and "cute/" in check_source(source), key


# --- the allow-list ---------------------------------------------------------------------------------------

def test_the_course_has_kernels_to_check():
    """Are the solutions and the %%cuda cells found (so the tests below check something)?"""
    assert sum(k.startswith("solutions") for k, _ in COURSE_KERNELS) >= 15
    assert sum("#" in k for k, _ in COURSE_KERNELS) >= 15


@pytest.mark.parametrize("source", [s for _, s in COURSE_KERNELS], ids=[k for k, _ in COURSE_KERNELS])
def test_every_course_kernel_passes(source):
    """Does every solution and every %%cuda cell of the course pass the source check?"""
    assert check_source(source) == ""


def test_every_header_the_course_includes_is_allowed():
    """Is each header included by a solution or a %%cuda cell on the allow-list?"""
    found = {m.group(1) for _, s in COURSE_KERNELS
             for m in re.finditer(r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]+)[>"]', s, re.M)}
    assert {"mma.h", "cuda_bf16.h"} <= found
    assert [h for h in sorted(found) if not header_allowed(h)] == []


def test_every_allowed_header_exists_in_the_cuda_include_folders():
    """Does NVRTC find every allowed header and folder in the include folders the course passes it?"""
    import course
    dirs = course.include_dirs()
    if not dirs:
        pytest.skip("no CUDA include folder on this machine")
    missing = [h for h in sorted(ALLOWED_HEADERS) if not any(os.path.isfile(os.path.join(d, h)) for d in dirs)]
    missing += [f for f in ALLOWED_FOLDERS if not any(os.path.isdir(os.path.join(d, f)) for d in dirs)]
    assert missing == []


@pytest.mark.parametrize("name", ["mma.h", "cuda_fp16.h", "cuda/pipeline", "cuda/std/cstdint",
                                  "cooperative_groups/reduce.h", "cub/block/block_reduce.cuh"])
def test_allowed_headers_pass_in_both_spellings(name):
    """Is an allowed header accepted as <name> and as "name"?"""
    assert check_source(f"#include <{name}>\n#include \"{name}\"\n" + KERNEL) == ""


@pytest.mark.parametrize("name, hint", [("cstdint", "cuda/std/cstdint"), ("stdio.h", "printf works"),
                                        ("math.h", "built into CUDA"), ("cuda.h", "driver API"),
                                        ("crt/mma.h", "Delete the line")])
def test_headers_off_the_list_are_refused_with_what_to_use(name, hint):
    """Is a header off the list refused, saying which line, what is allowed and what to use instead?"""
    problem = check_source(KERNEL + f"#include <{name}>\n")
    assert problem.startswith("line 6: ") and NOT_ALLOWED in problem and "<cuda_fp16.h>" in problem
    assert hint in problem


@pytest.mark.parametrize("name", ["/etc/passwd", REFERENCE, "cuda/std/../../../etc/passwd", "cub/./x",
                                  "cuda\\std\\x", "..\\x"])
def test_paths_that_leave_the_include_folders_are_refused(name):
    """Are absolute paths, '..', '.' and backslashes refused, even under an allowed folder?"""
    assert not header_allowed(name)
    assert OUTSIDE in check_source(f'#include "{name}"\n' + KERNEL)


# --- the attacks, plain and evasive ---------------------------------------------------------------------

ATTACKS = {
    "reference": (DECOY + f'#include "{REFERENCE}"\n', OUTSIDE),
    "reference_from_cwd": (DECOY + '#include "solutions/01_first_kernel/saxpy.cu"\n', NOT_ALLOWED),
    "reference_from_include_folder": (DECOY + "#include <../../../../../../solutions/01_first_kernel/saxpy.cu>\n",
                                      OUTSIDE),
    "stringized_file": ('#define S(...) #__VA_ARGS__\n#define X(...) S(__VA_ARGS__)\n'
                        'static_assert(0, X(\n#include "/etc/passwd"\n));\n' + KERNEL, OUTSIDE),
    "device_string": ('#define S(...) #__VA_ARGS__\n#define X(...) S(__VA_ARGS__)\n'
                      '__device__ const char leak[] = X(\n#include "/proc/self/environ"\n);\n' + KERNEL, OUTSIDE),
    "macro_operand": ('#define F "/etc/passwd"\n#include F\n' + KERNEL, "header name written out"),
    "computed_operand": ('#define H(x) <x>\n#include H(mma.h)\n' + KERNEL, "header name written out"),
    "has_include": ('#if __has_include("/etc/shadow")\n#endif\n' + KERNEL, "asks whether a file exists"),
    "has_include_next": ("#if __has_include_next(<mma.h>)\n#endif\n" + KERNEL, "asks whether a file exists"),
    "has_embed": ('#if __has_embed("/etc/shadow")\n#endif\n' + KERNEL, "asks whether a file exists"),
    "has_include_in_a_define": ("#define P __has_include\n" + KERNEL, "asks whether a file exists"),
    "has_include_pasted": ("#define CAT(a, b) a##b\n#define HAS CAT(__has_in, clude)\n"
                           '#if HAS("/etc/shadow")\n#endif\n' + KERNEL, "pastes tokens"),
    "has_include_pasted_digraph": ('#define CAT(a, b) a %:%: b\n#if CAT(__has_in, clude)("/x")\n#endif\n'
                                   + KERNEL, "pastes tokens"),
    "include_next": ("#include_next <mma.h>\n" + KERNEL, "only plain #include"),
    "import": ('#import "/etc/passwd"\n' + KERNEL, "only plain #include"),
    "embed": ('const char d[] = {\n#embed "/etc/passwd"\n};\n' + KERNEL, "only plain #include"),
    "ucn_directive_name": ('#\\u0069nclude "/etc/passwd"\n' + KERNEL, "backslash escape"),
}
EVASIONS = {
    "splice": '#inc\\\nlude "/etc/passwd"\n',
    "splice_after_hash": '#\\\ninclude "/etc/passwd"\n',
    "splices_everywhere": '\\\n#\\\ni\\\nn\\\nc\\\nl\\\nu\\\nd\\\ne\\\n "/etc/passwd"\n',
    "splice_crlf": '#inc\\\r\nlude "/etc/passwd"\r\n',
    "splice_in_the_operand": '#include "/etc/pa\\\nsswd"\n',
    "comment_after_hash": '# /*x*/ include "/etc/passwd"\n',
    "comment_before_operand": '#include/**/"/etc/passwd"\n',
    "multi_line_comment_in_directive": '#/*\n\n*/include "/etc/passwd"\n',
    "comment_before_hash": '/* x */ #include "/etc/passwd"\n',
    "code_then_multi_line_comment": 'int q; /*\n*/ #include "/etc/passwd"\n',
    "digraph": '%:include "/etc/passwd"\n',
    "digraph_with_comment": '%: /* */ include "/etc/passwd"\n',
    "blanks": ' \t\f\v# \t\f\vinclude "/etc/passwd"\n',
    "byte_order_mark": '\ufeff#include "/etc/passwd"\n',
    "unicode_space": '\u00a0\u200b#\u2003include "/etc/passwd"\n',
    "inside_if_0": '#if 0\n#include "/etc/passwd"\n#endif\n',
    "after_unterminated_literals": "char c = ';\nconst char* s = \";\n#include \"/etc/passwd\"\n",
    # gcc splices across trailing blanks and ends lines at a lone CR; NVRTC does neither: both refused
    "splice_with_trailing_blanks": '#inc\\  \nlude "/etc/passwd"\n',
    "comment_ended_by_lone_cr": '// hi\r#include "/etc/passwd"\n',
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_attacks_are_refused(name):
    """Is each way of making the compiler read or probe the grader's files refused, naming the line?"""
    source, why = ATTACKS[name]
    problem = check_source(source)
    assert why in problem, problem
    assert re.match(r"line \d+: ", problem)


@pytest.mark.parametrize("name", list(EVASIONS))
def test_disguised_includes_are_refused(name):
    """Is an #include refused however it is spelled: splices, comments, digraphs, invisible characters,
    #if 0, or a line end only some compilers see?"""
    problem = check_source(EVASIONS[name] + KERNEL)
    assert problem, "not refused"
    assert OUTSIDE in problem or "comment that starts" in problem, problem


def test_the_line_number_is_the_students_line():
    """Does the message name the line as the student's editor shows it, splices and CRLF included?"""
    assert check_source("int a;\r\n\\\n\n#inc\\\nlude <x.h>\n").startswith("line 4: `#include <x.h>`")
    assert check_source("// one\n/* two\nthree */ #include <x.h>\n").startswith("line 3: ")


def test_a_hash_inside_a_digit_separated_number_hides_nothing():
    """Is a probe refused when NVRTC's #if 0 reading (1'2 is a number then a character literal) shows it
    outside the comment the C++17 reading sees?"""
    src = "#if 0\nint a = 1'2; /*\n#endif\n#if __has_include(\"/etc/shadow\")\n#endif\n*/\n#endif\n" + KERNEL
    assert "asks whether a file exists" in check_source(src)
    assert check_source("int a = 1'000'000; /* a // b */\n" + KERNEL) == ""


def test_a_commented_out_include_of_a_forbidden_file_is_refused():
    """Is a forbidden #include inside a multi-line comment refused (readers may disagree about where the
    comment ends), while commented-out CUDA headers and // comments pass?"""
    assert "comment that starts on line 1" in check_source(f'/*\n#include "{REFERENCE}"\n*/\n' + KERNEL)
    assert check_source("/*\n#include <mma.h>\n*/\n// #include \"/etc/passwd\"\n" + KERNEL) == ""


def test_a_line_splice_inside_a_raw_string_is_refused():
    """Is a raw string with a backslash-newline refused (C++ undoes splices inside it, so it may end
    elsewhere than a spliced reading thinks, hiding a directive)?"""
    src = 'const char* s = R"x(abc)x\\\n"/*)x"\n#include "/etc/passwd"\n"*/";\n' + KERNEL
    assert "raw string literal" in check_source(src)


@pytest.mark.parametrize("text", [
    'const char* s = "#include \\"/etc/passwd\\"";\n',
    '__device__ const char* s =\n"#include \\"/etc/passwd\\"";\n',
    "char c = '#'; char d = '\\'';\n#define Q '\"'\n",
    '__device__ const char* r = R"d(\n#include "/etc/passwd"\n%:include <x>\n)d";\n',
    'auto u = u8R"(\n# include "/etc/passwd"\n)";\n',
    "// #include \"/etc/passwd\"\n",
    "int a = 1 /* #include \"/etc/passwd\" */;\n",
    "#define STR(x) #x\n#define CAT(a, b) a##b\nint CAT(v, 1);\n#if 2 > 1\n#endif\n",
    '#pragma once\n#line 10 "kernel.cu"\n#ifdef __CUDA_ARCH__\n#endif\n',
])
def test_text_that_only_looks_like_a_directive_passes(text):
    """Is "#include" inside string, character and raw string literals or comments left alone, and are
    stringizing and pasting outside #if conditions allowed?"""
    assert check_source(text + KERNEL) == ""


def test_size_and_nul_are_refused():
    """Are a source over the size cap and one with a NUL byte refused, saying what to do?"""
    big = KERNEL + "//" + "x" * MAX_SOURCE_BYTES
    assert "256 KiB" in check_source(big)
    assert check_source(KERNEL + "// " + "é" * ((MAX_SOURCE_BYTES - len(KERNEL)) // 2)).startswith("your source is")
    assert check_source(KERNEL + "int a;\0\n").startswith("line 6: your source holds a NUL byte")
    assert check_source(b"bytes") != ""


@pytest.mark.parametrize("name, text", [
    ("tiny_tokens", "a;" * (MAX_SOURCE_BYTES // 2 - 100)),
    ("newlines", "\n" * (MAX_SOURCE_BYTES - 100)),
    ("comment_openers", "// " + "/* " * (MAX_SOURCE_BYTES // 3 - 100)),
    ("unterminated_comment", "/* " * (MAX_SOURCE_BYTES // 3 - 100)),
    ("raw_string_openers", 'R"x(' * (MAX_SOURCE_BYTES // 4 - 100)),
    ("string_openers", '"a' * (MAX_SOURCE_BYTES // 2 - 100)),
    ("directive_gaps", "#" + "/**/" * (MAX_SOURCE_BYTES // 4 - 100)),
    ("all_readings", "// \\ \n1'2 " + "\\ \n'" * (MAX_SOURCE_BYTES // 4 - 100)),
    ("defines", "#define A(x) x##x\n#define B A(1)\n" * (MAX_SOURCE_BYTES // 40)),
])
def test_the_check_runs_in_linear_time(name, text):
    """Does the check finish quickly on a largest-allowed source built to make a scanner backtrack?"""
    fast(check_source, text[:MAX_SOURCE_BYTES], bound=3.0)


# --- reading source in linear time ------------------------------------------------------------------------

def test_strip_comments_is_shared():
    """Do the grader and the course library strip comments with one linear-time function?"""
    from autograder import signature
    assert strip_comments is signature_lib.strip_comments is signature.strip_comments
    assert "_strip_comments" not in vars(signature) and "_strip_comments" not in vars(signature_lib)


@pytest.mark.parametrize("text, stripped", [
    ("a // c\nb", "a  \nb"),
    ("a /* x\ny */ b", "a  \n b"),
    ('"// no" /* yes */', '"// no"  '),
    ("'/*' x /* y */", "'/*' x  "),
    ('R"d(/* )" */)d" // q', 'R"d(/* )" */)d"  '),
    ("// c \\\nstill comment\nb", " \n\nb"),
    ("x = 1'000; // c", "x = 1'000;  "),
    ("/* never closed\n\nabc", " \n\n"),
])
def test_strip_comments_respects_literals_splices_and_lines(text, stripped):
    """Are comments removed, but not inside literals, with splices honoured and line numbers kept?"""
    assert strip_comments(text) == stripped
    assert strip_comments(text).count("\n") == text.count("\n")


def test_the_comment_bomb_is_read_fast():
    """Is the corpus's comment bomb (24,000 "/*" in one comment) read in well under a second, and does
    the whole CPU check pass it?"""
    from autograder import get_exercise
    from autograder.signature import compare_signature
    source = (CORPUS / "comment_bomb.cu").read_text()
    assert source.count("/*") >= 24000
    assert fast(strip_comments, source, bound=0.5).count("/*") == 0
    assert fast(check_source, source, bound=1.0) == ""
    assert fast(compare_signature, get_exercise("01_first_kernel", "saxpy"), source, bound=1.0) == ""


MB = 1_000_000


def _constant_exercise():
    from autograder import chapters, load_chapter
    for ch in chapters():
        for ex in load_chapter(ch):
            if getattr(ex, "constants", None):
                return ex
    pytest.skip("no exercise with __constant__ arrays")


@pytest.mark.parametrize("text", [
    "__global__ void f(" * (MB // 18),
    "__global__ __launch_bounds__(" * (MB // 29),
    "__global__ void f(int a" + "[" * MB + ")",
    "__global__ void f(int a," + " int b," * (MB // 40) + ")",
])
def test_parse_kernels_runs_in_linear_time(text):
    """Does finding kernels stay fast on 1 MB built to make its regexes rescan (the _KERNEL fix)?"""
    fast(signature_lib.parse_kernels, text)


@pytest.mark.parametrize("text", [
    "__constant__" + " const" * (MB // 6) + ";",
    "__constant__ float" * (MB // 18),
    "__constant__ float" + " " * MB + ";",
    "__constant__ float NAME[" * (MB // 24),
    "NAME[0]; " + "__constant__ " * (MB // 13),
    "#define X" + " " * MB + "z",
    "#define X 12" + " " * MB + "z",
    "#define X (" + " " * MB + "z",
    "extern" + " " * MB,
])
def test_the_signature_check_runs_in_linear_time(text):
    """Do compare_signature and check_constants stay fast on 1 MB built to make their regexes backtrack
    (the __constant__ type, qualifier and extent regexes and _defines)?"""
    from autograder.signature import _defines, check_constants, compare_signature
    ex = _constant_exercise()
    text = text.replace("NAME", ex.constants[0].name)
    fast(lambda: (compare_signature(ex, text), check_constants(ex, text), _defines(text)))


@pytest.mark.parametrize("text", ["\n" * MB + "// LAUNCH = {" + "x" * 1000,
                                  "// LAUNCH = {" + "} " * (MB // 2) + "x",
                                  ("// LAUNCH = {" + " " * 1000 + "\n") * (MB // 1014)])
def test_the_launch_comment_is_read_in_linear_time(text):
    """Does reading a // LAUNCH comment stay fast on 1 MB of blank lines or braces (the _COMMENT fix)?"""
    from autograder.launchcfg import LaunchDataError, launch_from_source

    def read():
        try:
            launch_from_source(text)
        except LaunchDataError:
            pass
    fast(read)


def test_the_launch_comment_is_still_found():
    """Is a // LAUNCH line still read after the fix, with CRLF line ends too?"""
    from autograder.launchcfg import launch_from_source
    assert launch_from_source('\n\n  // LAUNCH = {"block": 128}  \r\nint x;') == {"block": 128}
    assert launch_from_source("int x; // LAUNCH = {\"block\": 128}") is None


# --- compile logs -------------------------------------------------------------------------------------------

def test_logs_lose_every_absolute_path():
    """Are include folders shortened to <cuda>/..., and other absolute paths (temp, home, site-packages, the
    repository, options such as -I/...) cut to their base name?"""
    import course
    inc = course.include_dirs()[0] if course.include_dirs() else "/usr/local/cuda/include"
    home, tmp = os.path.expanduser("~"), tempfile.gettempdir()
    log = (f"{inc}/crt/mma.h(12): error: x\n-I{inc} -I/opt/other/include\n"
           f'{tmp}/grader-1/alice/kernel.cu(3): error\n"{home}/secret/notes.txt" {home}\n'
           f"{ROOT}/solutions/01_first_kernel/saxpy.cu(5) {sys.prefix}/lib/site.py file:///etc/passwd")
    out = scrub_log(log)
    assert out.startswith("<cuda>/crt/mma.h(12): error: x\n-I<cuda> -Iinclude\nkernel.cu(3): error\n")
    assert '"notes.txt" <home>' in out and "saxpy.cu(5) site.py file:passwd" in out
    for secret in (home, tmp, str(ROOT), sys.prefix, "/etc", "/opt"):
        assert secret not in out


def test_logs_keep_what_is_not_an_absolute_path():
    """Are relative paths, division and comment markers in the quoted source left alone?"""
    text = "a/b/c ./x/y ../z/w ~/p/q x / y 1/2 */ /* k.cu(3)"
    assert scrub_log(text) == text


def test_logs_lose_control_characters_and_are_capped():
    """Are control and bidi characters removed (newline and tab kept), and is a long log cut in the middle,
    saying so, within the cap?"""
    assert scrub_log("a\x1b[31mb\x07\tc\r\nd\u202ee\x00") == "a[31mb\tc\nde"
    log = "HEAD" + "x" * 50_000 + "TAIL"
    out = scrub_log(log, cap=500)
    assert len(out) <= 500 and out.startswith("HEAD") and out.endswith("TAIL")
    assert re.search(r"\[\.\.\. [\d,]+ characters of the compiler log cut here \.\.\.\]", out)
    assert scrub_log(log, cap=10) == log[:10] and scrub_log("short") == "short"


def test_scrubbing_never_fails_in_a_confined_child(monkeypatch):
    """Does scrub_log still work where the working folder is gone and no temp file may be created (the
    sandboxed compile child), without creating anything itself?"""
    def refuse(*args):
        raise OSError("not here")
    monkeypatch.setattr(os, "getcwd", refuse)
    monkeypatch.setattr(tempfile, "gettempdir", refuse)
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    assert scrub_log("/tmp/grader-2/bob/kernel.cu(1): error") == "kernel.cu(1): error"


def test_logs_are_scrubbed_in_linear_time():
    """Does scrubbing stay fast on 1 MB of slashes or path fragments?"""
    for text in ("/" * MB, "/a" * (MB // 2) + " ", "/a /" * (MB // 4), "-I/x/" * (MB // 5)):
        fast(lambda: scrub_log(text, cap=10 * MB))


def test_a_real_nvrtc_log_shows_no_absolute_path(tmp_path, monkeypatch):
    """Does the log of a failed NVRTC compile (a missing header: it lists the include folders) keep no
    absolute path once scrubbed?"""
    import course
    monkeypatch.chdir(tmp_path)
    try:
        course.compile_for_arch("#include <no_such_header_anywhere.h>\n" + KERNEL, "sm_80", use_cache=False)
    except course.CompileError as exc:
        if "could not be loaded" in str(exc):
            pytest.skip("NVRTC is not installed here")
        raw = str(exc)
    else:
        pytest.fail("the missing header compiled")
    out = scrub_log(raw)
    assert "no_such_header_anywhere.h" in out
    assert not re.search(r"(?<![\w.~<>-])/[^\s/]+/", out), out


# --- defence in depth ----------------------------------------------------------------------------------------

def test_the_reference_include_is_refused_before_nvrtc_sees_it(monkeypatch):
    """Would NVRTC alone compile a source including solutions/01_first_kernel/saxpy.cu into the reference
    kernel, and does the grader's order (check_source, then compile_for_arch) refuse it before compiling?"""
    import course
    source = (CORPUS / "include_solution.cu").read_text()
    monkeypatch.chdir(CORPUS.parents[2])  # tests/autograder: "../../solutions/..." is the real reference
    try:
        program = course.compile_for_arch(source, "sm_80", name="attack.cu", use_cache=False)
    except course.CompileError as exc:
        if "could not be loaded" in str(exc):
            pytest.skip("NVRTC is not installed here")
        raise
    assert ".entry saxpy" in program.ptx  # the attack is real without the check

    compiled = []
    monkeypatch.setattr(course, "compile_for_arch", lambda *a, **k: compiled.append(a))

    def grader_compile(src):
        return check_source(src) or course.compile_for_arch(src, "sm_80")
    assert OUTSIDE in grader_compile(source) and compiled == []


def test_the_module_needs_only_the_standard_library():
    """Does autograder/source_check.py import only the standard library and the course's public lexer and
    include folders (course.source, course.include_dirs: no CuPy), and list its public names?"""
    tree = ast.parse(Path(source_check.__file__).read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    froms = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names <= set(sys.stdlib_module_names)
    assert {m for m in froms if m.split(".")[0] not in sys.stdlib_module_names} <= {
        "course.source", "course"}
    assert set(source_check.__all__) == {"MAX_SOURCE_BYTES", "ALLOWED_HEADERS", "ALLOWED_FOLDERS", "check_source",
                                         "header_allowed", "strip_comments", "scrub_log"}
