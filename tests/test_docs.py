"""The documentation stays inside the repository and names files that exist; what the course's commands
write (grades, class-grading results and reports) stays out of git."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from repo_helpers import REPO, fail_on

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "autograder" / "SPEC_FORMAT.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_docs_name_only_files_in_the_repository(doc):
    """Does every Markdown link and every backquoted *.md file a page names exist in this checkout (issue
    #23: docs/ARCHITECTURE.md pointed to a design file outside the repository)?"""
    text = doc.read_text(encoding="utf-8")
    problems = []
    targets = [t for t in re.findall(r"\]\(([^)\s#]+)", text) if not re.match(r"[a-z]+:", t)]
    targets += re.findall(r"`([\w./-]+\.md)`", text)
    for target in targets:
        where = [(doc.parent / target).resolve(), (REPO / target).resolve()]
        if not any(p.is_relative_to(REPO) and p.exists() for p in where):
            problems.append(f"{doc.relative_to(REPO)}: {target} is not a file of this repository")
    fail_on(problems)


@pytest.mark.parametrize("path", ["grades.csv", "exercises/grades.csv", "exercises/grading/results.sqlite",
                                  "grading-report/index.html", "exercises/gradebook.db",
                                  "exercises/submitted/erin/01_first_kernel/01_first_kernel.ipynb"])
def test_generated_grading_files_are_ignored(path):
    """Are nbgrader's exported grades and the class grading's store and report kept out of git?"""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    r = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
    assert r.returncode == 0, f"{path} is not ignored by .gitignore"
