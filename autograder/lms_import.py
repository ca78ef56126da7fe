"""`python -m autograder import-submissions`: an LMS download folder into nbgrader's submitted/ layout.

Learning platforms hand back uploads renamed after the student (Canvas ``erin_12345_67890_NAME``, Moodle
``Erin Smith_12345_assignsubmission_file_/NAME``, Blackboard ``TITLE_erin_attempt_2026-11-20-10-30-00_NAME``),
while nbgrader finds a submission only at ``submitted/<student>/<assignment>/<assignment>.ipynb``: a renamed
upload gets nbgrader's "No notebooks found". This module puts each student's latest notebook there under the
name nbgrader looks for, with the ``timestamp.txt`` that nbgrader's exchange writes (nbgrader reads it for
late penalties), and says for every file what it did and why.

Download folders come from students' uploads: links are never followed, nothing is written through a link,
and a submission already in place is replaced only by a newer one.
"""
from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime as dt
import os
import re
import stat
import sys
import tempfile
import unicodedata
from pathlib import Path, PurePath

from .report import printable

__all__ = ["Upload", "Row", "LmsImportError", "TIMESTAMP_FORMAT", "format_timestamp", "parse_timestamp",
           "parse_upload", "read_roster", "plan_import", "import_submissions", "format_table", "add_arguments",
           "run", "main"]

# what nbgrader's exchange writes (Exchange.timestamp_format with Exchange.timezone = "UTC")
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f UTC"

_MOODLE_DIR = re.compile(r"^(?P<name>.+)_(?P<id>\d+)_assignsubmission_file_?$")
_MOODLE_FILE = re.compile(r"^(?P<name>.+)_(?P<id>\d+)_assignsubmission_file_(?P<file>.+)$")
_BLACKBOARD = re.compile(r"^(?P<head>.+)_attempt_(?P<time>\d{4}(?:-\d\d){5})(?:_(?P<file>.+))?$")
_CANVAS = re.compile(r"^(?P<name>[^_]+?)(?P<late>_LATE)?_(?P<id>\d+)_(?P<sub>\d+)_(?P<file>.+)$")
# a re-upload of the same name: Canvas adds "-1", browsers " (1)"
_COPY = re.compile(r"^(?P<stem>.*?)(?:-(?P<dash>\d+)| \((?P<paren>\d+)\))$")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$")
_SKIP_DIRS = ("__MACOSX",)  # the resource forks a Mac adds to a zip


class LmsImportError(ValueError):
    """A usage error (no such folder, an unknown assignment, a roster that cannot be read)."""


@dataclasses.dataclass
class Upload:
    """What an uploaded notebook's path says: whose it is, and when it was handed in."""

    layout: str  # "canvas", "moodle", "blackboard", "plain" or "folder"
    name: str  # the student's name or login as the LMS wrote it
    lms_id: str = ""  # the LMS's number for the student, where it writes one
    filename: str = ""  # the file name the student uploaded
    time: dt.datetime | None = None  # naive, in the LMS's time zone (only Blackboard writes one)
    late: bool = False  # Canvas marks uploads after its due date
    attempt: tuple = ()  # the LMS's submission number, then a "-1" or " (1)" copy suffix: larger is later


@dataclasses.dataclass
class Row:
    """One line of the import table: a file, where it went (or would go), or why it did not."""

    source: str
    action: str  # "imported", "replaced", "would import", "would replace", "skipped"
    why: str = ""
    student: str = ""
    dest: str = ""
    when: str = ""
    # the plan's data for writing (not shown)
    path: Path | None = dataclasses.field(default=None, repr=False)
    timestamp: str = dataclasses.field(default="", repr=False)


def format_timestamp(when: dt.datetime) -> str:
    """``when`` (aware) as nbgrader's exchange writes a submission time, in UTC."""
    return when.astimezone(dt.timezone.utc).strftime(TIMESTAMP_FORMAT)


def parse_timestamp(text: str) -> dt.datetime:
    """A timestamp.txt as naive UTC, read as nbgrader's ``parse_utc`` reads what nbgrader writes: the
    exchange's ``... UTC`` form, a zone name, ISO offsets, or a naive time (UTC). A ``-0600`` suffix is read as
    six hours (``parse_utc`` takes it for 600 seconds). Raises ValueError for anything else."""
    text = text.strip()
    parts = text.split(" ")
    zone = None
    if len(parts) == 3:
        text, zone = " ".join(parts[:2]), parts[2]
    when = dt.datetime.fromisoformat(text)
    if zone is not None:
        if zone.upper() in ("UTC", "GMT", "Z"):
            when = when.replace(tzinfo=dt.timezone.utc)
        elif re.fullmatch(r"[+-]\d{4}", zone):
            offset = dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[3:]))
            when = when.replace(tzinfo=dt.timezone(-offset if zone[0] == "-" else offset))
        else:
            when = when.replace(tzinfo=_zone(zone))
    if when.tzinfo is not None:
        when = when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return when


