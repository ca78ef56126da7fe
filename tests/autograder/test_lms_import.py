"""`python -m autograder import-submissions`: LMS download folders into nbgrader's submitted/ layout, checked
with nbgrader's own path formatting, submission discovery and timestamp parsing."""
import csv
import datetime as dt
import glob
import json
import os
import re
import subprocess
import sys
from pathlib import PurePath

import pytest

from ag_helpers import ROOT, make_notebook
from autograder.lms_import import (TIMESTAMP_FORMAT, LmsImportError, format_table, format_timestamp,
                                   import_submissions, parse_timestamp, parse_upload, plan_import)

nbgrader = pytest.importorskip("nbgrader")
from nbgrader.apps.api import NbGraderAPI  # noqa: E402
from nbgrader.coursedir import CourseDirectory  # noqa: E402
from nbgrader.exchange.abc.exchange import Exchange  # noqa: E402
from nbgrader.utils import parse_utc  # noqa: E402

A = "01_first_kernel"
T0 = dt.datetime(2026, 11, 20, 10, 30, tzinfo=dt.timezone.utc)


@pytest.fixture
def course(tmp_path):
    """A course folder like exercises/: the real source notebook of A, and a second assignment."""
    c = tmp_path / "course"
    (c / "source" / A).mkdir(parents=True)
    (c / "source" / A / f"{A}.ipynb").write_bytes((ROOT / "exercises" / "source" / A / f"{A}.ipynb").read_bytes())
    (c / "source" / "02_memory_transfer").mkdir()
    return c


@pytest.fixture
def dl(tmp_path):
    d = tmp_path / "download"
    d.mkdir()
    return d


def upload(folder, rel, who, when=T0):
    """A notebook whose content names ``who``, with modification time ``when``."""
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    make_notebook([("code", f"# by {who}", [])], path)
    os.utime(path, (when.timestamp(), when.timestamp()))
    return path


def landed(course, student):
    """(author written in the imported notebook, nbgrader's reading of its timestamp.txt)."""
    d = course / "submitted" / student / A
    author = json.loads((d / f"{A}.ipynb").read_text())["cells"][0]["source"]
    return author.removeprefix("# by "), parse_utc((d / "timestamp.txt").read_text())


def nbgrader_sees(course):
    """{student: (notebook ids, timestamp)} as nbgrader's API and converters find the submissions."""
    cd = CourseDirectory(root=str(course))
    api = NbGraderAPI(coursedir=cd)
    out = {}
    for student in sorted(api.get_submitted_students(A)):
        folder = cd.format_path(cd.submitted_directory, student, A)
        # what BaseConverter.init_notebooks globs: the notebook ids autograde would grade
        ids = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(folder, "*.ipynb")))
        out[student] = (ids, api.get_submitted_timestamp(A, student), cd.get_existing_timestamp(folder))
    return out


def by_source(rows):
    return {r.source: r for r in rows}


@pytest.mark.parametrize("rel,student,when", [
    ("erin_12345_67890_01_first_kernel.ipynb", "erin", None),  # Canvas
    ("erin_LATE_12345_67890_01_first_kernel.ipynb", "erin", None),
    ("Erin Smith_12345_assignsubmission_file_/01_first_kernel.ipynb", "erin_smith", None),  # Moodle
    ("Erin Smith_12345_assignsubmission_file_my kernels.ipynb", "erin_smith", None),
    ("01_first_kernel_erin_attempt_2026-11-20-10-30-00_01_first_kernel.ipynb", "erin",
     dt.datetime(2026, 11, 20, 10, 30)),  # Blackboard: the time is in the name
    ("Lab one_erin_attempt_2026-11-21-08-00-05_kernels.ipynb", "erin", dt.datetime(2026, 11, 21, 8, 0, 5)),
    ("erin_01_first_kernel.ipynb", "erin", None),  # renamed by hand
    ("erin/anything.ipynb", "erin", None),
    ("erin/deeper/01_first_kernel.ipynb", "erin", None),
    ("section-2/erin_12345_67890_01_first_kernel.ipynb", "erin", None),  # the LMS's name wins over a folder
])
def test_each_layout_lands_where_nbgrader_looks(course, dl, rel, student, when):
    """Does each LMS layout end as submitted/<student>/<assignment>/<assignment>.ipynb with nbgrader's
    timestamp (the LMS's time where its name has one, else the file's), found by nbgrader's own API?"""
    mtime = dt.datetime(2026, 11, 19, 23, 59, 58, 250000, tzinfo=dt.timezone.utc)
    upload(dl, rel, student, mtime)
    rows = import_submissions(dl, A, course_dir=course, lms_timezone="UTC")
    assert [r.action for r in rows] == ["imported"], format_table(rows)
    expected = when or mtime.replace(tzinfo=None)
    assert landed(course, student) == (student, expected)
    assert nbgrader_sees(course) == {student: ([A], expected, expected)}


