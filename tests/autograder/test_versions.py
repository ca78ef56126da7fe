"""Spec versions and frozen specs (issue #23 item 6): a grading records the version of the spec it used, and a
frozen chapter is graded with its snapshot whatever happens to the live spec until it is frozen again.

Every test works on a copy of one chapter's spec and reference solutions in a temporary folder (the loader's
paths and the lock's are monkeypatched), so the repository's specs, snapshots and lock are never touched.
"""
import json
import shutil

import pytest

from autograder import cli, freezing, loader, speclock, versions
from autograder.extract import Submission
from autograder.report import ExerciseReport, Report, Status
from autograder.runner import grade_source, grade_submission
from autograder.spec import SpecError, reference_source

CH = loader.chapters()[0]
ADDED = "added_after_freezing"
# appended to the live spec: one more exercise, a copy of the first under a new name
ADD_EXERCISE = (f"\nimport dataclasses as _dc\nEXERCISES = list(EXERCISES) + "
                f"[_dc.replace(EXERCISES[0], name={ADDED!r})]\n")


@pytest.fixture
def specs(tmp_path, monkeypatch):
    """The chapter's live spec and solutions copied to tmp_path, with an empty frozen folder and no lock."""
    (tmp_path / "specs").mkdir()
    shutil.copy(loader.SPECS_DIR / f"{CH}.py", tmp_path / "specs" / f"{CH}.py")
    shutil.copytree(loader.SOLUTIONS_DIR / CH, tmp_path / "solutions" / CH)
    monkeypatch.setattr(loader, "SPECS_DIR", tmp_path / "specs")
    monkeypatch.setattr(loader, "SOLUTIONS_DIR", tmp_path / "solutions")
    monkeypatch.setattr(speclock, "FROZEN_DIR", tmp_path / "frozen")
    monkeypatch.setattr(speclock, "LOCK_FILE", tmp_path / "specs.lock.json")
    loader.load_chapter.cache_clear()
    yield tmp_path
    loader.load_chapter.cache_clear()


def live_spec(tmp_path):
    return tmp_path / "specs" / f"{CH}.py"


def names():
    return [e.name for e in loader.load_chapter(CH)]


def reload():
    loader.load_chapter.cache_clear()


def live_version(tmp_path):
    path = live_spec(tmp_path)
    return versions.version_of(path, loader.load_spec_file(path))


def test_version_changes_with_the_spec_or_a_reference_and_nothing_else(specs):
    """Does the version change when the spec file or a reference it names changes, and only then?"""
    v0 = versions.spec_version(CH)
    assert len(v0) == 16 and versions.spec_version(CH) == v0
    ex = loader.load_chapter(CH)[0]
    assert ex.solutions_dir == specs / "solutions" / CH  # the references are read from the copy
    (specs / "solutions" / CH / "not_named_by_the_spec.cu").write_text("__global__ void k() {}\n")
    assert versions.spec_version(CH) == v0, "a file the spec does not name changed the version"

    spec = live_spec(specs)
    text = spec.read_text()
    spec.write_text(text + "\n# a comment\n")
    assert versions.spec_version(CH) != v0
    spec.write_text(text)
    assert versions.spec_version(CH) == v0

    ref = specs / "solutions" / CH / ex.source_file
    ref_text = ref.read_text()
    ref.write_text(ref_text + "\n// edited\n")
    assert versions.spec_version(CH) != v0
    ref.write_text(ref_text)
    assert versions.spec_version(CH) == v0


def test_the_grader_version_is_part_of_the_spec_version(specs, monkeypatch):
    v0 = versions.spec_version(CH)
    monkeypatch.setattr(versions, "GRADER_VERSION", versions.GRADER_VERSION + ".1")
    assert versions.spec_version(CH) != v0