def _zone(name: str):
    from zoneinfo import ZoneInfo
    try:
        return ZoneInfo(name)
    except (ValueError, OSError, LookupError) as exc:  # ZoneInfoNotFoundError is a KeyError
        raise ValueError(f"unknown time zone {name!r}") from exc


def _copy_number(stem: str) -> tuple:
    m = _COPY.match(stem)
    if not m:
        return stem, 0
    return m["stem"], int(m["dash"] or m["paren"])


def parse_upload(rel: PurePath, assignment: str) -> Upload | str:
    """The `Upload` a notebook's path (relative to the download folder) describes, or why it tells none.

    An LMS's own naming counts at any depth; otherwise a folder directly in the download folder names the
    student of every notebook under it, and a loose notebook must be named ``STUDENT_<assignment>.ipynb``.
    """
    parts = rel.parts
    for folder in parts[:-1]:
        m = _MOODLE_DIR.match(folder)
        if m:
            return Upload("moodle", m["name"], m["id"], rel.name)
    stem = rel.stem
    m = _MOODLE_FILE.match(stem)
    if m:
        return Upload("moodle", m["name"], m["id"], m["file"] + rel.suffix)
    m = _BLACKBOARD.match(stem)
    if m:
        head = m["head"]
        user = head[len(assignment) + 1:] if head.lower().startswith(assignment.lower() + "_") else \
            head.rsplit("_", 1)[-1]
        when = dt.datetime.strptime(m["time"], "%Y-%m-%d-%H-%M-%S")
        return Upload("blackboard", user, "", (m["file"] or stem) + rel.suffix, time=when)
    m = _CANVAS.match(stem)
    if m:
        _, copy = _copy_number(m["file"])
        return Upload("canvas", m["name"], m["id"], m["file"] + rel.suffix, late=bool(m["late"]),
                      attempt=(int(m["sub"]), copy))
    if len(parts) > 1:
        return Upload("folder", parts[0], "", rel.name)
    base, copy = _copy_number(stem)
    if base.lower().endswith("_" + assignment.lower()) and len(base) > len(assignment) + 1:
        return Upload("plain", base[:-len(assignment) - 1], "", rel.name, attempt=(copy,))
    return (f"cannot tell whose notebook this is: name it STUDENT_{assignment}.ipynb or put it in a folder "
            f"named after the student")


def _key(text: str) -> str:
    """A name as the roster matches it: accents, case, spaces and punctuation ignored."""
    text = unicodedata.normalize("NFKD", str(text)).encode("ascii", "ignore").decode()
    return re.sub(r"[\W_]+", "", text.casefold())


def _slug(name: str) -> str:
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().lower()
    return re.sub(r"[^a-z0-9@+-]+", "_", text).strip("_.")[:100]


def read_roster(path) -> dict:
    """Roster CSV -> {matching key: nbgrader student id, or a tuple of ids where the key is ambiguous}.

    The header names the nbgrader id column ``student_id`` (or ``id``, as for ``nbgrader db student
    import``); every other cell of a row (LMS login, LMS user id, full name, email) maps to that id, and
    ``first_name``/``last_name`` do so together ("Erin Smith", and Canvas's "smitherin").
    """
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
            fields = [h.strip() for h in (rows and rows[0].keys() or [])]
    except OSError as exc:
        raise LmsImportError(f"cannot read the roster {path}: {exc.strerror or exc}") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise LmsImportError(f"the roster {path} is not a UTF-8 CSV file: {exc}") from None
    idcol = next((h for h in ("student_id", "id") if h in fields), None)
    if idcol is None:
        raise LmsImportError(f"the roster {path} needs a header row with a student_id (or id) column holding "
                             f"nbgrader's student ids; its columns are: {', '.join(fields) or 'none'}")
    out: dict = {}

    def add(key, sid):
        key = _key(key)
        if key and out.get(key, sid) != sid:
            old = out[key] if isinstance(out[key], tuple) else (out[key],)
            out[key] = tuple(sorted(set(old) | {sid}))
        elif key:
            out[key] = sid
    for n, row in enumerate(rows, 2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items() if isinstance(v, str)}
        sid = row.get(idcol, "")
        if not _SAFE_ID.match(sid):
            raise LmsImportError(f"{path}, line {n}: {sid!r} cannot be an nbgrader student id (it names a "
                                 f"folder: letters, digits and . _ @ + - only, not starting with a dot)")
        for col, value in row.items():
            if col not in ("first_name", "last_name"):
                add(value, sid)
        first, last = row.get("first_name", ""), row.get("last_name", "")
        if first and last:
            add(first + last, sid)
            add(last + first, sid)
    return out


