"""`python -m autograder sync`: solutions/*.cu and the specs' points and thresholds written into the exercise
notebooks; ``--check`` reports drift without writing. Run on copies (the loader's paths point at them)."""
from __future__ import annotations

import shutil

import pytest
from test_spec_checks import CH, NOTEBOOK, SPEC, copy_chapter, run_cli

from ag_helpers import ROOT
from autograder import loader, speclock
from autograder.loader import chapters, load_chapter
from autograder.sync import notebook_problems, solution_cell_source, speed_phrase


@pytest.fixture
def chapter_copy(tmp_path, monkeypatch):
    yield from copy_chapter(tmp_path, monkeypatch)


def sync(capsys, *args) -> tuple:
    return run_cli(capsys, "sync", *args)


def kernel_cell_text(copy, name: str) -> str:
    return "".join(copy.cell(copy.notebook(), tag=f"kernel:{name}")["source"])


def test_sync_restores_a_drifted_solution_cell_byte_for_byte(chapter_copy, capsys):
    """A trailing newline typed into one cell and an edit to another: sync puts back exactly the file's text,
    and the notebook file is byte for byte what it was."""
    original = (chapter_copy.root / NOTEBOOK).read_bytes()

    def drift(nb):
        cell = chapter_copy.cell(nb, tag="kernel:saxpy")
        cell["source"][-1] += "\n"
        other = chapter_copy.cell(nb, tag="kernel:rgb_to_gray")
        other["source"][3] = "// edited in the notebook\n"
    chapter_copy.edit_notebook(drift)
    found = {p.exercise: p for p in notebook_problems(CH)}
    assert set(found) == {"saxpy", "rgb_to_gray"} and all(p.fixable for p in found.values())
    assert "differ only at the end: the cell ends with 1 whitespace character(s)" in found["saxpy"].message
    assert "the cell '// edited in the notebook'" in found["rgb_to_gray"].message
    code, text = sync(capsys, CH)
    assert code == 0, text
    assert text.count("fixed:") == 2 and "wrote 01_first_kernel.ipynb" in text
    assert (chapter_copy.root / NOTEBOOK).read_bytes() == original
    assert notebook_problems(CH) == []


def test_sync_writes_a_changed_solution_file_into_its_cell(chapter_copy, capsys):
    chapter_copy.plant(f"solutions/{CH}/saxpy.cu", "// END SOLUTION", "// faster now\n    // END SOLUTION")
    code, _ = sync(capsys)
    assert code == 0
    (ex,) = [e for e in load_chapter(CH) if e.name == "saxpy"]
    assert kernel_cell_text(chapter_copy, "saxpy") == solution_cell_source(ex)
    assert "    // faster now\n    // END SOLUTION\n}" in kernel_cell_text(chapter_copy, "saxpy")
    assert kernel_cell_text(chapter_copy, "saxpy").endswith("}")  # a cell has no trailing newline


def test_sync_writes_changed_thresholds_and_points(chapter_copy, capsys):
    """The spec's threshold, tier and points change: the heading, the speed phrase and the test cell follow."""
    chapter_copy.plant(SPEC, "speed_tiers=((0.5, 0.5),)", "speed_tiers=((0.55, 0.5), (0.3, 0.25))")
    chapter_copy.plant(SPEC, "points=Points(correctness=6, speed=4),\n        speed_threshold=0.8,\n        speed_tiers",
                       "points=Points(correctness=7, speed=5),\n        speed_threshold=0.85,\n        speed_tiers")
    code, text = sync(capsys, CH)
    assert code == 0, text
    nb = chapter_copy.notebook()
    md = "".join(nb["cells"][8]["source"])
    assert md.startswith("## Exercise 2: RGB to gray (12 points: 7 for correctness, 5 for speed)\n")
    assert "full speed points at 0.85 x the reference's speed or better, half at 0.55 x, a quarter at 0.3 x." in md
    assert chapter_copy.cell(nb, grade_id="rgb_to_gray_test")["metadata"]["nbgrader"]["points"] == 12
    (gray,) = [e for e in load_chapter(CH) if e.name == "rgb_to_gray"]
    assert speed_phrase(gray) in md
    assert "0.8 x" not in md and "10 points" not in md
    saxpy_md = "".join(nb["cells"][3]["source"])
    assert "(10 points: 6 for correctness, 4 for speed)" in saxpy_md  # the other exercise is left alone
    assert sync(capsys, CH, "--check")[0] == 0


def test_check_reports_drift_and_writes_nothing(chapter_copy, capsys):
    chapter_copy.plant(SPEC, "speed_threshold=0.8,\n        floor_bytes=lambda s: 12",
                       "speed_threshold=0.7,\n        floor_bytes=lambda s: 12")
    chapter_copy.edit_notebook(lambda nb: chapter_copy.cell(nb, grade_id="saxpy_test")["metadata"]["nbgrader"]
                               .update(points=9))
    before = (chapter_copy.root / NOTEBOOK).read_bytes()
    code, text = sync(capsys, "--check")
    assert code == 1
    assert "2 difference(s)" in text and "worth 9 points" in text and "full speed points at 0.7 x" in text
    assert text.count("[sync writes this]") == 2
    assert (chapter_copy.root / NOTEBOOK).read_bytes() == before


def test_sync_names_what_it_cannot_write(chapter_copy, capsys):
    """A section whose speed phrase was rewritten by hand: sync cannot place the numbers, and says so."""
    def reword(nb):
        cell = nb["cells"][3]
        cell["source"] = [line.replace("full speed points at 0.8 x", "all the speed points at 0.8 x")
                          for line in cell["source"]]
    chapter_copy.edit_notebook(reword)
    code, text = sync(capsys)
    assert code == 1
    assert ("exercise 'saxpy': the exercise's section never states its speed thresholds as the sync can find them: "
            "put the phrase \"full speed points at 0.8 x the reference's speed or better\"") in text
    assert "quotes '0.8 x the reference'" not in text  # the number agrees with the spec; only the phrase is lost


def test_sync_changes_nothing_in_the_repository(tmp_path, monkeypatch, capsys):
    """Run for real on a copy of every chapter: each notebook comes back byte for byte, and --check agrees."""
    root = tmp_path / "repo"
    shutil.copytree(ROOT / "autograder" / "specs", root / "autograder" / "specs")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    shutil.copytree(ROOT / "exercises" / "source", root / "exercises" / "source")
    monkeypatch.setattr(loader, "ROOT", root)
    monkeypatch.setattr(loader, "SPECS_DIR", root / "autograder" / "specs")
    monkeypatch.setattr(loader, "SOLUTIONS_DIR", root / "solutions")
    monkeypatch.setattr(speclock, "LOCK_FILE", root / "autograder" / "specs.lock.json")
    notebooks = sorted((root / "exercises" / "source").glob("*/*.ipynb"))
    assert len(notebooks) == len(chapters()) > 1
    before = {p: p.read_bytes() for p in notebooks}
    code, text = sync(capsys)
    assert code == 0, text
    assert {p: p.read_bytes() for p in notebooks} == before, text
    assert text.count("in step with its spec") == len(notebooks)
    monkeypatch.undo()
    load_chapter.cache_clear()
    code, text = sync(capsys, "--check")  # and the repository itself, without writing
    assert code == 0, text
