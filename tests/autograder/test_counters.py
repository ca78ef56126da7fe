"""The grader's counter checks (autograder/counters.py) on the CPU, through a stand-in `ncu` that plays both
the profiler and the profiled child: the rows it writes to its log file decide, what the profiled process
prints does not; a refused permission or a missing ncu is a note; a hang or a different output under the
profiler fails the check. The real profile of chapter 05's kernels runs in test_techniques_gpu.py."""
import json
import pickle
import subprocess
import sys

import pytest

from ag_helpers import ROOT
from autograder import counters, get_exercise

LD, ST, ILD, IST = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
                    "smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum")
HEAD = '"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"'

FAKE_NCU = r'''#!{python}
import json, os, pickle, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_ARGS"], "w") as f:
    json.dump(args, f)
log = args[args.index("--log-file") + 1]
task = pickle.load(open(args[-1], "rb"))
if os.environ.get("FAKE_LAUNCHED", "1") == "1":   # the child reached its launches
    open(task["marker"], "w").close()
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
# what a kernel's printf would show if the grader read the profiled process's output: zero conflicts
print({head!r})
for m in json.loads(os.environ["FAKE_LOG_ROWS"]):
    print('"0","transpose","Command line profiler metrics","%s","","0"' % m)
with open(log, "w") as f:
    f.write(os.environ.get("FAKE_LOG_HEAD", {head!r}) + "\n")
    for m, v in json.loads(os.environ["FAKE_LOG_ROWS"]).items():
        f.write('"0","transpose","Command line profiler metrics","%s","","%s"\n' % (m, v))
child = json.loads(os.environ.get("FAKE_CHILD", '{{"status": "ok"}}'))
if child is not None:
    open(task["verdict_file"], "w").write(json.dumps(child))
'''


@pytest.fixture
def ncu(tmp_path, monkeypatch):
    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU.format(python=sys.executable, head=HEAD))
    exe.chmod(0o755)
    monkeypatch.setenv("FAKE_ARGS", str(tmp_path / "args.json"))
    monkeypatch.setenv("FAKE_LOG_ROWS", json.dumps({LD: 31000, ST: 0, ILD: 1000, IST: 1000}))
    return str(exe)


def measure(ncu, tmp_path):
    ex = get_exercise("05_bank_conflicts", "transpose")
    private = tmp_path / "private"
    private.mkdir(exist_ok=True)
    (verdict,) = counters.measure(ex, {"lowered_names": {}}, {}, 7, str(private), 50 << 20, ncu=ncu)
    return verdict


def test_the_log_files_counts_decide_not_the_processs_output(ncu, tmp_path):
    """With 31 extra wavefronts per load in ncu's log file, does the check fail, although the profiled
    process printed rows claiming zero conflicts (the corpus attack forged_counters.cu)?"""
    v = measure(ncu, tmp_path)
    assert v.passed is False and "31,000 extra wavefronts" in v.message and "[32][33]" in v.message
    args = json.loads((tmp_path / "args.json").read_text())
    flags = dict(zip(args, args[1:]))
    assert flags["--clock-control"] == "none" and flags["--launch-count"] == "1" and flags["--kernel-name"] == "transpose"
    assert flags["--log-file"].endswith("ncu.csv") and args[-3:-1] == ["-m", "autograder.counters"]
    assert flags["--launch-skip"] == str(7 % 4)
    assert set(flags["--metrics"].split(",")) == {LD, ST, ILD, IST}