def _student(up: Upload, roster: dict | None) -> tuple:
    """(student id, None) or (None, why not)."""
    if roster is None:
        sid = _slug(up.name)
        return (sid, None) if _SAFE_ID.match(sid) else (None, f"{up.name!r} makes no usable student id; "
                                                                 f"pass --roster to map it")
    for key in filter(None, (_key(up.lms_id), _key(up.name))):
        hit = roster.get(key)
        if isinstance(hit, tuple):
            return None, f"{up.name!r} matches several students in the roster ({', '.join(hit)})"
        if hit:
            return hit, None
    who = repr(up.name) + (f", LMS id {up.lms_id}" if up.lms_id else "")
    return None, f"not in the roster ({who}): add a row for this student"


def _notebook_name(course_dir: Path, assignment: str) -> str:
    """The notebook name nbgrader looks for: the source assignment's one notebook."""
    source = course_dir / "source"
    if not source.is_dir():
        return f"{assignment}.ipynb"
    known = sorted(p.name for p in source.iterdir() if p.is_dir() and not p.name.startswith("."))
    if assignment not in known:
        from .spec import did_you_mean
        raise LmsImportError(f"{source} has no assignment {assignment!r}; it has: {', '.join(known) or 'none'}."
                             + did_you_mean(assignment, known))
    notebooks = sorted(p.name for p in (source / assignment).glob("*.ipynb"))
    if len(notebooks) == 1 or f"{assignment}.ipynb" not in notebooks:
        return notebooks[0] if len(notebooks) == 1 else f"{assignment}.ipynb"
    return f"{assignment}.ipynb"


def _walk(root: Path):
    """(rel path, lstat or None, why skipped) for every file under ``root``; links are reported, not followed."""
    for top, dirs, files in os.walk(root):
        keep = []
        for d in sorted(dirs):
            full = Path(top, d)
            if d.startswith(".") or d in _SKIP_DIRS:
                continue
            if full.is_symlink():
                yield full.relative_to(root), None, "a link to a folder: links are never followed"
            else:
                keep.append(d)
        dirs[:] = keep
        for name in sorted(files):
            if name.startswith("."):
                continue
            full = Path(top, name)
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                yield full.relative_to(root), None, "a link: links are never followed"
            elif not stat.S_ISREG(st.st_mode):
                yield full.relative_to(root), None, "not a regular file"
            else:
                yield full.relative_to(root), st, ""


def _local_zone(name: str | None):
    if name is None:
        return dt.datetime.now().astimezone().tzinfo
    try:
        return _zone(name)
    except ValueError as exc:
        raise LmsImportError(f"--lms-timezone: {exc}; use a name such as Europe/Berlin or UTC") from None


def _note(up: Upload, path: Path, assignment: str, others: list) -> str:
    notes = []
    if up.late:
        notes.append("the LMS marked it LATE")
    other = next((a for a in others if a.lower() in up.filename.lower() and a != assignment), None)
    if other and assignment.lower() not in up.filename.lower():
        notes.append(f"named after {other}: check that it is this assignment's notebook")
    from .extract import NotebookError, read_notebook
    try:
        read_notebook(path)
    except (NotebookError, OSError) as exc:
        notes.append(f"not a readable notebook ({str(exc)[:120]}); the grader will say so")
    return "; ".join(notes)


def _existing(dest_dir: Path, notebook: str, data: bytes, when: dt.datetime) -> tuple:
    """(skip reason or None, replaces): what a submission already at ``dest_dir`` means for this one."""
    for p in (dest_dir.parent, dest_dir, dest_dir / notebook, dest_dir / "timestamp.txt"):
        if p.is_symlink():
            return f"{p} is a link: nothing is written through links", False
    nb, ts = dest_dir / notebook, dest_dir / "timestamp.txt"
    if nb.is_file() and nb.read_bytes() == data:
        return "already imported: the same notebook is there", False
    if not nb.exists() and not ts.exists():
        return None, False
    if not ts.is_file():
        return (f"{nb} exists without nbgrader's timestamp.txt, so which is newer cannot be told; move it away "
                f"to import this one"), False
    try:
        old = parse_timestamp(ts.read_text(encoding="utf-8", errors="replace"))
    except ValueError:
        return f"{ts} cannot be read as a time; move the folder away to import this one", False
    new = when.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if old >= new:
        return f"the submission already there is as new or newer ({old:%Y-%m-%d %H:%M:%S} UTC); not replaced", False
    return None, True


