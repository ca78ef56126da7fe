"""`python -m benchmarks.grading_cost` (issue #23 item 7): it refuses without a GPU, its rows and table say
what was measured, the whole pipeline (course, submission, `autograder grade`, `nbgrader autograde`,
gradebook, record) runs end to end, and docs/INSTRUCTOR.md quotes every recorded chapter's figures."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types

import pytest

from repo_helpers import REPO, fail_on, gpu_status, quote_close

from benchmarks import grading_cost as gc

RESULTS = REPO / "benchmarks" / "results"
INSTRUCTOR = REPO / "docs" / "INSTRUCTOR.md"
SECTION = "## What grading costs per chapter"
PLACEHOLDER = "No measurement is recorded in this repository yet"


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


# --- refusing without a GPU -----------------------------------------------------------------------------

def test_refuses_without_a_gpu_and_writes_nothing(tmp_path):
    """No GPU (hidden with CUDA_VISIBLE_DEVICES=''): exit 2, a message that says why and what to do, no file."""
    out = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "benchmarks.grading_cost", "--out", str(out)], cwd=REPO,
                       env=_env(CUDA_VISIBLE_DEVICES=""), capture_output=True, text=True, timeout=300)
    msg = p.stdout + p.stderr
    assert p.returncode == gc.EXIT_NO_GPU == 2, f"exit {p.returncode}, expected 2:\n{msg}"
    for says in ("Nothing measured", "NVIDIA GPU", "No results were written", "python -m benchmarks.grading_cost"):
        assert says in msg, f"the refusal should say {says!r}; it said:\n{msg}"
    assert "Traceback" not in msg, msg
    assert not out.exists() or not any(out.iterdir()), f"wrote {list(out.iterdir())} without measuring anything"


def test_unknown_chapter_is_named_with_the_ones_there():
    p = subprocess.run([sys.executable, "-m", "benchmarks.grading_cost", "--chapters", "99_nowhere"], cwd=REPO,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "99_nowhere" in p.stderr and gc.chapters()[0] in p.stderr, p.stderr


# --- pure helpers ---------------------------------------------------------------------------------------

def test_chapters_are_the_exercise_folders():
    want = sorted(p.parent.name for p in (REPO / "exercises" / "source").glob("*/*.ipynb")
                  if p.stem == p.parent.name)
    assert gc.chapters() == want and want


def _cell(source, grade_id=None):
    meta = {"nbgrader": {"solution": True, "grade_id": grade_id}} if grade_id else {}
    return {"cell_type": "code", "metadata": meta, "source": source, "outputs": [], "execution_count": None}


def test_reference_notebook_takes_each_solution_from_the_source_by_grade_id():
    source = {"cells": [_cell("b solution", "b"), _cell("text"), _cell("a solution", "a")]}
    released = {"cells": [_cell("intro"), _cell("a stub", "a"), _cell("b stub", "b")]}
    nb = gc.reference_notebook(source, released)
    assert [c["source"] for c in nb["cells"]] == ["intro", "a solution", "b solution"]
    assert released["cells"][1]["source"] == "a stub", "the released notebook itself must stay as it was"
    with pytest.raises(ValueError, match="'c'.*generate the assignment again"):
        gc.reference_notebook(source, {"cells": [_cell("c stub", "c")]})


REPORT = {"points": 15.0, "max_points": 20.0,
          "exercises": [{"status": "passed"}, {"status": "too slow"}]}


@pytest.mark.parametrize("grade_rc,autograde_rc,gradebook,status", [
    (0, 0, (15.0, 20.0), "ok"),
    (3, 0, (0.0, 20.0), "needs a GPU"),
    (1, 0, (0.0, 20.0), "grade failed (exit 1)"),
    (None, None, None, "grade stopped at the budget"),
    (0, None, None, "autograde stopped at the budget"),
    (0, 1, None, "autograde failed (exit 1)"),
])
def test_make_row_status_follows_the_exit_codes(grade_rc, autograde_rc, gradebook, status):
    row = gc.make_row("01_first_kernel", 2, 12.345, grade_rc, REPORT, 30.06, autograde_rc, gradebook, log="L" * 5000)
    assert row["status"] == status
    assert (row["grade_s"], row["autograde_s"], row["points"], row["max_points"]) == (12.3, 30.1, 15.0, 20.0)
    assert row["statuses"] == {"passed": 1, "too slow": 1}
    assert ("log" in row) == (status != "ok") and len(row.get("log", "")) <= 3200
    assert (row["gradebook_points"], row["gradebook_max"]) == (gradebook or (None, None))


def test_make_row_without_autograde():
    row = gc.make_row("03_streams", 1, 4.0, 0, REPORT)
    assert row["status"] == "autograde not run" and row["autograde_s"] is None


@pytest.mark.parametrize("elapsed,budget,costs,start", [
    (0.0, None, [1e9], True), (10.0, 100.0, [], True), (60.0, 100.0, [30.0, 40.0], True),
    (61.0, 100.0, [30.0, 40.0], False), (101.0, 100.0, [], False)])
def test_should_start_leaves_room_for_the_dearest_chapter(elapsed, budget, costs, start):
    assert gc.should_start(elapsed, budget, costs) is start


class _FakeClock:
    """Stands in for the commands: `grade` takes GRADE_S, `autograde` AUTOGRADE_S on a clock of its own,
    and a command given less time than it takes is stopped there, as subprocess.run's timeout does."""

    def __init__(self, grade_s, autograde_s):
        self.now, self.cost = 0.0, {"grade": grade_s, "autograde": autograde_s}
        self.time = types.SimpleNamespace(monotonic=lambda: self.now)

    def run(self, cmd, cwd, env, timeout=None):
        cost = self.cost["grade" if "grade" in cmd else "autograde"]
        if "grade" in cmd:
            (cwd / "grade.json").write_text(json.dumps({"points": 1.0, "max_points": 1.0, "exercises": []}))
        if timeout is not None and timeout < cost:
            self.now += timeout
            return timeout, None, "stopped"
        self.now += cost
        return cost, 0, "Student kernel confined"