def test_the_renamed_upload_of_the_issue(course, dl):
    """Issue #23: erin's renamed erin_01_first_kernel.ipynb got nbgrader's "No notebooks found"; imported, it
    is the one notebook nbgrader's converter regexp reads as student erin, assignment and notebook A."""
    upload(dl, "erin_01_first_kernel.ipynb", "erin")
    import_submissions(dl, A, course_dir=course)
    target = course / "submitted" / "erin" / A / f"{A}.ipynb"
    assert target.is_file()
    cd = CourseDirectory(root=str(course))
    # the converters' own pattern (BaseConverter.init_single_notebook_resources)
    folder = cd.format_path(cd.submitted_directory, "(?P<student_id>.*)", "(?P<assignment_id>.*)", escape=True)
    pattern = re.escape(os.sep).join([folder, "(?P<notebook_id>.*).ipynb"])
    m = re.match(pattern, str(target))
    assert m and m.groupdict() == {"student_id": "erin", "assignment_id": A, "notebook_id": A}


def test_timestamps_are_written_as_nbgraders_exchange_writes_them():
    """Is the format the exchange's default (timezone UTC), and do both readers agree on every form nbgrader
    may have written (the exchange's, zip_collect's isoformat, an offset)?"""
    assert Exchange().timestamp_format.replace("%Z", "UTC") == TIMESTAMP_FORMAT
    for text in ("2026-11-20 10:30:00.250000 UTC", "2026-11-20 10:30:00", "2026-11-20 11:30:00+01:00",
                 "2026-11-20 11:30:00.000000 Europe/Berlin"):
        assert parse_timestamp(text) == parse_utc(text) == dt.datetime(2026, 11, 20, 10, 30, 0,
                                                                       250000 if ".25" in text else 0), text
    # nbgrader's to_numeric_tz form; its parse_utc reads -0600 as -600 seconds, this reads six hours
    assert parse_timestamp("2026-11-20 04:30:00.000000 -0600") == dt.datetime(2026, 11, 20, 10, 30)
    assert parse_utc(format_timestamp(T0)) == T0.replace(tzinfo=None)
    with pytest.raises(ValueError):
        parse_timestamp("yesterday")


def test_blackboard_times_are_read_in_the_lms_time_zone(course, dl):
    """A Blackboard name's 10:30 in Chicago (UTC-6 in November) is 16:30 UTC in timestamp.txt."""
    upload(dl, "01_first_kernel_erin_attempt_2026-11-20-10-30-00_01_first_kernel.ipynb", "erin")
    import_submissions(dl, A, course_dir=course, lms_timezone="America/Chicago")
    assert landed(course, "erin")[1] == dt.datetime(2026, 11, 20, 16, 30)
    with pytest.raises(LmsImportError, match="Mars/Olympus"):
        plan_import(dl, A, course_dir=course, lms_timezone="Mars/Olympus")


def test_the_latest_attempt_is_kept_and_the_others_say_why(course, dl):
    """Blackboard attempts by their names' times (not the files' times), Canvas re-uploads by their number,
    hand-renamed copies by their files' times."""
    upload(dl, "01_first_kernel_ann_attempt_2026-11-20-10-30-00_01_first_kernel.ipynb", "ann-second",
           when=T0 - dt.timedelta(days=3))
    upload(dl, "01_first_kernel_ann_attempt_2026-11-19-10-30-00_01_first_kernel.ipynb", "ann-first")
    upload(dl, "bob_123_456_01_first_kernel-3.ipynb", "bob-first")
    upload(dl, "bob_123_457_01_first_kernel-1.ipynb", "bob-second")
    upload(dl, "cy_01_first_kernel.ipynb", "cy-second", when=T0 + dt.timedelta(minutes=1))
    upload(dl, "cy_01_first_kernel (1).ipynb", "cy-first")
    rows = by_source(import_submissions(dl, A, course_dir=course, lms_timezone="UTC"))
    assert [landed(course, s)[0] for s in ("ann", "bob", "cy")] == ["ann-second", "bob-second", "cy-second"]
    for older, kept in (("01_first_kernel_ann_attempt_2026-11-19-10-30-00_01_first_kernel.ipynb",
                         "01_first_kernel_ann_attempt_2026-11-20-10-30-00_01_first_kernel.ipynb"),
                        ("bob_123_456_01_first_kernel-3.ipynb", "bob_123_457_01_first_kernel-1.ipynb"),
                        ("cy_01_first_kernel (1).ipynb", "cy_01_first_kernel.ipynb")):
        assert rows[older].action == "skipped" and rows[older].why.endswith(f"which is {kept}")
        assert rows[kept].action == "imported"