def plan_import(download_dir, assignment: str, *, course_dir="exercises", roster=None,
                lms_timezone: str | None = None, dry_run: bool = True) -> list:
    """The rows of an import, without writing anything; ``roster``: a path or `read_roster`'s dict.

    Each student's latest upload is chosen (the time in the LMS's name, else the file's modification
    time; then the LMS's attempt numbers; then a file named after the assignment); every other file gets a
    row saying why it was skipped.
    """
    root, course = Path(download_dir), Path(course_dir)
    if root.is_file() and root.suffix.lower() == ".zip":
        raise LmsImportError(f"{root} is a zip file: unzip it first (unzip {root} -d FOLDER keeps the files' "
                             f"times, which timestamp.txt takes where the names carry none), then import FOLDER")
    if not root.is_dir():
        raise LmsImportError(f"{root} is not a folder")
    if not course.is_dir():
        raise LmsImportError(f"the course folder {course} does not exist (pass --course-dir)")
    if not _SAFE_ID.match(assignment):
        raise LmsImportError(f"{assignment!r} is not an assignment name")
    notebook = _notebook_name(course, assignment)
    if isinstance(roster, (str, os.PathLike)):
        roster = read_roster(roster)
    zone = _local_zone(lms_timezone)
    source = course / "source"
    others = sorted(p.name for p in source.iterdir() if p.is_dir()) if source.is_dir() else []
    rows, other_files, chosen = [], {}, {}
    for rel, st, why in _walk(root):
        if st is None:
            rows.append(Row(str(rel), "skipped", why))
            continue
        if rel.suffix.lower() != ".ipynb":
            other_files.setdefault(rel.suffix.lower() or "(no suffix)", []).append(str(rel))
            continue
        up = parse_upload(rel, assignment)
        if isinstance(up, str):
            rows.append(Row(str(rel), "skipped", up))
            continue
        sid, why = _student(up, roster)
        if sid is None:
            rows.append(Row(str(rel), "skipped", why))
            continue
        when = up.time.replace(tzinfo=zone) if up.time else dt.datetime.fromtimestamp(st.st_mtime, dt.timezone.utc)
        named = _copy_number(PurePath(up.filename).stem)[0].lower() in (assignment.lower(), Path(notebook).stem.lower())
        row = Row(str(rel), "", student=sid, path=root / rel, timestamp=format_timestamp(when),
                  when=f"{format_timestamp(when)[:19]} ({'LMS name' if up.time else 'file time'})")
        chosen.setdefault(sid, []).append(((when, named, up.attempt, str(rel)), row, up))
    for sid, cands in sorted(chosen.items()):
        cands, extra = _one_notebook_per_upload(cands)
        rows += extra
        cands.sort(key=lambda c: c[0])
        (when, *_), row, up = cands[-1]
        for _, older, _ in cands[:-1]:
            rows.append(dataclasses.replace(older, action="skipped",
                                            why=f"not the latest upload of {sid}, which is {row.source}"))
        dest_dir = course / "submitted" / sid / assignment
        row.dest = str(dest_dir / notebook)
        try:
            skip, replaces = _existing(dest_dir, notebook, _read_nofollow(row.path), when)
        except OSError as exc:
            skip, replaces = f"could not be read ({exc.strerror or exc})", False
        if skip:
            rows.append(dataclasses.replace(row, action="skipped", why=skip))
            continue
        verb = "replace" if replaces else "import"
        row.action = f"would {verb}" if dry_run else {"replace": "replaced", "import": "imported"}[verb]
        row.why = _note(up, row.path, assignment, others)
        rows.append(row)
    for suffix, names in sorted(other_files.items()):
        rows.append(Row(f"{len(names)} {suffix} file(s), e.g. {names[0]}", "skipped", "not notebooks"))
    return rows


