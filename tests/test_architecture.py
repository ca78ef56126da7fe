"""The dependency rules of docs/ARCHITECTURE.md, enforced: import-linter's contracts (pyproject.toml), what
notebooks may import, nothing importing tests/, and the size limits of modules and of the lessons layer."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from repo_helpers import REPO, chapter_notebooks, exercise_notebooks, read_json_notebook, rel

importlinter = pytest.importorskip("importlinter", reason="import-linter is in the test extra")

PACKAGES = ("course", "drivers", "autograder", "benchmarks")
MAX_MODULE_LINES = 600
# per chapter, on average: a chapter's visualizers and models, not a second library
LESSON_LINES_PER_CHAPTER = 350


def _lint(root: Path) -> tuple[int, str]:
    """import-linter on the packages under ``root`` with root's pyproject.toml: (exit code, report). A child
    process, so that the packages it analyses are the ones under ``root`` and no graph is reused."""
    env = dict(os.environ, PYTHONPATH=str(root))
    p = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                        "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True))"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout + p.stderr


def test_import_contracts_hold():
    """Do all of pyproject.toml's import-linter contracts hold on this checkout?"""
    code, report = _lint(REPO)
    assert code == 0, "an import rule of docs/ARCHITECTURE.md is broken:\n" + report[report.find("Broken"):]


@pytest.mark.parametrize("planted,contract", [
    (("course/_table.py", "import autograder  # planted\n"), "Layers"),
    (("drivers/__init__.py", "import autograder  # planted\n"), "Layers"),
    (("autograder/report.py", "from course import _launch  # planted\n"), "public API only"),
    (("autograder/device.py", "import nbgrader  # planted\n"), "never import nbgrader"),
    (("benchmarks/_suite.py", "from autograder import runner  # planted\n"), "grader's public API"),
    (("course/lessons/ch02.py", "from . import ch01  # planted\n"), "do not import each other"),
    (("autograder/spec.py", "from . import loader  # planted\n"), "cycles"),
])
def test_contracts_catch_a_planted_import(tmp_path, planted, contract):
    """Does each contract fail when the import it forbids is planted in a copy of the packages?"""
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__", "results"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    path, line = planted
    target = tmp_path / path
    text = target.read_text()
    head = text.index("\n", text.index("from __future__")) + 1 if "from __future__" in text else 0
    target.write_text(text[:head] + line + text[head:])
    code, report = _lint(tmp_path)
    assert code != 0, f"planting {line.strip()!r} in {path} broke no contract"
    broken = report[report.find("Broken contracts"):]
    assert contract in broken, f"expected the {contract!r} contract to break:\n{broken}"


# --- notebooks -------------------------------------------------------------------------------------

def _imports(source: str) -> list[str]:
    """Top-level module names a code cell imports (magics and shell lines left out)."""
    lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.append(node.module)
    return out


def _code_cells(path: Path):
    for cell in read_json_notebook(path)["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and not src.startswith(("%%cuda", "%%cublas")):
            yield src


_PROJECT = {"course", "autograder", "drivers", "benchmarks", "tests", "solutions", "chapters", "repo_helpers",
            "conftest"}


def _bad_imports(path: Path, allowed) -> list[str]:
    bad = []
    for src in _code_cells(path):
        for name in _imports(src):
            top = name.split(".")[0]
            private = any(part.startswith("_") for part in name.split(".")[1:])
            if (top in _PROJECT and not allowed(name)) or (top == "course" and private):
                bad.append(name)
    return bad


@pytest.mark.parametrize("path", chapter_notebooks(), ids=rel)
def test_lesson_notebooks_import_only_course(path):
    """Does a lesson notebook import only the course library's public modules (no grader, no tests)?"""
    bad = _bad_imports(path, lambda n: n.split(".")[0] == "course")
    assert not bad, f"{rel(path)} imports {bad}: lesson notebooks use `course` and its public modules only"


@pytest.mark.parametrize("path", exercise_notebooks(), ids=rel)
def test_exercise_notebooks_import_course_and_the_preview_api(path):
    """Does an exercise notebook import only `course` and the grader's top-level preview API?"""
    bad = _bad_imports(path, lambda n: n.split(".")[0] == "course" or n == "autograder")
    assert not bad, (f"{rel(path)} imports {bad}: exercise notebooks use `course` and `import autograder` "
                     "(preview, nbgrader_points, get_exercise, launch_from_source) only")


# --- nothing imports tests/; sizes ---------------------------------------------------------------

def _python_files():
    for pkg in PACKAGES + ("tools", "tests", "solutions"):
        for p in sorted((REPO / pkg).rglob("*.py")):
            if "node_modules" not in p.parts and "__pycache__" not in p.parts:
                yield p


def test_nothing_outside_tests_imports_tests():
    """Do the packages, tools and solutions stay free of imports from tests/ (tests import them, not back)?"""
    pattern = re.compile(r"^\s*(from|import)\s+(tests|repo_helpers|conftest|fake_harness|ag_helpers)\b", re.M)
    bad = [rel(p) for p in _python_files() if "tests" not in p.relative_to(REPO).parts[:1]
           and pattern.search(p.read_text(encoding="utf-8"))]
    assert not bad, f"these import from tests/: {bad}"


def test_no_module_over_600_lines():
    """Is every Python module at most 600 lines (split by job when one grows past it)?"""
    long = {rel(p): n for p in _python_files() if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_lessons_layer_stays_thin():
    """Is course/lessons/ at most 350 lines per chapter on average: chapter-specific visualizers and models
    only (generic drawing and timing code belongs in course/)?"""
    chapters = len(list((REPO / "chapters").glob("[0-9][0-9]_*.ipynb")))
    limit = LESSON_LINES_PER_CHAPTER * chapters
    total = sum(p.read_text(encoding="utf-8").count("\n") for p in (REPO / "course" / "lessons").glob("*.py"))
    assert total < limit, (f"course/lessons/ has {total} lines for {chapters} chapters; the limit is {limit} "
                           f"({LESSON_LINES_PER_CHAPTER} a chapter): move generic code into course/")


def test_lesson_modules_hold_no_copied_kernels():
    """Does no lesson module keep a copy of a notebook's kernel (the notebook cell is its one home)?"""
    cells = {}
    for nb in chapter_notebooks():
        for src in (c for c in _all_cuda_cells(nb)):
            for name in re.findall(r"__global__[^;{]*?\bvoid\s+(\w+)\s*\(", src):
                cells[name] = nb.stem
    copies = []
    for p in sorted((REPO / "course" / "lessons").glob("*.py")):
        text = p.read_text(encoding="utf-8")
        for name in re.findall(r"__global__[^;{]*?\bvoid\s+(\w+)\s*\(", text):
            if name in cells:
                copies.append(f"{rel(p)}: {name} (a kernel of chapters/{cells[name]}.ipynb)")
    assert not copies, "lesson modules copy notebook kernels; read them with course.lesson_cell:\n" + "\n".join(copies)


def _all_cuda_cells(path: Path):
    for cell in read_json_notebook(path)["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "code" and src.startswith("%%cuda"):
            yield src
