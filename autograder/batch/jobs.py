"""What a class batch grades: one job per student, assignment and kernel exercise, read from the
submissions without running anything, each with the keys that tell whether it was graded already."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ..extract import collect_submissions
from ..loader import chapters, load_chapter
from ..spec import SpecError
from ..versions import content_key, spec_version

__all__ = ["Job", "discover"]


@dataclasses.dataclass
class Job:
    student: str
    assignment: str  # the chapter, as nbgrader's assignment name
    exercise: str
    path: str
    source: str | None = None
    launch: dict | None = None
    problem: str = ""  # the submission could not be read for this exercise: that is the verdict
    note: str = ""
    content: str = ""  # versions.content_key
    spec: str = ""     # versions.spec_version
    first_line: int = 1  # the cell line where the kernel's source starts, so feedback numbers lines as the cell

    @property
    def row(self) -> tuple:
        return (self.student, self.assignment, self.exercise)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def _student(sub_path: str, root: Path, chapter: str) -> str:
    """nbgrader's student id for submitted/<student>/<assignment>/...; else the path below the root."""
    p = Path(sub_path).resolve()
    if p.parent.name == chapter and p.parent.parent != p.parent:
        try:
            p.parent.parent.relative_to(root)
            if p.parent.parent != root:
                return p.parent.parent.name
        except ValueError:
            pass
    try:
        rel = p.relative_to(root)
    except ValueError:
        rel = Path(p.name)
    return str(rel.with_suffix("")).replace("/", "_") or p.stem


def discover(path, *, chapter_names=None, exercise: str | None = None) -> tuple:
    """(jobs, ignored): every kernel exercise of every submission under ``path``.

    ``chapter_names`` limits the batch to those assignments (default: every chapter found).
    Raises `SpecError` for an unknown chapter or exercise.
    """
    root = Path(path)
    known = chapters()
    wanted = list(chapter_names or [])
    for ch in wanted:
        load_chapter(ch)
    subs, ignored = [], []
    for ch in wanted or [None]:
        s, ig = collect_submissions(root, chapter=ch, known_chapters=known,
                                    exercises_of=lambda c: [e.name for e in load_chapter(c)])
        subs += s
        ignored += ig if ch is None or len(wanted) == 1 else [i for i in ig if "not to --chapter" not in i]
    versions = {}
    jobs = []
    for sub in subs:
        if not sub.chapter:
            ignored.append(f"{sub.path}: cannot tell its chapter")
            continue
        names = [e.name for e in load_chapter(sub.chapter)]
        if exercise:
            if exercise not in names:
                raise SpecError(f"{sub.chapter} has no exercise {exercise!r} (it has {', '.join(names)})")
            names = [exercise]
        if sub.chapter not in versions:
            versions[sub.chapter] = spec_version(sub.chapter)
        student = _student(sub.path, root.resolve() if root.is_dir() else root.parent.resolve(), sub.chapter)
        if sub.single_exercise:
            stem = Path(sub.path).stem
            names = [n for n in names if n in (stem, Path(sub.path).parent.name)] or names[:0]
            if not names:
                ignored.append(f"{sub.path}: not named after an exercise of {sub.chapter}")
                continue
        for name in names:
            problem = sub.problems.get(name) or sub.problems.get("*") or ""
            source = next(iter(sub.kernels.values()), None) if sub.single_exercise else sub.kernels.get(name)
            launch = sub.launches.get(name)
            note = sub.notes.get(name, "")
            first_line = 1 if sub.single_exercise else int(sub.first_lines.get(name, 1))
            jobs.append(Job(student=student, assignment=sub.chapter, exercise=name, path=str(sub.path),
                            source=source, launch=launch, problem=problem, note=note,
                            content=content_key(sub.chapter, name, source, launch, problem, note, first_line),
                            spec=versions[sub.chapter], first_line=first_line))
    return jobs, ignored
