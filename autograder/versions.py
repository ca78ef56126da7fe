"""What a grading depends on, as short content hashes: the spec version of a chapter and the content of a
submission for one exercise. Batch grading keys its stored results by both (and by the GPU model), so a
changed spec or a changed kernel is graded again and nothing else is.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

__all__ = ["GRADER_VERSION", "spec_version", "version_of", "content_key"]

# Bumped when a change of the grader itself (checks, timing, policy) can change a verdict.
GRADER_VERSION = "2026.11.4"  # .4: technique checks (techniques.py) can withhold speed points or fail an exercise


def _digest(*parts) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()[:16]


def spec_version(chapter: str) -> str:
    """A hash of the chapter's spec file, every reference solution it names, and the grader version.

    For a frozen chapter these are the snapshot's files (autograder/speclock.py), so the version stays what
    it was at freezing whatever happens to the live spec.
    """
    from .loader import SPECS_DIR, load_chapter
    from .speclock import frozen_spec_file
    return version_of(frozen_spec_file(chapter) or SPECS_DIR / f"{chapter}.py", load_chapter(chapter))


def version_of(spec_path, exercises, grader_version: str | None = None) -> str:
    """`spec_version` of the spec file ``spec_path`` whose loaded exercises are ``exercises`` (with another
    ``grader_version`` than this grader's: to tell a spec change from a grader change)."""
    from .spec import reference_source
    parts = [grader_version or GRADER_VERSION, Path(spec_path).read_bytes()]
    for ex in exercises:
        parts += [ex.name, reference_source(ex)]
    return _digest(*parts)


def content_key(chapter: str, exercise: str, source: str | None, launch=None, problem: str = "", note: str = "",
                first_line: int = 1) -> str:
    """A hash of exactly what is graded for one exercise and what its feedback says: the kernel source, its
    LAUNCH data, any problem found while reading the submission (which decides the verdict instead), the
    note about the notebook (duplicate cells...) and the cell line the source starts on (the feedback's
    line numbers), so a stored result is only ever shown to a submission whose feedback it is."""
    parts = [chapter, exercise, source if source is not None else "\0none",
             json.dumps(launch, sort_keys=True, default=repr), problem or ""]
    if note or first_line != 1:  # the common case keeps the keys results were stored under
        parts += [note, str(int(first_line))]
    return _digest(*parts)
