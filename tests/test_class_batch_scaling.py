"""benchmarks.class_batch --gpu-counts without a GPU: which GPUs each count gets (from CUDA_VISIBLE_DEVICES or
the host's), the counts skipped, speedup, efficiency and the 0.9 x linear goal, the record's markdown, and a
scaling run with the batch grader faked, to see the restriction reach it and the verdicts compared."""
import json
import os
import types

import pytest

pytest.importorskip("dask")

from benchmarks import _record, class_batch  # noqa: E402


def test_visible_for_takes_the_first_k_of_cuda_visible_devices_or_of_the_host():
    env = {"CUDA_VISIBLE_DEVICES": "3, 5,7"}
    assert class_batch.visible_for(1, env, 8) == ["3"]
    assert class_batch.visible_for(2, env, 8) == ["3", "5"]
    assert class_batch.visible_for(4, env, 8) is None          # only three visible, whatever the host has
    assert class_batch.visible_for(2, {}, 2) == ["0", "1"]
    assert class_batch.visible_for(3, {}, 2) is None
    uuids = {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb"}
    assert class_batch.visible_for(2, uuids, 2) == ["GPU-aaa", "GPU-bbb"]
    # CUDA sees nothing from an invalid entry on, so neither may the plan
    assert class_batch.visible_for(1, {"CUDA_VISIBLE_DEVICES": "1,-1,2"}, 4) == ["1"]
    assert class_batch.visible_for(2, {"CUDA_VISIBLE_DEVICES": "1,-1,2"}, 4) is None
    assert class_batch.visible_for(1, {"CUDA_VISIBLE_DEVICES": ""}, 4) is None


def test_counts_parsed_with_one_first_and_those_above_the_host_skipped():
    assert class_batch.parse_counts("4,2") == [1, 2, 4]
    assert class_batch.parse_counts("2, 1,2") == [1, 2]
    for bad in ("0,2", "two", ""):
        with pytest.raises(ValueError):
            class_batch.parse_counts(bad)
    runs, skipped = class_batch.plan_counts([1, 2, 4], {}, 2)
    assert runs == [(1, ["0"]), (2, ["0", "1"])] and skipped == [4]
    runs, skipped = class_batch.plan_counts([1, 2, 4], {"CUDA_VISIBLE_DEVICES": "6"}, 8)
    assert runs == [(1, ["6"])] and skipped == [2, 4]


def test_restricted_sets_cuda_visible_devices_and_puts_it_back():
    env = {"CUDA_VISIBLE_DEVICES": "2,3,4"}
    with class_batch.restricted(["2", "3"], env):
        assert env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3,4"
    env = {}
    with pytest.raises(RuntimeError):
        with class_batch.restricted(["0"], env):
            assert env["CUDA_VISIBLE_DEVICES"] == "0"
            raise RuntimeError("a failed run")
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_speedup_efficiency_and_the_goal():
    counts = class_batch.with_speedups([{"gpus": 1, "seconds": 100.0}, {"gpus": 2, "seconds": 52.0},
                                        {"gpus": 4, "seconds": 27.0}])
    assert [c["speedup"] for c in counts] == [1.0, 1.923, 3.704]
    assert [c["efficiency"] for c in counts] == [1.0, 0.962, 0.926]
    assert class_batch.goal_held(counts) is True
    exactly = class_batch.with_speedups([{"gpus": 1, "seconds": 90.0}, {"gpus": 2, "seconds": 50.0}])
    assert exactly[1]["efficiency"] == 0.9 and class_batch.goal_held(exactly) is True
    # one count short of the goal fails it, even when another count meets it
    short = class_batch.with_speedups([{"gpus": 1, "seconds": 100.0}, {"gpus": 2, "seconds": 51.0},
                                       {"gpus": 4, "seconds": 30.0}])
    assert short[2]["efficiency"] == 0.833 and class_batch.goal_held(short) is False
    assert class_batch.goal_held(class_batch.with_speedups([{"gpus": 1, "seconds": 100.0}])) is None


def _count(gpus, seconds, efficiency, vs_serial=0, vs_one=0, workers=None, lost=0):
    return {"gpus": gpus, "visible": ",".join(map(str, range(gpus))), "workers": workers or gpus, "per_gpu": 8,
            "seconds": seconds, "seconds_all": [seconds], "submissions_per_minute": round(9000 / seconds, 1),
            "per_minute_per_gpu": round(9000 / seconds / gpus, 1), "speedup": round(efficiency * gpus, 3),
            "efficiency": efficiency, "verdict_changes_vs_serial": vs_serial, "verdict_changes_vs_1gpu": vs_one,
            "lost": lost, "jobs": 300}


def _result(counts, skipped=()):
    chapter = {"chapter": "01_first_kernel", "students": 150, "per_gpu": None, "repeats": 1, "mix": {"right": 300},
               "distinct_kernels": 18, "serial_s": 40.0, "counts": counts, "date": "2026-11-26T00:00:00+00:00",
               "gpu_counts": "1,2,4", "visible_gpus": 2, "skipped": list(skipped), "note": ""}
    return {"device": {"name": "NVIDIA H200", "count": 2, "driver": "580.1"}, "date": "2026-11-26T00:00:00+00:00",
            "python": "3.12.3", "cupy": "14.2.0", "dask": "2026.8.0", "chapters": [chapter]}


def test_markdown_has_a_row_per_count_the_goal_and_what_was_skipped():
    md = class_batch.scaling_markdown(_result([_count(1, 165.0, 1.0), _count(2, 86.0, 0.959)], skipped=[4]))
    assert "of NVIDIA H200 x2" in md and "driver 580.1" in md and "CuPy 14.2.0" in md and "Dask 2026.8.0" in md
    assert "| 1 | 0 | 8 | 165.0 | 54.5 | 54.5 | 1.0 | 1.0 | 0 | reference | 0 |" in md
    assert "| 2 | 0,1 | 8 | 86.0 | 104.7 | 52.3 | 1.918 | 0.959 | 0 | 0 | 0 |" in md
    assert "efficiency >= 0.9 at every count): held." in md
    assert "Verdicts: the same on every count as on 1 GPU, none lost." in md
    assert "Not run: 4 GPUs (this host shows 2)." in md

    md = class_batch.scaling_markdown(_result([_count(1, 165.0, 1.0), _count(2, 100.0, 0.825, vs_one=2, workers=1)]))
    assert "NOT held (2 GPUs: 0.825)." in md
    assert "NOT the same as on 1 GPU (or rows lost) at 2 GPUs." in md
    assert "2 GPUs (1 workers)" in md and "Not run" not in md

    md = class_batch.scaling_markdown(_result([_count(1, 165.0, 1.0)], skipped=[2]))
    assert "not judged, no count above 1 GPU ran" in md


def _fake_serial(chapter, root, known=None):
    return {class_batch.kernel_key(ex, src): ("passed", 1.0)
            for (_, ex), src in class_batch._sources(chapter, root).items()}


def test_scale_restricts_each_run_and_compares_its_verdicts(tmp_path, monkeypatch):
    import autograder
    seen = []

    def fake_grade_class(root, *, chapters, results, gpus, per_gpu, progress, log):
        seen.append((os.environ.get("CUDA_VISIBLE_DEVICES"), list(gpus), results))
        rows = [{"student": s, "exercise": e, "status": "passed", "points": 1.0, "feedback": ""}
                for s, e in sorted(class_batch._sources(chapters[0], root))]
        if len(gpus) == 2:  # one verdict that only the 2-GPU run gives
            rows[0] = rows[0] | {"status": "failed", "points": 0.0}
        return types.SimpleNamespace(rows=rows, elapsed_s={1: 100.0, 2: 55.0}[len(gpus)], lost=0, per_gpu=4,
                                     gpus={f"tcp://w{g}": "Test GPU" for g in gpus})

    monkeypatch.setattr(autograder, "grade_class", fake_grade_class)
    monkeypatch.setattr(class_batch, "serial_verdicts", _fake_serial)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,6,7")
    runs, skipped = class_batch.plan_counts([1, 2, 4], os.environ, 8)
    out = class_batch.scale("01_first_kernel", 3, runs, 1, None, log=lambda *a: None)
    assert skipped == [4]
    assert [(env, gpus) for env, gpus, _ in seen] == [("5", ["5"]), ("5,6", ["5", "6"])]
    assert len({store for _, _, store in seen}) == 2           # a fresh store each run: nothing reused
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "5,6,7"
    one, two = out["counts"]
    assert (one["gpus"], one["verdict_changes_vs_serial"], one["verdict_changes_vs_1gpu"]) == (1, 0, 0)
    assert (two["gpus"], two["verdict_changes_vs_serial"], two["verdict_changes_vs_1gpu"]) == (2, 1, 1)
    assert two["changes_vs_1gpu"][0][2:] == ["('passed', 1.0)", "('failed', 0.0)"]
    assert (two["seconds"], two["speedup"], two["efficiency"]) == (55.0, 1.818, 0.909)
    assert (one["submissions_per_minute"], two["submissions_per_minute"], two["per_minute_per_gpu"]) == (1.8, 3.3, 1.6)
    assert class_batch.goal_held(out["counts"]) is True


def test_main_gpu_counts_writes_the_scaling_record_and_keeps_the_single_run_default(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_record, "device", lambda: {"name": "Test GPU", "count": 2, "driver": "580.1"})
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    asked = []

    def fake_scale(chapter, students, runs, repeats, per_gpu, known=None, log=print):
        asked.append((chapter, students, runs, repeats))
        counts = [{"gpus": k, "seconds": 100.0 / k} | {key: 0 for key in (
            "verdict_changes_vs_serial", "verdict_changes_vs_1gpu", "lost")} for k, _ in runs]
        for c in counts:
            c.update(visible="", workers=c["gpus"], per_gpu=8, seconds_all=[c["seconds"]],
                     submissions_per_minute=0, per_minute_per_gpu=0)
        return {"chapter": chapter, "students": students, "per_gpu": per_gpu, "repeats": repeats, "mix": {},
                "distinct_kernels": 1, "serial_s": 1.0, "counts": class_batch.with_speedups(counts)}

    monkeypatch.setattr(class_batch, "scale", fake_scale)
    args = ["--students", "3", "--out", str(tmp_path), "--gpu-counts", "1,2,4"]
    assert class_batch.main(args + ["--chapter", "07_staged_gemm"]) == 0
    assert class_batch.main(args + ["--chapter", "01_first_kernel"]) == 0
    assert asked[0] == ("07_staged_gemm", 3, [(1, ["0"]), (2, ["0", "1"])], 1)
    rec = json.loads((tmp_path / "class-scaling-test-gpu.json").read_text())
    assert [c["chapter"] for c in rec["chapters"]] == ["01_first_kernel", "07_staged_gemm"]  # the earlier kept
    assert rec["chapters"][0]["skipped"] == [4] and rec["device"]["name"] == "Test GPU" and rec["cupy"]
    assert "Not run: 4 GPUs (this host shows 2)." in (tmp_path / "class-scaling-test-gpu.md").read_text()
    assert not (tmp_path / "class-batch-test-gpu.json").exists()
    printed = capsys.readouterr().out
    assert "skipping 4 GPUs: this host shows 2" in printed and "01_first_kernel on 2 GPU(s): 50.0 s" in printed

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert class_batch.main(args) == 1                       # no GPU visible: nothing run, nothing recorded
    assert len(asked) == 2

    ran = []
    monkeypatch.setattr(class_batch, "run", lambda ch, students, repeats, *a, **k: ran.append(repeats) or {
        "chapter": ch, "students": students, "per_gpu": None, "distinct_kernels": 0, "mix": {}, "serial": {},
        "serial_s": 0.0, "runs": []})
    assert class_batch.main(["--students", "3", "--out", str(tmp_path), "--chapter", "01_first_kernel"]) == 0
    assert ran == [3]                                        # the single run's default repeats are unchanged
    with pytest.raises(SystemExit):
        class_batch.main(args + ["--append"])