@pytest.mark.parametrize("budget,grade_s,autograde_s,statuses,left", [
    (None, 10, 20, ["ok", "ok", "ok"], []),
    (70, 10, 20, ["ok", "ok"], [2]),             # 0 + 30, 30 + 30 fit; 60 + 30 does not
    (45, 10, 40, ["autograde stopped at the budget"], [1, 2]),  # autograde gets the 35 s left
    (5, 10, 20, ["grade stopped at the budget"], [1, 2]),
])
def test_measure_keeps_to_the_budget(tmp_path, monkeypatch, budget, grade_s, autograde_s, statuses, left):
    names = gc.chapters()[:3]
    clock = _FakeClock(grade_s, autograde_s)

    def build(ch, work, env):
        (work / ch).mkdir()
        return work / ch
    monkeypatch.setattr(gc, "build_course", build)
    monkeypatch.setattr(gc, "_run", clock.run)
    monkeypatch.setattr(gc, "_gradebook_points", lambda course, ch: (1.0, 1.0))
    monkeypatch.setattr(gc, "time", clock.time)
    rows, not_run = gc.measure(names, budget, log=lambda *a: None, jobs=1)
    assert [r["status"] for r in rows] == statuses
    assert not_run == [names[i] for i in left]
    assert all(r["notebook_kernel"] == "confined" for r in rows if r["autograde_s"] == autograde_s)
    if budget is not None:
        assert clock.now <= budget + 1e-9, f"the commands ran until {clock.now} s, past the budget of {budget} s"


def test_merge_rows_replaces_measured_chapters_and_keeps_the_rest():
    old = [{"chapter": "02_b", "grade_s": 1}, {"chapter": "01_a", "grade_s": 2}]
    new = [{"chapter": "02_b", "grade_s": 9}, {"chapter": "03_c", "grade_s": 3}]
    assert gc.merge_rows(old, new) == [{"chapter": "01_a", "grade_s": 2}, {"chapter": "02_b", "grade_s": 9},
                                       {"chapter": "03_c", "grade_s": 3}]


def _result(rows, **kw):
    return {"device": {"name": "NVIDIA Test GPU", "driver": "555.1", "count": 1}, "date": "2026-11-25T00:00:00+00:00",
            "versions": {"cupy": "14.0", "nbgrader": "0.9.6", "python": "3.12.1"}, "rows": rows, **kw}


def test_markdown_has_the_docs_table_and_flags_what_is_off():
    good = gc.make_row("01_first_kernel", 2, 12.34, 0, {"points": 20.0, "max_points": 20.0, "exercises": []},
                       31.0, 0, (20.0, 20.0))
    short = gc.make_row("07_staged_gemm", 2, 20.0, 0, REPORT, 40.0, 0, (15.0, 20.0))
    good["notebook_kernel"], short["notebook_kernel"] = "confined", "unconfined"
    md = gc.to_markdown(_result([good, short], not_run=["08_tensor_cores"], budget_s=480))
    assert md.startswith("# Grading cost per notebook on NVIDIA Test GPU\n")
    assert "driver 555.1, CuPy 14.0, nbgrader 0.9.6" in md
    assert "| " + " | ".join(gc.COLUMNS) + " |" in md
    assert "| 01_first_kernel | 2 | 12.3 | 31.0 | 20/20 |" in md
    assert "| 07_staged_gemm | 2 | 20.0 | 40.0 | 15/20 |" in md
    flagged = " ".join(ln for ln in md.split("Not as expected", 1)[-1].splitlines() if ln.startswith("- "))
    assert "07_staged_gemm" in flagged and "01_first_kernel" not in flagged
    assert "Not measured yet (left out by --chapters or --budget-s): 08_tensor_cores" in md
    assert "confined (01_first_kernel); unconfined (07_staged_gemm)" in md
    short["notebook_kernel"] = "confined"
    assert "confined in every chapter" in gc.to_markdown(_result([good, short]))


