"""Sweeps (live with a fake run, and replayed from a recording) and plots, on the CPU."""
import json

import matplotlib

matplotlib.use("Agg")
import pytest  # noqa: E402

from course import _env, plots, widgets  # noqa: E402
from course._ceilings import Ceilings  # noqa: E402


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(_env, "_probe", lambda: (None, "no driver"))


def test_replay_from_recording(tmp_path, no_gpu):
    """Without a GPU, does a sweep replay recorded points and say where they were measured?"""
    rec = tmp_path / "s.json"
    rec.write_text(json.dumps({"gpu": "NVIDIA H100", "points": [
        {"values": {"block": 128, "grid": 1}, "value": 10.0},
        {"values": {"block": 256, "grid": 1}, "value": 20.0},
        {"values": {"block": 2048, "grid": 1}, "value": None, "note": "LaunchError: too many threads"}]}))
    s = widgets.sweep(lambda **v: 1 / 0, {"block": [128, 256, 2048], "grid": [1]}, metric="GB/s", recorded=rec)
    assert not s.live and s.recorded_on == "NVIDIA H100"
    assert s.curve(grid=1) == [(128, 10.0), (256, 20.0), (2048, None)]
    s.measure_all(progress=False, repeats=3)  # without a GPU: nothing measured, nothing replayed lost
    assert s.curve(grid=1) == [(128, 10.0), (256, 20.0), (2048, None)]
    ax, notes = s.plot()
    assert "recorded on NVIDIA H100" in ax.get_title()
    assert notes == ["block=2048: LaunchError: too many threads"]


def test_live_sweep_measures_once_and_records_invalid(tmp_path, no_gpu):
    """With a (fake) GPU, is each point measured once, and an invalid choice noted, not raised?"""
    calls = []

    def run(block, tile):
        calls.append((block, tile))
        if block > 1024:
            raise ValueError("block too large")
        return block * tile

    s = widgets.Sweep(run, {"block": [256, 2048], "tile": [1, 2]}, metric="x", name="t",
                      recorded=tmp_path / "t.json")
    s.live = True
    assert s.curve(tile=2) == [(256, 512.0), (2048, None)]
    s.curve(tile=2)
    assert calls == [(256, 2), (2048, 2)]
    assert "block too large" in s.note(block=2048, tile=2)
    s.measure_all(progress=False)
    assert len(s.results) == 4
    assert calls.count((256, 2)) == 1  # a point measured already is not measured again


def test_sweep_argument_errors():
    """Are empty params and an unknown x refused, naming the argument?"""
    with pytest.raises(ValueError, match="params"):
        widgets.Sweep(lambda: 0, {}, metric="x")
    with pytest.raises(ValueError, match="`x`"):
        widgets.Sweep(lambda: 0, {"a": [1]}, metric="x", x="b")


def test_roofline_and_timeline_draw():
    """Does the roofline draw one line per roof with the ridge point, and the timeline one bar per span?"""
    c = Ceilings("GPU", 3000.0, 50, 50, 50.0, 400.0, 700.0, 700.0, source="measured")
    ax = plots.roofline([("saxpy", 1 / 12, 0.25)], c)
    assert len(ax.lines) == 3
    assert any("ridge" in t.get_text() for t in ax.texts)
    ax = plots.timeline([("s0", "H2D", 0, 1), ("s0", "kernel", 1, 2), ("s1", "H2D", 1, 2)])
    assert len(ax.patches) == 3