def _one_notebook_per_upload(cands: list) -> tuple:
    """(candidates, skipped rows): where one upload folder (Moodle's, or a student's own) holds a notebook
    named after the assignment, its other notebooks are helpers, not attempts."""
    by_folder = {}
    for c in cands:
        if c[2].layout in ("moodle", "folder"):
            by_folder.setdefault(PurePath(c[1].source).parent, []).append(c)
    dropped, rows = set(), []
    for group in by_folder.values():
        named = [c for c in group if c[0][1]]
        if named:
            for c in group:
                if not c[0][1]:
                    dropped.add(id(c))
                    rows.append(dataclasses.replace(c[1], action="skipped", why=(
                        f"another notebook of the same upload; {PurePath(named[-1][1].source).name} is the "
                        f"assignment's")))
    return [c for c in cands if id(c) not in dropped], rows


def _read_nofollow(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def _write(dest: Path, data: bytes) -> None:
    """Write through a temporary file and a rename, which replaces a name and never follows it."""
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".import-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def import_submissions(download_dir, assignment: str, *, course_dir="exercises", roster=None,
                       lms_timezone: str | None = None, dry_run: bool = False) -> list:
    """Copy each student's latest upload to ``course_dir/submitted/<student>/<assignment>/`` with its
    timestamp.txt (nothing is written with ``dry_run``); returns the rows of `plan_import`."""
    rows = plan_import(download_dir, assignment, course_dir=course_dir, roster=roster, lms_timezone=lms_timezone,
                       dry_run=dry_run)
    if dry_run:
        return rows
    for row in rows:
        if row.action not in ("imported", "replaced"):
            continue
        dest = Path(row.dest)
        dest.parent.parent.parent.mkdir(parents=True, exist_ok=True)  # submitted/ (the instructor's to place)
        for p in (dest.parent.parent, dest.parent):  # checked again: a link planted since the plan
            if p.is_symlink():
                row.action, row.why = "skipped", f"{p} is a link: nothing is written through links"
                break
            p.mkdir(exist_ok=True)
        else:
            _write(dest, _read_nofollow(row.path))
            _write(dest.parent / "timestamp.txt", row.timestamp.encode())
    return rows


def _cell(text: str, width: int) -> str:
    text = printable(text, one_line=True)
    return text if len(text) <= width else text[:width - 3] + "..."


def format_table(rows: list, course_dir=None) -> str:
    """The rows as a table: file, student, where it went, its time, and what happened or why not."""
    head = ("file", "student", "to", "time (UTC)", "what")
    base = Path(course_dir) if course_dir is not None else None

    def shown(r):
        dest = r.dest
        if base is not None and dest:
            dest = os.path.relpath(dest, base)
        what = r.action + (f": {r.why}" if r.why else "")
        return (_cell(r.source, 60), _cell(r.student, 24), _cell(dest, 60), r.when, _cell(what, 200))
    table = [head] + [shown(r) for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(head) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(t[:-1], widths)) + "  " + t[-1] for t in table]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * len(head[-1]))
    counts = {}
    for r in rows:
        counts[r.action] = counts.get(r.action, 0) + 1
    lines.append(", ".join(f"{n} {a}" for a, n in sorted(counts.items())) or "nothing found")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("download_dir", metavar="DOWNLOAD_DIR",
                   help="the unzipped folder of one assignment's submissions downloaded from the LMS")
    p.add_argument("--assignment", required=True, help="the nbgrader assignment, such as 01_first_kernel")
    p.add_argument("--course-dir", default=None, help=(
        "the nbgrader course folder that holds source/ and submitted/ (default: the current folder when it "
        "has source/, as when nbgrader commands are run from exercises/, else exercises)"))
    p.add_argument("--roster", metavar="CSV", help=(
        "map LMS names and ids to nbgrader student ids: a CSV with a student_id (or id) column; every other "
        "cell of a row (LMS login, LMS id, email, first_name with last_name) names that student. Without it "
        "the LMS name, lowercased with _ for spaces, is the student id"))
    p.add_argument("--lms-timezone", metavar="ZONE", help=(
        "time zone of the times in Blackboard's file names, such as America/Chicago (default: this machine's)"))
    p.add_argument("--dry-run", action="store_true", help="print what would be imported; write nothing")
    return p


def run(args) -> int:
    """The subcommand on parsed ``args``: prints the table; 0 done, 2 usage error."""
    try:
        course_dir = args.course_dir or ("." if Path("source").is_dir() else "exercises")
        rows = import_submissions(args.download_dir, args.assignment, course_dir=course_dir,
                                  roster=args.roster, lms_timezone=args.lms_timezone, dry_run=args.dry_run)
    except LmsImportError as exc:
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return 2
    print(format_table(rows, course_dir))
    if args.dry_run:
        print("dry run: nothing was written")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m autograder import-submissions", description=__doc__.split("\n")[0])
    return run(add_arguments(p).parse_args(argv))
