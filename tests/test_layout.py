"""One `NN_topic` stem per chapter, the same in chapters/, exercises/, solutions/ and the grader specs."""
from __future__ import annotations

import re
from pathlib import Path

from repo_helpers import REPO, fail_on

STEM = re.compile(r"^\d\d_[a-z0-9_]+$")

# Chapters that may have no exercise (and so no solutions/ folder and no grader spec), with why.
NO_EXERCISE: dict[str, str] = {
    # "11_profiling": "measurement discipline only; nothing to grade",
}


def folders(path: Path) -> set[str]:
    return {p.name for p in path.glob("*") if p.is_dir() and not p.name.startswith((".", "_"))}


def stems(root: Path) -> dict[str, set[str]]:
    return {
        "chapters/*.ipynb": {p.stem for p in (root / "chapters").glob("*.ipynb")},
        "exercises/source/*/": folders(root / "exercises" / "source"),
        "solutions/*/": folders(root / "solutions"),
        "autograder/specs/*.py": {p.stem for p in (root / "autograder" / "specs").glob("*.py")
                                  if not p.name.startswith("_")},
    }


def bad_names(root: Path) -> list[str]:
    return [f"{where}: {bad} do not match {STEM.pattern}" for where, found in stems(root).items()
            if (bad := sorted(s for s in found if not STEM.match(s)))]


def companions_disagree(root: Path) -> list[str]:
    found = stems(root)
    exercises = found["exercises/source/*/"]
    problems = []
    for where in ("solutions/*/", "autograder/specs/*.py"):
        if exercises - found[where]:
            problems.append(f"exercises without {where}: {sorted(exercises - found[where])}")
        if found[where] - exercises:
            problems.append(f"{where} without an exercise: {sorted(found[where] - exercises)}")
    return problems


def orphans(root: Path) -> list[str]:
    found = stems(root)
    chapters = found.pop("chapters/*.ipynb")
    return [f"{where} {sorted(s - chapters)} have no chapters/NN_topic.ipynb"
            for where, s in found.items() if s - chapters]


def chapters_without_exercise(root: Path, allowed: dict[str, str]) -> list[str]:
    found = stems(root)
    missing = found["chapters/*.ipynb"] - found["exercises/source/*/"]
    unlisted = sorted(missing - set(allowed))
    return [f"chapters without exercises/source/NN_topic/ {unlisted}: add the exercise, or list the "
            f"chapter in NO_EXERCISE (tests/test_layout.py) with a reason"] if unlisted else []


def test_stems_are_nn_topic():
    """Is every chapter, exercise, solution and spec named NN_topic (two digits, lower_snake)?"""
    fail_on(bad_names(REPO))


def test_exercises_solutions_and_specs_agree():
    """Does every exercise have a solutions/ folder and a grader spec, and nothing else have one?"""
    fail_on(companions_disagree(REPO))


def test_every_exercise_has_a_chapter():
    """Is every exercise, solution and spec the companion of a chapter notebook?"""
    fail_on(orphans(REPO))


def test_chapters_without_exercise_are_listed():
    """Does a chapter lack an exercise only when NO_EXERCISE says so, with a reason?"""
    fail_on(chapters_without_exercise(REPO, NO_EXERCISE))


def test_no_exercise_list_is_current():
    """Does every NO_EXERCISE entry name a real chapter that still lacks an exercise, with a reason?"""
    found = stems(REPO)
    stale = sorted(s for s in NO_EXERCISE
                   if s not in found["chapters/*.ipynb"] or s in found["exercises/source/*/"])
    unexplained = sorted(s for s, why in NO_EXERCISE.items() if not why.strip())
    fail_on([stale and f"NO_EXERCISE entries to remove: {stale}",
             unexplained and f"NO_EXERCISE entries without a reason: {unexplained}"])


def test_exercise_notebook_named_after_its_folder():
    """Does exercises/source/NN_topic/ hold NN_topic.ipynb, the name nbgrader assigns by?"""
    missing = sorted(s for s in stems(REPO)["exercises/source/*/"]
                     if not (REPO / "exercises" / "source" / s / f"{s}.ipynb").is_file())
    fail_on([missing and f"exercises/source/NN_topic/NN_topic.ipynb missing for: {missing}"])


def test_solution_folders_hold_kernels():
    """Does every solutions/NN_topic/ folder hold at least one kernel: a .cu file, or a Triton kernel (.py with
    @triton.jit) for a chapter whose exercises are Triton's?"""
    def kernels(s):
        folder = REPO / "solutions" / s
        return any(folder.glob("*.cu")) or any("@triton.jit" in p.read_text() for p in folder.glob("*.py"))
    empty = sorted(s for s in stems(REPO)["solutions/*/"] if not kernels(s))
    fail_on([empty and f"solutions/ folders without a kernel (.cu, or .py with @triton.jit): {empty}"])


def test_checks_catch_a_broken_tree(tmp_path):
    """Do the checks above see a bad name, a lonely solution, an orphan spec and an unlisted chapter?"""
    for path in ("chapters/01_a.ipynb", "chapters/02_b.ipynb", "chapters/3_Bad.ipynb",
                 "exercises/source/01_a/01_a.ipynb", "solutions/01_a/k.cu", "solutions/09_x/k.cu",
                 "autograder/specs/01_a.py", "autograder/specs/_base.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    assert bad_names(tmp_path) == [f"chapters/*.ipynb: ['3_Bad'] do not match {STEM.pattern}"]
    assert companions_disagree(tmp_path) == ["solutions/*/ without an exercise: ['09_x']"]
    assert orphans(tmp_path) == ["solutions/*/ ['09_x'] have no chapters/NN_topic.ipynb"]
    assert "['02_b', '3_Bad']" in chapters_without_exercise(tmp_path, {})[0]
    assert chapters_without_exercise(tmp_path, {"02_b": "why", "3_Bad": "why"}) == []