def test_child_env_starts_this_python_as_the_notebook_kernel(tmp_path):
    """The kernel nbgrader starts is this same Python: the `python3` kernelspec jupyter_client finds."""
    env = gc.child_env(tmp_path)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    pytest.importorskip("jupyter_client")
    code = "from jupyter_client.kernelspec import KernelSpecManager as K; print(K().get_kernel_spec('python3').argv[0])"
    p = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == sys.executable, p.stdout + p.stderr


def _fake_gpu(monkeypatch):
    monkeypatch.setattr(gc, "_no_gpu_reason", lambda: None)
    monkeypatch.setattr(gc._record, "device", lambda: {"name": "Fake GPU (CPU run)", "count": 1, "driver": "-"})
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(__version__="not used"))


def test_main_names_what_the_budget_left_out_and_merges_rows(tmp_path, monkeypatch, capsys):
    """A run cut by --budget-s: exit 1, the chapters left and the command for them; a later run of those
    joins the record; a run that measured nothing writes nothing."""
    _fake_gpu(monkeypatch)
    a, b, c = gc.chapters()[:3]
    row = lambda ch: gc.make_row(ch, 1, 5.0, 0, {"points": 1.0, "max_points": 1.0, "exercises": []}, 9.0, 0, (1.0, 1.0))
    monkeypatch.setattr(gc, "measure", lambda names, budget: ([], list(names)))
    assert gc.main(["--chapters", a, "--out", str(tmp_path), "--budget-s", "10"]) == 1
    assert "nothing was written" in capsys.readouterr().err and not list(tmp_path.iterdir())
    monkeypatch.setattr(gc, "measure", lambda names, budget: ([row(names[0])], list(names[1:])))
    assert gc.main(["--chapters", a, b, c, "--out", str(tmp_path), "--budget-s", "10"]) == 1
    assert f"--chapters {b} {c}" in capsys.readouterr().err
    assert gc.main(["--chapters", b, c, "--out", str(tmp_path)]) == 1
    assert gc.main(["--chapters", c, "--out", str(tmp_path)]) == 0
    [path] = tmp_path.glob("*.json")
    rec = json.loads(path.read_text())
    assert [r["chapter"] for r in rec["rows"]] == [a, b, c]
    assert rec["not_run"] == [ch for ch in gc.chapters() if ch not in (a, b, c)]


# --- the whole pipeline ---------------------------------------------------------------------------------

@pytest.mark.both_tiers
@pytest.mark.slow
def test_one_chapter_end_to_end(tmp_path, monkeypatch):
    """One chapter through the real commands into a record. Without a GPU the GPU check and device are
    faked: the course, the submission, both commands and the gradebook are real, and the grader says
    'needs a GPU'. With one (-m gpu) nothing is faked and the reference must get full points."""
    pytest.importorskip("nbgrader")
    import autograder
    with_gpu = gpu_status()[0]
    chapter = gc.chapters()[0]
    spec = autograder.load_chapter(chapter)
    if not with_gpu:
        _fake_gpu(monkeypatch)
    out = tmp_path / "results"
    rc = gc.main(["--chapters", chapter, "--out", str(out)])
    files = sorted(p.name for p in out.iterdir())
    stem = f"{gc.STEM}-{'fake-gpu-cpu-run' if not with_gpu else gc._record.slug(gc._record.device()['name'])}"
    assert files == [f"{stem}.json", f"{stem}.md"], files
    rec = json.loads((out / f"{stem}.json").read_text())
    [row] = rec["rows"]
    fail_on([
        row["chapter"] != chapter and f"chapter {row['chapter']}",
        row["exercises"] != len(spec) and f"{row['exercises']} exercises, the spec has {len(spec)}",
        row["max_points"] != sum(e.max_points for e in spec) and f"max points {row['max_points']}",
        not (row["gradebook_max"] or 0) >= row["max_points"] and f"gradebook max {row['gradebook_max']}",
        not row["grade_s"] > 0 and f"grade_s {row['grade_s']}",
        not (row["autograde_s"] or 0) > 0 and f"autograde_s {row['autograde_s']}",
        row["notebook_kernel"] not in ("confined", "unconfined") and "the notebook's kernel never started",
        f"| {chapter} | {len(spec)} |" not in (out / f"{stem}.md").read_text() and "no table row in the .md",
    ], f"the recorded row: {json.dumps(row, indent=1)}")
    if with_gpu:
        assert rc == 0 and row["status"] == "ok", row
        assert row["points"] == row["max_points"] and row["gradebook_points"] >= row["points"], (
            f"the reference solutions got {row['points']}/{row['max_points']} from the grader and "
            f"{row['gradebook_points']} in the gradebook: {row['statuses']}")
    else:
        assert rc == 1 and row["status"] == "needs a GPU", row
        assert row["statuses"] == {"needs a GPU": len(spec)} and row["gradebook_points"] == 0.0, row