def test_a_helper_notebook_in_the_same_upload_is_not_the_submission(course, dl):
    """Moodle keeps all files of an attempt in one folder: the notebook named after the assignment is the one,
    even where the helper was saved later."""
    folder = "Erin Smith_12345_assignsubmission_file_"
    upload(dl, f"{folder}/01_first_kernel.ipynb", "erin")
    upload(dl, f"{folder}/scratch.ipynb", "scratch", when=T0 + dt.timedelta(hours=1))
    rows = by_source(import_submissions(dl, A, course_dir=course))
    assert landed(course, "erin_smith")[0] == "erin"
    assert "01_first_kernel.ipynb is the assignment's" in rows[f"{folder}/scratch.ipynb"].why


def test_a_newer_submission_already_there_is_never_overwritten(course, dl):
    """Older uploads do not replace a newer submission (from nbgrader collect, say); newer ones do, and a
    second run over the same download changes nothing."""
    dest = course / "submitted" / "erin" / A
    dest.mkdir(parents=True)
    make_notebook([("code", "# by collected", [])], dest / f"{A}.ipynb")
    (dest / "timestamp.txt").write_text("2026-11-20 11:00:00.000000 UTC")
    upload(dl, "erin_01_first_kernel.ipynb", "lms", when=T0)  # 10:30, older
    rows = import_submissions(dl, A, course_dir=course)
    assert rows[0].action == "skipped" and "as new or newer (2026-11-20 11:00:00 UTC)" in rows[0].why
    assert landed(course, "erin")[0] == "collected"

    upload(dl, "erin_01_first_kernel.ipynb", "lms", when=T0 + dt.timedelta(hours=1))
    assert import_submissions(dl, A, course_dir=course)[0].action == "replaced"
    assert landed(course, "erin") == ("lms", dt.datetime(2026, 11, 20, 11, 30))
    again = import_submissions(dl, A, course_dir=course)[0]
    assert (again.action, again.why) == ("skipped", "already imported: the same notebook is there")

    (dest / "timestamp.txt").unlink()
    upload(dl, "erin_01_first_kernel.ipynb", "lms-3", when=T0 + dt.timedelta(hours=2))
    row = import_submissions(dl, A, course_dir=course)[0]
    assert row.action == "skipped" and "without nbgrader's timestamp.txt" in row.why
    assert landed_author(dest) == "lms"


def landed_author(dest):
    return json.loads((dest / f"{A}.ipynb").read_text())["cells"][0]["source"].removeprefix("# by ")


def test_roster_maps_lms_names_and_ids_to_student_ids(course, dl, tmp_path):
    """nbgrader's own student CSV (id, first_name, last_name, email) plus an LMS column: Moodle's full name,
    Canvas's login and Blackboard's user id each find the student; a stranger is skipped, never invented."""
    roster = tmp_path / "roster.csv"
    with open(roster, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "first_name", "last_name", "email", "lms_login"])
        w.writerow(["s001", "Erin", "Smith", "erin@uni.example", "esmith7"])
        w.writerow(["s002", "José", "Núñez", "jose@uni.example", "jnunez"])
    upload(dl, "Erin Smith_12345_assignsubmission_file_/01_first_kernel.ipynb", "erin")
    upload(dl, "nunezjose_222_333_01_first_kernel.ipynb", "jose")  # Canvas writes lastfirst, without accents
    upload(dl, "01_first_kernel_mallory_attempt_2026-11-20-10-30-00_01_first_kernel.ipynb", "mallory")
    rows = import_submissions(dl, A, course_dir=course, roster=roster)
    assert sorted(p.name for p in (course / "submitted").iterdir()) == ["s001", "s002"]
    assert landed(course, "s001")[0] == "erin" and landed(course, "s002")[0] == "jose"
    stranger = next(r for r in rows if "mallory" in r.source)
    assert stranger.action == "skipped" and stranger.why.startswith("not in the roster ('mallory'")

    (dl / "Erin Smith_12345_assignsubmission_file_" / "01_first_kernel.ipynb").unlink()
    with open(roster, "a", newline="") as f:
        csv.writer(f).writerow(["s003", "Erin", "Smith", "erin2@uni.example", "esmith8"])
    upload(dl, "Erin Smith_12399_assignsubmission_file_/01_first_kernel.ipynb", "erin")
    row = next(r for r in import_submissions(dl, A, course_dir=course, roster=roster) if "Erin" in r.source)
    assert row.action == "skipped" and "several students in the roster (s001, s003)" in row.why

    (tmp_path / "bad.csv").write_text("name,login\nErin,esmith7\n")
    with pytest.raises(LmsImportError, match="student_id \\(or id\\) column"):
        plan_import(dl, A, course_dir=course, roster=tmp_path / "bad.csv")