def test_plot_against_model_uses_the_stride_1_base(tmp_path, no_gpu, capsys):
    """Does the model curve start from the measured value at x = 1, and is an empty sweep one sentence?"""
    rec = tmp_path / "m.json"
    rec.write_text(json.dumps({"gpu": "NVIDIA H100", "points": [
        {"values": {"stride": 1}, "value": 100.0}, {"values": {"stride": 2}, "value": 60.0}]}))
    s = widgets.Sweep(lambda **v: 0, {"stride": [1, 2]}, metric="GB/s", recorded=rec)
    ax = s.plot_against_model(lambda x, base: base / x, title="t")
    measured, model = ax.lines
    assert list(model.get_ydata()) == [100.0, 50.0] and list(measured.get_ydata()) == [100.0, 60.0]
    assert "recorded on NVIDIA H100" in ax.get_title()
    empty = widgets.Sweep(lambda **v: 0, {"stride": [1]}, metric="GB/s", recorded=tmp_path / "none.json")
    assert empty.plot_against_model(lambda x, b: b) is None
    assert capsys.readouterr().out.startswith("[no GPU]")


def test_print_table(capsys):
    """Does the shared table printer align columns, format floats and say when there are no rows?"""
    import course
    course.print_table([{"a": 1, "b": 0.000123}, {"a": 22, "b": 12.5}])
    course.print_table([])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "a  | b        " and out[2] == "1  | 1.230e-04" and out[3] == "22 | 12.5     "
    assert out[-1] == "(no rows)"


def test_run_may_return_a_note_with_the_metric(tmp_path, no_gpu, monkeypatch):
    """A run returning (metric, note) keeps both, and the note survives a save and a replay."""
    s = widgets.Sweep(lambda tile: (2.0 * tile, f"{tile} regs"), {"tile": [1, 2]}, metric="TFLOP/s",
                      recorded=tmp_path / "n.json")
    s.live = True
    assert s.curve() == [(1, 2.0), (2, 4.0)]
    assert s.note(tile=2) == "2 regs"
    monkeypatch.setattr(_env, "device_info", lambda: type("D", (), {"name": "Fake GPU"})())
    s.save()
    r = widgets.Sweep(lambda tile: 1 / 0, {"tile": [1, 2]}, metric="TFLOP/s", recorded=tmp_path / "n.json")
    assert r.curve() == [(1, 2.0), (2, 4.0)] and r.note(tile=1) == "1 regs"


def test_recording_keeps_the_median_of_repeats(tmp_path, no_gpu, monkeypatch):
    """Is a one-off glitch while recording (one slow run among three) left out of the recorded value, with
    every run kept in the file?"""
    runs = {}

    def run(waves, block):
        n = runs[(waves, block)] = runs.get((waves, block), 0) + 1
        return 100.0 * waves + (900.0 if (waves, block, n) == (2, 64, 2) else 0.0)

    monkeypatch.setattr(_env, "device_info", lambda: type("D", (), {"name": "Fake GPU"})())
    s = widgets.Sweep(run, {"waves": [1, 2, 3], "block": [64]}, metric="us", name="w", recorded=tmp_path / "w.json")
    s.live = True
    s.measure_all(progress=False, repeats=widgets.RECORD_REPEATS)
    assert s.curve(block=64, progress=False) == [(1, 100.0), (2, 200.0), (3, 300.0)]
    assert set(runs.values()) == {widgets.RECORD_REPEATS}
    saved = json.loads(s.save().read_text())
    glitch = next(p for p in saved["points"] if p["values"] == {"waves": 2, "block": 64})
    assert glitch["value"] == 200.0 and sorted(glitch["samples"]) == [200.0, 200.0, 1100.0]


def test_ceiling_label_overlaps_no_tick_or_bar_label(no_gpu):
    """Does the copy ceiling's label in chapter 04's recorded-results chart stay clear of the tick labels
    and of every bar's label (it sat on an x tick)?"""
    import matplotlib.pyplot as plt
    from course import results
    ax = results.plot_recorded("04_coalescing")
    assert ax is not None, "chapter 04 has recorded GB/s rows and a copy ceiling in benchmarks/results"
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    label = next(t for t in ax.texts if "device-to-device copy" in t.get_text())
    box = label.get_window_extent(r)
    others = [t.get_window_extent(r) for t in ax.texts if t is not label]
    others += [t.get_window_extent(r) for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
    assert others and not any(box.overlaps(o) for o in others)
    plt.close(fig)