def test_a_frozen_chapter_is_graded_with_its_snapshot_after_the_live_spec_changes(specs):
    """Freeze, then add an exercise to the live spec: grading keeps the frozen list and version."""
    before, v0 = names(), versions.spec_version(CH)
    out = freezing.freeze([CH], term="fall-2026")
    assert v0 in out[0] and "fall-2026" in out[0]
    lock = json.loads((specs / "specs.lock.json").read_text())["chapters"]
    assert lock[CH]["version"] == v0 and lock[CH]["term"] == "fall-2026"
    snap = specs / "frozen" / CH / v0
    manifest = json.loads((snap / "manifest.json").read_text())
    assert [e["name"] for e in manifest["exercises"]] == before
    assert (snap / f"{CH}.py").read_bytes() == live_spec(specs).read_bytes()

    live_spec(specs).write_text(live_spec(specs).read_text() + ADD_EXERCISE)
    reload()
    assert ADDED in [e.name for e in loader.load_spec_file(live_spec(specs))]  # the edit took effect
    assert live_version(specs) != v0
    assert names() == before and versions.spec_version(CH) == v0
    assert loader.load_chapter(CH)[0].solutions_dir == snap / "solutions"
    with pytest.raises(SpecError, match=ADDED):
        loader.get_exercise(CH, ADDED)
    # every grading path: grade_source, and a whole submission (no 0 row for the exercise added later)
    rep = grade_source(CH, before[0], None)
    assert rep.status == Status.FAILED and rep.spec_version == v0
    sub = Submission(label="alice", path=f"alice/{CH}.ipynb", chapter=CH,
                     problems={before[0]: "its kernel cell could not be read"})
    rows = grade_submission(sub)
    assert [r.exercise for r in rows] == before and {r.spec_version for r in rows} == {v0}
    assert "could not be read" in rows[0].reason  # a row made without grading records the version too
    note = "\n".join(freezing.notes([CH]))
    assert "live spec changed" in note and ADDED in note and f"python -m autograder freeze {CH}" in note


def test_a_reference_edited_after_freezing_is_not_graded_with(specs):
    ex = loader.load_chapter(CH)[0]
    original = reference_source(ex)
    freezing.freeze([CH])
    (specs / "solutions" / CH / ex.source_file).write_text(original + "\n// edited after freezing\n")
    reload()
    assert reference_source(loader.get_exercise(CH, ex.name)) == original
    assert f"reference solution {ex.source_file} edited" in "\n".join(freezing.notes([CH]))


def test_freezing_again_adopts_the_live_spec_and_keeps_the_old_snapshot(specs):
    before, v0 = names(), versions.spec_version(CH)
    freezing.freeze([CH], term="fall-2026")
    live_spec(specs).write_text(live_spec(specs).read_text() + ADD_EXERCISE)
    v1 = live_version(specs)
    out = "\n".join(freezing.freeze([CH]))
    assert f"replaces version {v0}" in out and ADDED in out
    assert names() == before + [ADDED] and versions.spec_version(CH) == v1
    assert json.loads((specs / "specs.lock.json").read_text())["chapters"][CH]["term"] == "fall-2026"
    assert (specs / "frozen" / CH / v0 / "manifest.json").is_file()
    assert freezing.notes([CH], changes_only=True) == []
    assert "already frozen" in freezing.freeze([CH])[0]


def test_unfreeze_returns_to_the_live_spec_and_removes_an_empty_lock(specs):
    before = names()
    freezing.freeze([CH])
    live_spec(specs).write_text(live_spec(specs).read_text() + ADD_EXERCISE)
    reload()
    assert names() == before
    out = freezing.unfreeze([CH])
    assert "unfrozen" in out[0] and f"version {live_version(specs)}; later gradings record it" in out[0]
    assert not (specs / "specs.lock.json").exists()
    assert names() == before + [ADDED] and versions.spec_version(CH) == live_version(specs)
    assert "not frozen" in freezing.unfreeze([CH])[0]


def test_a_broken_live_spec_freezes_nothing_and_does_not_disturb_a_frozen_one(specs):
    good = live_spec(specs).read_text()
    live_spec(specs).write_text(good + "\nEXERCISES = 3\n")
    with pytest.raises(SpecError, match="EXERCISES"):
        freezing.freeze([CH])
    assert not (specs / "specs.lock.json").exists()
    live_spec(specs).write_text(good)
    freezing.freeze([CH])
    live_spec(specs).write_text(good + "\nEXERCISES = 3\n")
    reload()
    assert names() and "does not load" in "\n".join(freezing.notes([CH]))


def test_an_edited_snapshot_or_a_missing_one_is_reported(specs):
    v0 = versions.spec_version(CH)
    freezing.freeze([CH])
    copy = specs / "frozen" / CH / v0 / f"{CH}.py"
    copy.write_text(copy.read_text() + "\n# edited in the snapshot\n")
    reload()
    assert "changed after freezing" in "\n".join(freezing.notes([CH]))
    with pytest.raises(SpecError, match="edited after an earlier freeze"):
        freezing.freeze([CH])
    shutil.rmtree(specs / "frozen" / CH / v0)
    reload()
    with pytest.raises(SpecError, match=f"unfreeze {CH}"):
        loader.load_chapter(CH)


