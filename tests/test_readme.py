"""The README's set-up section is the truth that CI and students run."""
from __future__ import annotations

import os
import re

import pytest

from repo_helpers import REPO, chapter_notebooks, load_tool

LAB = "python3 tools/bootstrap.py lab"
TEST = "python3 tools/bootstrap.py test"


def readme() -> str:
    return (REPO / "README.md").read_text(encoding="utf-8")


def section(text: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\s*$(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert m, f"README has no '## {title}' section"
    return m.group(1)


def fenced_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)]


def test_setup_has_exactly_two_commands():
    """Does 'Set up' show exactly two fenced commands, the lab first and then the tests?"""
    blocks = fenced_blocks(section(readme(), "Set up"))
    assert blocks == [LAB, TEST], f"expected [{LAB!r}, {TEST!r}], found {blocks}"


def test_ci_runs_the_readme_test_command():
    """Does .ci/run run exactly the README's test command, from the repository root, with CI=true?"""
    path = REPO / ".ci" / "run"
    assert os.access(path, os.X_OK), ".ci/run is not executable"
    lines = [ln.strip() for ln in path.read_text().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert lines[-1] == TEST, f".ci/run ends with {lines[-1]!r}, the README says {TEST!r}"
    assert "export CI=true" in lines
    assert any(re.fullmatch(r'cd "\$\(dirname "\$0"\)/\.\."', ln) for ln in lines), \
        ".ci/run should cd to the repository root"


def test_readme_commands_are_bootstrap_commands():
    """Are the README's sub-commands exactly the ones tools/bootstrap.py accepts?"""
    bootstrap = load_tool("bootstrap")
    used = {cmd.split()[-1] for cmd in fenced_blocks(section(readme(), "Set up"))}
    assert used == set(bootstrap.COMMANDS)


def test_gpu_tier_command_documented():
    """Does the README say how to run the GPU tier?"""
    assert f"{TEST} -m gpu" in readme()


@pytest.mark.parametrize("path", chapter_notebooks(), ids=lambda p: p.stem)
def test_chapter_listed(path):
    """Is every chapter notebook named in the README's chapter list?"""
    assert f"chapters/{path.name}" in section(readme(), "Chapters"), \
        f"add chapters/{path.name} to the README's chapter table"
