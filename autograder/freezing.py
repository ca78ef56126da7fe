"""Freeze a term's specs (`python -m autograder freeze` / `unfreeze`) and say what changed since.

A snapshot, ``autograder/frozen/<chapter>/<version>/``, holds a byte copy of the chapter's spec file, the
reference solutions it names (``solutions/``) and ``manifest.json``; ``autograder/specs.lock.json`` names
the snapshot each frozen chapter is graded with (autograder/speclock.py reads both). Freezing again is the
deliberate regrade: the lock then names the new version, and every later grading records that version.
Snapshots are kept after a refreeze or an unfreeze, as the record of what earlier grades were made with.

The grader's own code (checks, timing, drivers) is not copied: GRADER_VERSION, part of every version,
stands for it, and `notes` says when it has changed since a chapter was frozen.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
from pathlib import Path

from . import loader, speclock, versions
from .loader import load_chapter, load_spec_file
from .spec import CallExercise, SpecError, did_you_mean, reference_source
from .speclock import MANIFEST, SOLUTIONS, read_lock, shown, snapshot_dir
from .versions import spec_version, version_of

__all__ = ["freeze", "unfreeze", "notes"]


def _live_chapters() -> list:
    return sorted(p.stem for p in loader.SPECS_DIR.glob("[0-9][0-9]_*.py"))


def _live_path(chapter: str) -> Path:
    return loader.SPECS_DIR / f"{chapter}.py"


def _reference_name(ex) -> str:
    return ex.solution_file if isinstance(ex, CallExercise) else ex.source_file


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _write_lock(chapters: dict) -> None:
    """Write the lock (atomically), or remove it when nothing is frozen: the repository ships unfrozen."""
    lock = speclock.LOCK_FILE
    if not chapters:
        lock.unlink(missing_ok=True)
        return
    text = json.dumps({"about": "written by `python -m autograder freeze`; see autograder/SPEC_FORMAT.md",
                       "chapters": dict(sorted(chapters.items()))}, indent=2) + "\n"
    tmp = lock.with_name(lock.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, lock)


def _write_snapshot(chapter: str, live: Path, exercises: list, version: str) -> Path:
    """The snapshot folder of ``version``, written unless it exists; checked against the live spec."""
    dest = snapshot_dir(chapter, version)
    if not (dest / MANIFEST).is_file():
        tmp = dest.parent / f".{version}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / SOLUTIONS).mkdir(parents=True)
        shutil.copyfile(live, tmp / live.name)
        files = {live.name: _sha256(live)}
        for ex in exercises:
            name = _reference_name(ex)
            target = tmp / SOLUTIONS / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(Path(ex.solutions_dir) / name, target)
            files[f"{SOLUTIONS}/{name}"] = _sha256(target)
        manifest = {"chapter": chapter, "version": version, "grader_version": versions.GRADER_VERSION,
                    "created": _now(), "exercises": [{"name": ex.name, "reference": _reference_name(ex),
                                                      "max_points": ex.max_points} for ex in exercises],
                    "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(dest, ignore_errors=True)  # an incomplete folder left by an interrupted freeze
        tmp.rename(dest)
    # load the copy as grading will: a spec that reads files next to itself would break only once frozen
    frozen = load_spec_file(dest / live.name)
    if version_of(dest / live.name, frozen) != version:
        raise SpecError(f"{shown(dest)}/ does not match {shown(live)} and its reference solutions (its files were "
                        f"edited after an earlier freeze). Delete that folder and freeze {chapter} again.")
    return dest


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _diff(old: list, new: list, old_path: Path, new_path: Path) -> str:
    """What differs between two loaded versions of a chapter, in a few words."""
    before, after = {e.name: e for e in old}, {e.name: e for e in new}
    parts = []
    added = [n for n in after if n not in before]
    if added:
        parts.append("exercise" + "s" * (len(added) > 1) + " added: " + ", ".join(added))
    removed = [n for n in before if n not in after]
    if removed:
        parts.append("exercise" + "s" * (len(removed) > 1) + " removed: " + ", ".join(removed))
    for name in (n for n in after if n in before):
        if after[name].max_points != before[name].max_points:
            parts.append(f"{name}: {before[name].max_points:g} -> {after[name].max_points:g} points")
        if reference_source(after[name]) != reference_source(before[name]):
            parts.append(f"{name}: reference solution {_reference_name(after[name])} edited")
    if Path(old_path).read_bytes() != Path(new_path).read_bytes():
        parts.append(f"{Path(new_path).name} edited")
    return "; ".join(parts) or "no visible difference (only the grader version changed)"


def freeze(chapters=(), *, term: str | None = None) -> list:
    """Freeze ``chapters`` (default: every chapter with a live spec) at their live specs; lines to print.

    Every chapter is validated and snapshotted before the lock is written, so a broken spec freezes none.
    ``term`` (kept from the earlier freeze when None) labels the lock entry.
    """
    live_chapters = _live_chapters()
    names = list(chapters) or live_chapters
    lock = read_lock()
    lines, entries = [], {}
    for ch in names:
        live = _live_path(ch)
        if not live.is_file():
            raise SpecError(f"cannot freeze {ch!r}: {shown(live)} does not exist.{did_you_mean(ch, live_chapters)} "
                            f"Chapters with a live spec: {', '.join(live_chapters) or 'none'}")
        exercises = load_spec_file(live)
        version = version_of(live, exercises)
        dest = _write_snapshot(ch, live, exercises, version)
        before = lock.get(ch)
        entries[ch] = {"version": version, "term": term if term is not None else (before or {}).get("term", ""),
                       "frozen_at": _now(), "grader_version": versions.GRADER_VERSION}
        what = (f"{len(exercises)} exercise{'s' * (len(exercises) != 1)} ({', '.join(e.name for e in exercises)}), "
                f"{sum(e.max_points for e in exercises):g} points")
        label = f" (term {entries[ch]['term']})" if entries[ch]["term"] else ""
        if before and before["version"] == version:
            entries[ch]["frozen_at"] = before.get("frozen_at", entries[ch]["frozen_at"])
            relabelled = entries[ch]["term"] != before.get("term", "")
            lines.append(f"{ch}: already frozen at version {version}{label}; "
                         + ("only the term label changed." if relabelled else "nothing changed."))
            continue
        lines.append(f"{ch}: frozen at version {version}{label}: {what}. Grading uses {shown(dest)}/ until "
                     f"you freeze again.")
        if before:
            lines.append(f"  This replaces version {before['version']} (frozen {before.get('frozen_at', '?')[:10]}): "
                         + _diff_with_snapshot(ch, before["version"], exercises, live)
                         + ". Every grading from now on uses and records the new version; grade the "
                         "submissions again to apply it to work already graded.")
    _write_lock({**lock, **entries})
    load_chapter.cache_clear()
    return lines


def _diff_with_snapshot(chapter: str, version: str, exercises: list, live: Path) -> str:
    path = snapshot_dir(chapter, version) / f"{chapter}.py"
    try:
        return _diff(load_spec_file(path), exercises, path, live)
    except (OSError, SpecError) as exc:
        return f"its snapshot cannot be compared ({exc})"


def unfreeze(chapters) -> list:
    """Grade ``chapters`` with their live specs again; lines to print. The snapshots stay on disk."""
    lock = read_lock()
    lines = []
    for ch in chapters:
        entry = lock.pop(ch, None)
        if entry is None:
            lines.append(f"{ch}: not frozen; it is graded with its live spec already."
                         + did_you_mean(ch, sorted(read_lock())))
            continue
        lines.append(f"{ch}: unfrozen; grading now uses the live spec {shown(_live_path(ch))}"
                     f"{_live_state(ch, entry['version'])}. Its snapshot {shown(snapshot_dir(ch, entry['version']))}/ "
                     f"stays as the record of what version {entry['version']} graded.")
    _write_lock(lock)
    load_chapter.cache_clear()
    return lines


def _live_state(chapter: str, frozen_version: str) -> str:
    live = _live_path(chapter)
    try:
        version = version_of(live, load_spec_file(live))
    except (OSError, SpecError) as exc:
        return f", which cannot be graded with until it is fixed ({exc})"
    if version == frozen_version:
        return f", which is the same as the frozen one (version {version})"
    return f" (version {version}; later gradings record it instead of {frozen_version})"


def notes(chapters=None, *, changes_only: bool = False) -> list:
    """Lines on the frozen chapters among ``chapters`` (default: all): the version graded with, and
    whether the live spec, the snapshot or the grader changed since, with what to run about it.
    ``changes_only``: nothing for a frozen chapter whose live spec is still the same."""
    lock = read_lock()
    lines = []
    for ch in sorted(lock):
        if chapters is not None and ch not in chapters:
            continue
        entry = lock[ch]
        try:
            frozen_path = speclock.frozen_spec_file(ch)
            frozen = load_chapter(ch)
        except SpecError as exc:
            lines.append(f"{ch}: {exc}")
            continue
        grader = entry.get("grader_version") or versions.GRADER_VERSION
        problems = []
        if version_of(frozen_path, frozen, grader) != entry["version"]:
            problems.append(f"the files of its snapshot {shown(frozen_path.parent)}/ were changed after freezing; "
                            f"restore them from version control, or freeze {ch} again.")
        if grader != versions.GRADER_VERSION:
            problems.append(f"it was frozen with grader {grader}; this grader is {versions.GRADER_VERSION}, so "
                            f"verdicts may differ from those made then (its spec version is now {spec_version(ch)}).")
        problems += _live_notes(ch, entry["version"], grader, frozen, frozen_path)
        if problems or not changes_only:
            when = ("term " + entry["term"] + ", " if entry.get("term") else "") + "frozen " + \
                entry.get("frozen_at", "?")[:10]
            lines.append(f"{ch}: frozen at version {entry['version']} ({when}); "
                         f"graded with {len(frozen)} exercise{'s' * (len(frozen) != 1)} from "
                         f"{shown(frozen_path.parent)}/" + ("." if problems else "; the live spec is the same."))
            lines += ["  " + p for p in problems]
    return lines


def _live_notes(ch: str, version: str, grader: str, frozen: list, frozen_path: Path) -> list:
    live = _live_path(ch)
    if not live.is_file():
        return [f"the live spec {shown(live)} no longer exists; grading is unaffected (it uses the frozen copy)."]
    try:
        exercises = load_spec_file(live)
    except SpecError as exc:
        return [f"the live spec does not load ({exc}); grading is unaffected (it uses the frozen copy)."]
    if version_of(live, exercises, grader) == version:
        return []
    return [f"the live spec changed since freezing ({_diff(frozen, exercises, frozen_path, live)}); grading still "
            f"uses the frozen one. To grade with the live spec from now on (a deliberate regrade of all "
            f"later gradings), run: python -m autograder freeze {ch}"]