def test_conflict_free_counts_pass(ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LOG_ROWS", json.dumps({LD: 3, ST: 0, ILD: 1000, IST: 1000}))
    assert measure(ncu, tmp_path).passed is True


def test_refused_counters_are_a_note_not_a_failure(ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_LOG_ROWS", "{}")
    monkeypatch.setenv("FAKE_LOG_HEAD", "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    v = measure(ncu, tmp_path)
    assert v.passed is None and "ERR_NVGPUCTRPERM" in v.message and "administrator" in v.message


def test_no_ncu_is_a_note(tmp_path, monkeypatch):
    import course.ncu
    monkeypatch.setattr(course.ncu, "ncu_path", lambda: None)
    v = measure(None, tmp_path)
    assert v.passed is None and "not installed" in v.message


def test_a_kernel_that_does_not_finish_under_the_profiler_fails(ncu, tmp_path, monkeypatch):
    """A timeout after the child launched fails the check; one before it (ncu's start) is only a note."""
    monkeypatch.setattr(counters, "COUNTER_TIMEOUT_S", 1.0)
    monkeypatch.setenv("FAKE_SLEEP", "30")
    v = measure(ncu, tmp_path)
    assert v.passed is False and "had not finished" in v.message
    monkeypatch.setenv("FAKE_LAUNCHED", "0")
    v = measure(ncu, tmp_path)
    assert v.passed is None and "before your kernel ran" in v.message


def test_a_different_output_under_the_profiler_fails(ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CHILD", json.dumps({"status": "wrong", "message": "out: 5 of 67551 values wrong"}))
    v = measure(ncu, tmp_path)
    assert v.passed is False and "same output under the profiler" in v.message and "5 of 67551" in v.message


def test_a_grader_problem_in_the_child_is_a_note(ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CHILD", json.dumps({"status": "grader", "message": "the grader could not load it"}))
    v = measure(ncu, tmp_path)
    assert v.passed is None and "could not load it (a grader problem)" in v.message


def test_a_child_that_dies_after_launching_fails_and_one_before_is_a_note(ncu, tmp_path, monkeypatch):
    """No verdict after the launch (the kernel brought its process down under the profiler) fails the check;
    no verdict before it is the grader's problem, a note with ncu's words and no private paths."""
    monkeypatch.setenv("FAKE_CHILD", "null")
    v = measure(ncu, tmp_path)
    assert v.passed is False and "ended without finishing" in v.message
    monkeypatch.setenv("FAKE_LAUNCHED", "0")
    v = measure(ncu, tmp_path)
    assert v.passed is None and "before your kernel ran" in v.message and str(tmp_path) not in v.message


def test_the_profiled_launch_and_size_come_from_the_seed(ncu, tmp_path):
    """Is the profiled launch the last of 1 to 4 (--launch-skip from the seed), at a hidden size when one fits?"""
    ex = get_exercise("05_bank_conflicts", "transpose")
    private = tmp_path / "p"
    private.mkdir()
    hidden = [{"rows": 31, "cols": 65}, {"rows": 97, "cols": 33}]
    counters.measure(ex, {"lowered_names": {}}, {}, 10, str(private), 50 << 20, ncu=ncu, hidden=hidden)
    args = json.loads((tmp_path / "args.json").read_text())
    assert args[args.index("--launch-skip") + 1] == str(10 % 4)
    task = pickle.loads(next(private.glob("counters-*/task.pkl")).read_bytes())
    assert task["launches"] == 10 % 4 + 1 and task["sizes"] == {"rows": 97, "cols": 33}


def test_the_case_profiled_fits_the_cap():
    """Is the transpose profiled at its largest public case within the cap (its 8192 x 8192 speed size is
    512 MiB), and an exercise whose speed size fits profiled at that size?"""
    ex = get_exercise("05_bank_conflicts", "transpose")
    assert counters.pick_case(ex, 50 << 20) == {"rows": 33, "cols": 2047}
    assert counters.pick_case(ex, 50 << 20, [{"rows": 1 << 20, "cols": 1 << 10}]) == {"rows": 33, "cols": 2047}
    tiled = get_exercise("07_staged_gemm", "sgemm_tiled")       # 2048^3: three 16 MiB matrices
    assert counters.pick_case(tiled, 50 << 20) == {"m": 2048, "n": 2048, "k": 2048}


def test_counter_checks_are_the_spec_techniques_read_from_counters():
    assert counters.counter_checks(get_exercise("05_bank_conflicts", "transpose")) == ["no_bank_conflicts"]
    assert counters.counter_checks(get_exercise("08_tensor_cores", "mma_gemm")) == []


def test_the_child_keeps_its_output_away_and_always_writes_a_verdict(tmp_path):
    """Does the profiled child send its stdout and stderr (a kernel's printf) to its own file, and write a
    verdict even when it cannot run (here: a chapter that does not exist, which is the grader's problem)?"""
    task = {"chapter": "99_none", "exercise": "x", "program": {}, "launch": {}, "seed": 1, "sizes": {},
            "verdict_file": str(tmp_path / "v.json"), "child_out": str(tmp_path / "out.txt"),
            "marker": str(tmp_path / "launching")}
    (tmp_path / "t.pkl").write_bytes(pickle.dumps(task))
    p = subprocess.run([sys.executable, "-c", "import sys; from autograder import counters; print('before'); "
                        "sys.stdout.flush(); counters.main([sys.argv[1]]); print('after')", str(tmp_path / "t.pkl")],
                       capture_output=True, text=True, cwd=str(ROOT), timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "before\n"                      # nothing printed after the redirection reaches stdout
    assert "after" in (tmp_path / "out.txt").read_text()
    v = json.loads((tmp_path / "v.json").read_text())
    assert v["status"] == "grader" and "could not load the exercise" in v["message"]   # the grader's problem
