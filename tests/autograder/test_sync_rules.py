"""The notebook rules of autograder/sync.py, each broken on purpose in a copy of every exercise notebook
under exercises/source: is exactly that mistake reported, for the right exercise and cell, with a message
that says what is expected and what to do?"""
from __future__ import annotations

import json
import re

import pytest

from autograder import loader, sync
from autograder.spec import CallExercise

SOURCE = loader.ROOT / "exercises" / "source"
CHAPTERS = sorted(p.stem for p in SOURCE.glob("*/*.ipynb") if p.parent.name == p.stem and p.stem in loader.chapters())


def _text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _index(nb, *, tag=None, grade_id=None) -> int:
    [i] = [i for i, c in enumerate(nb["cells"])
           if (tag is not None and tag in (c.get("metadata", {}).get("tags") or []))
           or (grade_id is not None and c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id)]
    return i


def _solution(nb, ch, ex) -> int:
    return _index(nb, tag=f"{'call' if isinstance(ex, CallExercise) else 'kernel'}:{ex.name}")


def _test(nb, ch, ex) -> int:
    return _index(nb, grade_id=f"{ex.name}_test")


# Each rule: plant(notebook JSON, chapter, exercise) -> (the cell the problem names, or None for the notebook;
# the exercise it names; phrases its message must hold)

def first_cell(nb, ch, ex):
    nb["cells"][0]["source"] = "%load_ext course\n"  # the Colab set-up cell replaced by its last line
    return 0, "", ["first cell should be the set-up cell", "tools/add_colab_cell.py"]


def solution_metadata(nb, ch, ex):
    i = _solution(nb, ch, ex)
    nb["cells"][i]["metadata"]["nbgrader"]["solution"] = False  # nbgrader would not strip the solution
    return i, ex.name, ["solution cell's nbgrader metadata should be", "'solution': True", "'solution': False"]


def preview_cell(nb, ch, ex):
    call = f'autograder.preview("{ch}", "{ex.name}")'
    touched = [c for c in nb["cells"] if c.get("cell_type") == "code" and call in _text(c)]
    assert touched, f"{ch}: no cell calls {call} to begin with"
    for c in touched:
        c["source"] = _text(c).replace(call, "print('no preview')")
    return None, ex.name, [f"no cell calls `{call}`", "cannot see their grade before submitting"]


def points_last(nb, ch, ex):
    i = _test(nb, ch, ex)
    nb["cells"][i]["source"] = _text(nb["cells"][i]) + "\nprint('graded')"
    return i, ex.name, [f'last expression should be `autograder.nbgrader_points("{ch}", "{ex.name}")`',
                        "its value is the points", "print('graded')"]


def hidden_markers(nb, ch, ex):
    i = _test(nb, ch, ex)
    text = _text(nb["cells"][i])
    assert "### BEGIN HIDDEN TESTS" in text and "### END HIDDEN TESTS" in text
    nb["cells"][i]["source"] = re.sub(r"[^\n]*### (BEGIN|END) HIDDEN TESTS[^\n]*\n?", "", text)
    return i, ex.name, ["should stand between ### BEGIN HIDDEN TESTS and ### END HIDDEN TESTS",
                        "students do not see it"]


def locked_grade_cell(nb, ch, ex):
    i = _test(nb, ch, ex)
    nb["cells"][i]["metadata"]["nbgrader"]["locked"] = False  # a student could edit the hidden test away
    return i, ex.name, ["hidden test cell should be graded and locked", "locked=False"]


RULES = [first_cell, solution_metadata, preview_cell, points_last, hidden_markers, locked_grade_cell]


@pytest.mark.parametrize("chapter", CHAPTERS)
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_a_planted_notebook_mistake_is_reported(rule, chapter, tmp_path, monkeypatch):
    copy = tmp_path / f"{chapter}.ipynb"
    copy.write_bytes(sync.notebook_path(chapter).read_bytes())
    monkeypatch.setattr(sync, "notebook_path", lambda ch: copy)
    before = sync.notebook_problems(chapter)  # whatever the notebook has now is not what this test plants
    ex = sync.live_exercises(chapter)[0]
    nb = json.loads(copy.read_text(encoding="utf-8"))
    cell, exercise, phrases = rule(nb, chapter, ex)
    copy.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    new = [p for p in sync.notebook_problems(chapter) if p not in before]
    assert len(new) == 1, f"{rule.__name__} in {chapter}: expected one new problem, got {[str(p) for p in new]}"
    [p] = new
    assert p.exercise == exercise
    assert p.where == (f"{copy} cell {cell}" if cell is not None else str(copy))
    for phrase in phrases:
        assert phrase in p.message, f"{phrase!r} not in {p.message!r}"
