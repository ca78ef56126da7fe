"""Which spec a chapter is graded with: the live file in autograder/specs/, or a frozen snapshot.

`python -m autograder freeze` (autograder/freezing.py) copies a chapter's spec file and the reference
solutions it names into ``autograder/frozen/<chapter>/<version>/`` and records the version in
``autograder/specs.lock.json``. While a chapter is in the lock, the loader reads the snapshot, so editing
the live spec (or adding an exercise) changes nothing for work already submitted until the instructor
freezes again. Both live inside the package, so grading children (confined to the Python installation and
the package folders, autograder/worker.py) read the same lock and snapshot as the parent.

Read-only and free of the loader, so the loader can use it without an import cycle.
"""
from __future__ import annotations

import json
from pathlib import Path

from .spec import SpecError

__all__ = ["PACKAGE_DIR", "FROZEN_DIR", "LOCK_FILE", "MANIFEST", "SOLUTIONS", "read_lock", "locked",
           "locked_chapters", "snapshot_dir", "frozen_spec_file", "snapshot_solutions", "shown"]

PACKAGE_DIR = Path(__file__).resolve().parent
FROZEN_DIR = PACKAGE_DIR / "frozen"
LOCK_FILE = PACKAGE_DIR / "specs.lock.json"
MANIFEST = "manifest.json"
SOLUTIONS = "solutions"  # the snapshot's copies of the reference solutions, beside its spec file
_FIX = ("restore it from version control, run `python -m autograder freeze {ch}` to freeze the live spec, or "
        "`python -m autograder unfreeze {ch}` to grade with the live spec")


def shown(path: Path) -> str:
    """``path`` relative to the repository, for messages."""
    try:
        return str(Path(path).relative_to(PACKAGE_DIR.parent))
    except ValueError:
        return str(path)


def read_lock() -> dict:
    """chapter -> {"version", "term", "frozen_at", "grader_version"}; empty when nothing is frozen."""
    if not LOCK_FILE.is_file():
        return {}
    try:
        data = json.loads(LOCK_FILE.read_text(encoding="utf-8"))
        chapters = data["chapters"]
        if not isinstance(chapters, dict) or not all(isinstance(e, dict) and isinstance(e.get("version"), str)
                                                     for e in chapters.values()):
            raise ValueError("each chapter should map to an object with a 'version' string")
    except (ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"{shown(LOCK_FILE)} cannot be read ({type(exc).__name__}: {exc}). It is written by "
                        "`python -m autograder freeze`; restore it from version control, or delete it to grade "
                        "every chapter with its live spec.") from None
    return chapters


def locked(chapter: str) -> dict | None:
    """The lock entry of ``chapter``, or None when it is graded with its live spec."""
    return read_lock().get(chapter)


def locked_chapters() -> list:
    return sorted(read_lock())


def snapshot_dir(chapter: str, version: str) -> Path:
    return FROZEN_DIR / chapter / version


def frozen_spec_file(chapter: str) -> Path | None:
    """The snapshot's copy of the spec file when ``chapter`` is frozen, else None."""
    entry = locked(chapter)
    if entry is None:
        return None
    folder = snapshot_dir(chapter, entry["version"])
    path = folder / f"{chapter}.py"
    if not path.is_file() or not (folder / MANIFEST).is_file():
        raise SpecError(f"{shown(LOCK_FILE)} freezes {chapter} at version {entry['version']}, but its snapshot "
                        f"{shown(folder)}/ is missing or incomplete: " + _FIX.format(ch=chapter) + ".")
    return path


def snapshot_solutions(spec_path: Path) -> Path | None:
    """The reference solutions folder of the snapshot holding ``spec_path``; None for a live spec file."""
    folder = Path(spec_path).resolve().parent
    return folder / SOLUTIONS if (folder / MANIFEST).is_file() else None