# --- docs/INSTRUCTOR.md against the recordings ----------------------------------------------------------

def _section() -> str:
    text = INSTRUCTOR.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/INSTRUCTOR.md has no section {SECTION!r}"
    return re.split(r"\n## ", text.split(SECTION, 1)[1], maxsplit=1)[0]


def _table(section: str) -> dict:
    """chapter -> {column header: cell} of the section's table with gc.COLUMNS as its header."""
    lines = [ln.strip() for ln in section.splitlines() if ln.strip().startswith("|")]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    if not cells or tuple(cells[0]) != gc.COLUMNS:
        return {}
    return {c[0]: dict(zip(gc.COLUMNS, c)) for c in cells[2:]}


def test_instructor_section_names_the_command_and_where_results_land():
    section = _section()
    for says in ("python -m benchmarks.grading_cost", f"benchmarks/results/{gc.STEM}-", "--budget-s", "exits 2"):
        assert says in section, f"the section {SECTION!r} should say {says!r}"


def test_instructor_quotes_the_recorded_grading_cost_of_every_chapter():
    records = sorted(RESULTS.glob(f"{gc.STEM}-*.json"))
    if not records:
        pytest.skip(f"no benchmarks/results/{gc.STEM}-*.json recorded yet: run `python -m benchmarks.grading_cost` "
                    "on a GPU machine, then paste its table into docs/INSTRUCTOR.md")
    section = _section()
    quoted = [r for r in records if r.with_suffix(".md").name in section]
    if not quoted:
        pytest.fail(f"{SECTION!r} names none of {[r.with_suffix('.md').name for r in records]}: say which "
                    "recording its table comes from", pytrace=False)
    table = _table(section)
    problems = [PLACEHOLDER in section and f"the section still says {PLACEHOLDER!r}: replace it with the table"]
    for path in quoted:
        rec = json.loads(path.read_text())
        problems.append(rec["device"]["name"] not in section and f"the GPU {rec['device']['name']!r} is not named")
        rows = {r["chapter"]: r for r in rec["rows"]}
        for ch in gc.chapters():
            r = rows.get(ch)
            if r is None or r["status"] != "ok":
                # a chapter may wait for its measurement, but the docs must say so, not skip it silently
                said = re.search(rf"Chapter {ch[:2]} is not measured yet", section)
                problems.append(not said and f"{path.name} has no good row for {ch} ({r and r['status']}): run "
                                f"`python -m benchmarks.grading_cost --chapters {ch}` on that GPU, or say "
                                f"'Chapter {ch[:2]} is not measured yet' and why")
                continue
            got = table.get(ch)
            if got is None:
                problems.append(f"no table row for {ch} (header: | {' | '.join(gc.COLUMNS)} |)")
                continue
            want = {"kernel exercises": str(r["exercises"]), "points": f"{r['points']:g}/{r['max_points']:g}"}
            problems += [f"{ch}: {k} is {got[k]!r}, the recording says {v!r}" for k, v in want.items() if got[k] != v]
            for col, key in (("grade (s)", "grade_s"), ("autograde (s)", "autograde_s")):
                if not re.fullmatch(r"\d+(\.\d+)?", got[col]) or not quote_close(got[col], r[key]):
                    problems.append(f"{ch}: {col} is {got[col]!r}, the recording says {r[key]}")
    fail_on(problems, f"docs/INSTRUCTOR.md {SECTION!r} against {', '.join(p.name for p in quoted)}:")


def test_the_refusal_names_the_probes_reason(monkeypatch):
    """Is the reason printed the GPU probe's own phrase (NoGPUError.reason), not a guess parsed from prose?"""
    monkeypatch.setattr("course._env._probe", lambda: (None, "no NVIDIA driver (test)"))
    assert gc._no_gpu_reason() == "no NVIDIA driver (test)"
