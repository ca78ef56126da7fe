"""Every kernel in the course compiles with NVRTC for sm_75, sm_80 and sm_90, with or without a GPU.

Kernels come from solutions/**/*.cu and from every `%%cuda` cell of every chapter and exercise
notebook. A kernel that needs a newer GPU says so: a .cu file on its first line (`// requires: sm_80`),
a cell with `%%cuda --requires sm_80` (or `--arch`); lower archs are then skipped with that reason. An
arch-specific target (`sm_90a`: a cell's `--arch`, a file's `// requires: sm_90a`, or the `arch` of the exercise
a solution belongs to) is compiled for exactly that arch, at its compute capability only. A cell that includes a
header library (`--headers cute`: CUTLASS's CuTe, the optional `cute` extra the test command installs) is skipped
with the reason where that library is not installed.
"""
from __future__ import annotations

import os
import re
import shutil
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from repo_helpers import (REPO, all_notebooks, exercise_notebooks, fail_on, import_course,
                      read_json_notebook, rel)

ARCHS = ("sm_75", "sm_80", "sm_90")
declared_arch = import_course().declared_arch   # the `// requires: sm_80` first line


@dataclass(frozen=True)
class Kernel:
    where: str          # test id: a file, or notebook:cellN
    source: str
    requires: str | None = None
    arch: str | None = None
    options: tuple[str, ...] = ()
    prelude: str = ""   # the cells it names with --include, compiled ahead of it
    headers: tuple[str, ...] = ()   # --headers: header libraries outside the CUDA wheels (cute)


def cc(arch: str) -> int:
    return int(re.search(r"\d+", arch).group())


def parse_cuda_line(line: str) -> dict:
    """The flags of a `%%cuda ...` magic line that matter for compiling."""
    words = shlex.split(line)[1:]
    flags: dict = {}
    for i, word in enumerate(words):
        key, _, value = word.partition("=")
        if key in ("--requires", "--arch", "--options", "--include", "--name", "--headers"):
            flags[key[2:]] = value or (words[i + 1] if i + 1 < len(words) else "")
    return flags


def exercise_archs() -> dict:
    """solutions/<chapter>/<file> -> the arch-specific target its exercise pins (`Exercise.arch`, e.g. sm_90a):
    the grader compiles that reference for exactly this arch, so this test does too."""
    from autograder.loader import chapters, load_chapter
    out = {}
    for ch in chapters():
        try:
            exercises = load_chapter(ch)
        except Exception:   # a spec that does not load fails its own tests (check-specs)
            continue
        out.update({f"solutions/{ch}/{ex.source_file}": ex.arch for ex in exercises if getattr(ex, "arch", None)})
    return out


def solution_kernels() -> list[Kernel]:
    found, archs = [], exercise_archs()
    for path in sorted((REPO / "solutions").rglob("*.cu")):
        text = path.read_text(encoding="utf-8")
        requires = declared_arch(text)
        found.append(Kernel(rel(path), text, requires=requires, arch=archs.get(rel(path))))
    return found


def notebook_kernels(nb: dict, where: str) -> list[Kernel]:
    found, named = [], {}
    for i, cell in enumerate(nb["cells"]):
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] != "code" or not src.startswith("%%cuda"):
            continue
        line, _, body = src.partition("\n")
        flags = parse_cuda_line(line)
        if flags.get("name"):
            named[flags["name"]] = body
        prelude = "\n".join(named[n] for n in flags.get("include", "").split(",") if n)
        found.append(Kernel(f"{where}:cell{i}", body, requires=flags.get("requires") or declared_arch(body),
                            arch=flags.get("arch"),
                            options=tuple(shlex.split(flags.get("options", ""))), prelude=prelude,
                            headers=tuple(n for n in flags.get("headers", "").split(",") if n)))
    return found


def cell_kernels() -> list[Kernel]:
    return [k for path in all_notebooks()
            for k in notebook_kernels(read_json_notebook(path), rel(path))]


CASES = [(k, arch) for k in solution_kernels() + cell_kernels() for arch in ARCHS]


@pytest.mark.parametrize("kernel,arch", CASES, ids=[f"{k.where}-{a}" for k, a in CASES])
def test_compiles(kernel: Kernel, arch: str):
    """Does the kernel compile with NVRTC for this arch, or does it declare that it needs a newer one?"""
    target = build_target(kernel.requires, kernel.arch, arch)
    program = compile_kernel(kernel, target)
    assert program.cubin, f"{kernel.where}: NVRTC returned no cubin for {target}"