def test_dry_run_writes_nothing(course, dl):
    upload(dl, "erin_01_first_kernel.ipynb", "erin")
    rows = import_submissions(dl, A, course_dir=course, dry_run=True)
    assert [(r.action, r.student) for r in rows] == [("would import", "erin")]
    assert rows[0].dest == str(course / "submitted" / "erin" / A / f"{A}.ipynb")
    assert not (course / "submitted").exists()


def test_links_are_never_followed_nor_written_through(course, dl, tmp_path):
    """A linked file or folder in the download is listed and not read; a link where the submission would
    go is not written through."""
    secret = tmp_path / "secret.ipynb"
    make_notebook([("code", "# secret", [])], secret)
    (dl / "eve_01_first_kernel.ipynb").symlink_to(secret)
    (tmp_path / "elsewhere").mkdir()
    upload(tmp_path / "elsewhere", "x.ipynb", "x")
    (dl / "zed").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    upload(dl, "erin_01_first_kernel.ipynb", "erin")
    outside = tmp_path / "outside"
    outside.mkdir()
    (course / "submitted").mkdir()
    (course / "submitted" / "erin").symlink_to(outside, target_is_directory=True)
    rows = by_source(import_submissions(dl, A, course_dir=course))
    assert rows["eve_01_first_kernel.ipynb"].why == "a link: links are never followed"
    assert rows["zed"].why == "a link to a folder: links are never followed"
    assert rows["erin_01_first_kernel.ipynb"].action == "skipped"
    assert "is a link: nothing is written through links" in rows["erin_01_first_kernel.ipynb"].why
    assert list(outside.iterdir()) == [] and not (course / "submitted" / "eve").exists()


def test_what_cannot_be_placed_is_listed_with_the_reason(course, dl):
    upload(dl, "01_first_kernel.ipynb", "nobody")
    (dl / "01_first_kernel_erin_attempt_2026-11-20-10-30-00.txt").write_text("Blackboard's receipt")
    upload(dl, "erin_99_1_02_memory_transfer.ipynb", "erin")  # Canvas, the wrong file uploaded
    (dl / "bob_01_first_kernel.ipynb").write_text("{not json")
    rows = by_source(import_submissions(dl, A, course_dir=course))
    assert rows["01_first_kernel.ipynb"].why.startswith("cannot tell whose notebook this is")
    assert rows["1 .txt file(s), e.g. 01_first_kernel_erin_attempt_2026-11-20-10-30-00.txt"].why == "not notebooks"
    assert "named after 02_memory_transfer" in rows["erin_99_1_02_memory_transfer.ipynb"].why
    assert "not a readable notebook" in rows["bob_01_first_kernel.ipynb"].why  # imported: the grader says why
    assert rows["bob_01_first_kernel.ipynb"].action == "imported"


def test_parse_upload_reads_student_and_time():
    up = parse_upload(PurePath("smitherin_LATE_42_77_01_first_kernel-2.ipynb"), A)
    assert (up.layout, up.name, up.lms_id, up.late, up.attempt) == ("canvas", "smitherin", "42", True, (77, 2))
    assert isinstance(parse_upload(PurePath("notes.ipynb"), A), str)


def run_cli(*args, cwd=ROOT):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "autograder", "import-submissions", *map(str, args)],
                          capture_output=True, text=True, cwd=str(cwd), env=env, timeout=120)


def test_command_line(course, dl, tmp_path):
    """The table, exit codes, and a teacher's message for an unknown assignment or a zip file."""
    upload(dl, "erin_01_first_kernel.ipynb", "erin")
    upload(dl, "ev\x1b[2Jil_01_first_kernel.ipynb", "evil")
    r = run_cli(dl, "--assignment", A, "--course-dir", course, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert f"submitted/erin/{A}/{A}.ipynb" in r.stdout and "would import" in r.stdout
    assert "dry run: nothing was written" in r.stdout and "\x1b" not in r.stdout
    # run from the course folder, as nbgrader commands are: the course folder is found without --course-dir
    r = run_cli(dl, "--assignment", A, cwd=course)
    assert r.returncode == 0 and (course / "submitted" / "erin" / A / "timestamp.txt").is_file(), r.stderr
    r = run_cli(dl, "--assignment", "01_first_kernal", "--course-dir", course)
    assert r.returncode == 2 and "Did you mean '01_first_kernel'" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "submissions.zip").write_bytes(b"PK")
    r = run_cli(tmp_path / "submissions.zip", "--assignment", A, "--course-dir", course)
    assert r.returncode == 2 and "unzip it first" in r.stderr
