"""The kernels chapters 01-03 show in `%%cuda` cells are the ones their helpers and benchmarks run."""
from __future__ import annotations

import json

import pytest

from repo_helpers import cuda_cells, import_course


@pytest.mark.parametrize("stem,module,names", [
    ("01_first_kernel", "ch01", ("VEC_ADD_SRC", "WAVE_ADD_SRC")),
    ("02_memory_transfer", "ch02", ("SCALE_SRC",)),
    ("03_streams", "ch03", ("SPIN_SRC", "WORK_SRC")),
])
def test_cells_show_the_kernels_the_helpers_run(stem, module, names):
    """Does each chapter show, verbatim in a %%cuda cell, every kernel source its helpers compile?"""
    import_course()
    import importlib
    mod = importlib.import_module(f"course.lessons.{module}")
    cells = [c.strip() for c in cuda_cells(stem)]
    for name in names:
        assert getattr(mod, name).strip() in cells, f"{stem} has no %%cuda cell equal to {module}.{name}"


def test_wave_sweep_replays_a_recording(tmp_path, monkeypatch):
    """Without a GPU, does the staircase plot draw a recorded sweep, and say so in its title?"""
    import_course()
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import course
    import course.widgets
    from course.lessons import ch01
    monkeypatch.setattr("course._env.gpu_available", lambda: False)
    params = {"waves": [0.5, 1.0, 1.5], "block": [256, 1024], "rounds": [0, 512]}
    points = [{"values": {"waves": w, "block": b, "rounds": r}, "value": 10.0 * (1 + int(w > 1)), "note": ""}
              for w in params["waves"] for b in params["block"] for r in params["rounds"]]
    rec = tmp_path / "waves.json"
    rec.write_text(json.dumps({"name": "w", "gpu": "Test GPU", "metric": "us", "params": params,
                               "points": points}))
    s = course.widgets.sweep(ch01.wave_runner(), params, metric="us", recorded=rec)
    ax = ch01.plot_wave_sweep(s, block=1024)
    assert ax is not None and "Test GPU" in ax.get_title()
    assert [len(line.get_xdata()) for line in ax.get_lines() if line.get_label().startswith(("memory", "512"))] \
        == [3, 3]
    plt.close("all")