def build_target(requires, pinned, arch: str) -> str:
    """What a kernel needing ``requires`` and pinned to ``pinned`` compiles for when the test builds ``arch``
    (`course.target_for`: an arch-specific target such as sm_90a for exactly its own GPU); skips where
    ``arch``'s GPUs cannot run it."""
    course = import_course()
    target = arch
    for need in (requires, pinned):
        got = course.target_for(arch, need)
        if got is None:
            pytest.skip(f"requires {need}")
        target = got if got != arch else target
    return target


def compile_kernel(kernel: Kernel, arch: str):
    course = import_course()
    name = kernel.where.rsplit("/", 1)[-1].replace(":", "_")
    if "cute" in kernel.headers and not course.cute.available()[0]:
        pytest.skip("needs CuTe's headers: the optional `cute` extra (nvidia-cutlass) or CUTLASS_PATH")
    return course.compile_for_arch(
        kernel.source, arch, options=(*course.library_options(kernel.headers), *kernel.options),
        prelude=kernel.prelude, name=name if name.endswith(".cu") else f"{name}.cu")


@pytest.mark.slow
@pytest.mark.parametrize("path", exercise_notebooks(), ids=rel)
def test_student_version_compiles(path, tmp_path):
    """Does `nbgrader generate_assignment` succeed, and does every %%cuda cell it hands out compile?

    nbgrader replaces a solution region with the notebook language's stub (Python by default), so a
    `%%cuda` cell needs a stub that is C++; an untouched stub should compile and score zero.
    """
    import_course()
    stem = path.parent.name
    course_dir = tmp_path / "exercises"
    shutil.copytree(REPO / "exercises", course_dir, ignore=shutil.ignore_patterns(
        "release", "submitted", "autograded", "feedback", "gradebook.db", ".ipynb_checkpoints"))
    # nbgrader runs the `alembic` script by name, so this Python's scripts folder goes on PATH.
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                                  os.environ.get("PATH", "")])}
    run = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", stem, "--force"],
                         cwd=course_dir, env=env, capture_output=True, text=True, timeout=300)
    released = course_dir / "release" / stem / path.name
    assert run.returncode == 0 and released.is_file(), \
        f"nbgrader generate_assignment {stem} failed:\n{run.stdout[-2000:]}{run.stderr[-3000:]}"
    problems = []
    for kernel in notebook_kernels(read_json_notebook(released), f"release/{stem}/{path.name}"):
        need = kernel.arch or kernel.requires
        try:
            compile_kernel(kernel, need if need and cc(need) > 80 else "sm_80")
        except Exception as exc:  # CompileError's text numbers the source and quotes the log
            problems.append(f"{kernel.where}: {exc}")
    fail_on(problems, "student versions that do not compile:")


def test_requires_flags_parse():
    """Are `%%cuda` flags read the same in both spellings, --flag value and --flag=value?"""
    assert parse_cuda_line('%%cuda --requires sm_80 --name k --options "-DT=4 -O3"') == \
        {"requires": "sm_80", "name": "k", "options": "-DT=4 -O3"}
    assert parse_cuda_line("%%cuda --name s --include parts,more") == {"name": "s", "include": "parts,more"}
    assert parse_cuda_line("%%cuda --arch=sm_90a --no-run") == {"arch": "sm_90a"}
    assert parse_cuda_line("%%cuda --name g --headers cute") == {"name": "g", "headers": "cute"}
    assert declared_arch("// requires: sm_80\nint x;") == "sm_80"
    assert declared_arch("// needs sm_80") is None and declared_arch("int x;\n// requires: sm_80") is None


def test_ci_installs_the_compile_only_extras():
    """Under CI (the README's test command on a clean clone) Triton and CuTe's headers are installed: both compile
    without a GPU, so a failed optional install would otherwise turn the CPU tier's Triton and CuTe checks into
    silent skips."""
    import importlib.util
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("only under CI: elsewhere these extras are optional")
    ok, why = import_course().cute.available()
    assert ok, why
    assert importlib.util.find_spec("triton") is not None, "Triton did not install: see .venv/course-install.log"
