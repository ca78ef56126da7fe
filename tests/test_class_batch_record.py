"""benchmarks.class_batch's record, without a GPU: the batch itself faked, the file written through
benchmarks._record (its name, date and device), the runs of another chapter kept, --append adding repeats."""
import json

import pytest

pytest.importorskip("dask")


def _chapter(ch, elapsed):
    run = {"date": "2026-11-25T00:00:00+00:00", "chapter": ch, "students": 3, "per_gpu": 2, "elapsed_s": elapsed,
           "submissions_per_minute": round(180 / elapsed, 1), "per_minute_per_gpu": round(180 / elapsed, 1),
           "verdict_changes": 0, "lost": 0}
    return {"chapter": ch, "students": 3, "per_gpu": 2, "distinct_kernels": 2, "mix": {"right": 6},
            "serial": {}, "serial_s": 1.0, "runs": [run]}


def test_record_written_through_the_shared_writer(tmp_path, monkeypatch):
    from benchmarks import _record, class_batch
    monkeypatch.setattr(_record, "device", lambda: {"name": "Test GPU", "count": 1, "driver": "580.1"})
    times = iter([10.0, 20.0, 30.0])
    monkeypatch.setattr(class_batch, "run", lambda ch, *a, **k: _chapter(ch, next(times)))
    args = ["--students", "3", "--per-gpu", "2", "--repeats", "1", "--out", str(tmp_path)]
    assert class_batch.main(args + ["--chapter", "01_first_kernel", "--chapter", "07_staged_gemm"]) == 0
    path = tmp_path / "class-batch-test-gpu.json"
    first = json.loads(path.read_text())
    assert first["device"]["name"] == "Test GPU" and first["date"] and len(first["history"]) == 2
    assert "# Class-scale grading on Test GPU x1" in (tmp_path / "class-batch-test-gpu.md").read_text()
    assert class_batch.main(args + ["--chapter", "01_first_kernel", "--append", "--note", "again"]) == 0
    again = json.loads(path.read_text())
    by = {c["chapter"]: c for c in again["chapters"]}
    assert [r["elapsed_s"] for r in by["01_first_kernel"]["runs"]] == [10.0, 30.0]   # a repeat added
    assert [r["elapsed_s"] for r in by["07_staged_gemm"]["runs"]] == [20.0]          # the other chapter kept
    assert [h.get("note") for h in again["history"]] == ["", "", "again"]