def test_a_grader_change_after_freezing_is_noted_but_not_taken_for_a_spec_change(specs, monkeypatch):
    freezing.freeze([CH])
    monkeypatch.setattr(versions, "GRADER_VERSION", versions.GRADER_VERSION + ".1")
    note = "\n".join(freezing.notes([CH], changes_only=True))
    assert "frozen with grader" in note and "live spec changed" not in note


def test_cli_freeze_check_specs_and_unfreeze(specs, capsys):
    assert cli.main(["freeze", CH, "--term", "spring"]) == 0
    assert "frozen at version" in capsys.readouterr().out
    assert cli.main(["check-specs", "--no-compile", CH]) == 0
    assert "the live spec is the same" in capsys.readouterr().out
    # an edit that check-specs has nothing against (an added exercise would also need notebook cells)
    live_spec(specs).write_text(live_spec(specs).read_text() + "\n# reworded after freezing\n")
    assert cli.main(["check-specs", "--no-compile", CH]) == 0
    out = capsys.readouterr().out
    assert "live spec changed" in out and f"{CH}.py edited" in out and f"python -m autograder freeze {CH}" in out
    first = loader.load_chapter(CH)[0].name
    sub = specs / "submitted" / "alice" / CH
    sub.mkdir(parents=True)
    (sub / f"{first}.cu").write_text("// nothing here yet\n")  # graded without a child: no kernel found
    assert cli.main(["grade", str(specs / "submitted"), "--chapter", CH, "--json", "-"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["exercises"][0]["spec_version"] == versions.spec_version(CH)
    assert "live spec changed" in captured.err and "grading still uses the frozen one" in captured.err
    assert cli.main(["unfreeze", CH]) == 0
    assert not (specs / "specs.lock.json").exists()
    assert cli.main(["freeze", "no_such_chapter"]) == 2
    assert "cannot freeze" in capsys.readouterr().err


def test_a_report_records_its_spec_version_in_the_json(fake_harness):
    """A full grading (children with the fake harness) records the live spec's version; JSON keeps it."""
    ex = loader.load_chapter(CH)[0]
    source = reference_source(ex) + "\n// FAKE: ok\n"
    rep = grade_source(CH, ex.name, source)
    assert rep.spec_version == versions.spec_version(CH) != ""
    data = json.loads(Report([rep]).to_json())
    assert data["exercises"][0]["spec_version"] == rep.spec_version
    assert Report.from_json(Report([rep]).to_json()).exercises[0].spec_version == rep.spec_version
    old = {k: v for k, v in rep.to_dict().items() if k != "spec_version"}  # a report from before versions
    assert ExerciseReport.from_dict(old).spec_version == ""


def test_the_frozen_folder_and_lock_are_readable_in_a_confined_grading_child():
    """Grading children load the spec before Landlock closes the file system, but stay able to read the
    package folder; the snapshot and the lock must lie inside it (sandbox.python_read_paths)."""
    from pathlib import Path

    from autograder import sandbox
    readable = [Path(p) for p in sandbox.python_read_paths(packages=True)]
    for path in (speclock.FROZEN_DIR, speclock.LOCK_FILE):
        assert any(path.is_relative_to(p) for p in readable), path


def test_an_installed_package_carries_the_snapshots_and_the_lock():
    import tomllib
    data = tomllib.loads((loader.ROOT / "pyproject.toml").read_text())
    shipped = data["tool"]["setuptools"]["package-data"]["autograder"]
    assert "frozen/**/*" in shipped and speclock.LOCK_FILE.name in shipped


def test_content_key_covers_what_the_feedback_says():
    """A stored result is shown to any submission with the same key (nbgrader autograde reads the batch's
    store): do the notebook's note (duplicate cells...) and the cell line the kernel starts on, both part
    of the feedback, change the key, while a plain kernel keeps the key it was stored under?"""
    from autograder.versions import _digest, content_key
    base = content_key("01_first_kernel", "saxpy", "src")
    assert base == _digest("01_first_kernel", "saxpy", "src", "null", "")
    keys = {base, content_key("01_first_kernel", "saxpy", "src", first_line=2),
            content_key("01_first_kernel", "saxpy", "src", note="cells 4 and 9 both define saxpy", first_line=2)}
    assert len(keys) == 3
