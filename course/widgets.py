"""Interactive sweeps: sliders over launch parameters, a live plot of the measured metric.

On a GPU every point is measured (with `benchmark` inside the user's ``run``); on a CPU-only machine
the sweep replays results recorded on a real GPU and says so, so the lesson still shows real numbers.
"""
from __future__ import annotations

import itertools
import json
import os
import statistics
from pathlib import Path

__all__ = ["RECORD_REPEATS", "Sweep", "sweep"]


RECORD_REPEATS = 3  # runs per point of a recording; the median is recorded


def _key(values: dict) -> str:
    return json.dumps({k: values[k] for k in sorted(values)}, sort_keys=True, default=str)


class Sweep:
    """A parameter sweep: ``run(**values) -> metric`` over the grid ``params``.

    Parameters
    ----------
    run : callable
        Returns the metric (e.g. GB/s) for one combination; may raise (ValueError, LaunchError...) for
        an invalid combination, which is then shown as invalid with the reason instead of crashing.
    params : dict
        name -> list of values. The first name (or ``x``) is the plot's x axis; the others get sliders.
    metric : str
        Axis label of the measured value, e.g. "GB/s".
    name : str, optional
        Names the recording, benchmarks/results/sweeps/<name>.json, replayed without a GPU.
    """

    def __init__(self, run, params: dict, *, metric: str, x: str | None = None, name: str | None = None,
                 recorded: str | os.PathLike | None = None, title: str | None = None, logx: bool = False,
                 live: bool | None = None):
        if not params or any(len(v) == 0 for v in params.values()):
            raise ValueError("`params` should map each parameter name to a non-empty list of values")
        self.run = run
        self.params = {k: list(v) for k, v in params.items()}
        self.x = x or next(iter(params))
        if self.x not in self.params:
            raise ValueError(f"`x` should be one of {list(self.params)}; got {self.x!r}")
        self.metric, self.name, self.title, self.logx = metric, name, title, logx
        self.results: dict = {}  # key -> (value or None, note)
        self.samples: dict = {}  # key -> every run of a recorded point (the value is their median)
        self.recorded_on = None
        from ._ceilings import results_dir
        self.recorded = Path(recorded) if recorded else (
            results_dir() / "sweeps" / f"{name}.json" if name else None)
        from ._env import gpu_available
        # ``live=False`` replays where this machine's GPU cannot measure the sweep (one GPU, a sweep over several)
        self.live = gpu_available() if live is None else bool(live) and gpu_available()
        if not self.live:
            self._load()

    # -- data ---------------------------------------------------------------------------------
    def _load(self) -> None:
        if self.recorded is None or not self.recorded.exists():
            return
        data = json.loads(self.recorded.read_text())
        self.recorded_on = data.get("gpu", "another GPU")
        for p in data.get("points", []):
            self.results[_key(p["values"])] = (p.get("value"), p.get("note", ""))

    def measure(self, **values):
        """The metric for one combination (measured once, then remembered); None if invalid."""
        k = _key(values)
        if k not in self.results:
            if not self.live:
                return None
            self._measure(k, values, 1)
        return self.results[k][0]

    def _measure(self, k: str, values: dict, repeats: int) -> None:
        """Run one combination ``repeats`` times and keep the median: a recording replayed for years must
        not keep a one-off glitch (a clock change, another process) as if the hardware did it."""
        got = []
        note = ""
        for _ in range(repeats):
            try:
                r = self.run(**values)
            except Exception as exc:  # an invalid choice is information, not a crash
                self.results[k] = (None, f"{type(exc).__name__}: {exc}".splitlines()[0])
                return
            # run may return (metric, note): the note (registers, occupancy...) is shown with the plot
            v, note = (r if isinstance(r, tuple) else (r, ""))
            got.append(float(v))
        self.results[k] = (float(statistics.median(got)), str(note))
        if repeats > 1:
            self.samples[k] = got

    def note(self, **values) -> str:
        return self.results.get(_key(values), (None, "not recorded"))[1]

    def curve(self, progress: bool = True, **fixed):
        """[(x value, metric or None)] for the other parameters held at ``fixed``.

        Points not measured yet are measured now, with a progress bar when there are several.
        """
        out = []
        xs = self.params[self.x]
        todo = [xv for xv in xs if _key(dict(fixed, **{self.x: xv})) not in self.results]
        if progress and self.live and len(todo) > 1:
            try:
                from tqdm.auto import tqdm
                for xv in tqdm(todo, desc=f"measuring {self.x}", leave=False):
                    self.measure(**dict(fixed, **{self.x: xv}))
            except ImportError:
                pass
        for xv in xs:
            vals = dict(fixed, **{self.x: xv})
            out.append((xv, self.measure(**vals)))
        return out

    def measure_all(self, progress: bool = True, repeats: int = 1) -> None:
        """Measure every combination not measured yet (what the sliders need to replay); with ``repeats``
        above 1 (a recording) every combination again, each the median of that many runs."""
        if not self.live:
            return
        names = list(self.params)
        combos = list(itertools.product(*self.params.values()))
        it = combos
        if progress:
            try:
                from tqdm.auto import tqdm
                it = tqdm(combos, desc=self.name or "sweep", leave=False)
            except ImportError:
                pass
        for c in it:
            values = dict(zip(names, c))
            k = _key(values)
            if repeats > 1 or k not in self.results:
                self._measure(k, values, max(1, int(repeats)))

    def save(self, path=None) -> Path:
        """Write the measured points (with the GPU's name) for CPU-only replay."""
        from ._env import device_info
        path = Path(path or self.recorded)
        path.parent.mkdir(parents=True, exist_ok=True)
        points = [{"values": json.loads(k), "value": v, "note": n,
                   **({"samples": self.samples[k]} if k in self.samples else {})} for k, (v, n) in self.results.items()]
        path.write_text(json.dumps({"name": self.name, "gpu": device_info().name, "metric": self.metric,
                                    "params": self.params, "points": points}, indent=1, default=str))
        return path

    # -- display ------------------------------------------------------------------------------
    def _defaults(self) -> dict:
        return {k: v[len(v) // 2] for k, v in self.params.items() if k != self.x}

    def plot(self, ax=None, **fixed):
        import matplotlib.pyplot as plt
        fixed = {**self._defaults(), **fixed}
        if ax is None:
            _fig, ax = plt.subplots(figsize=(7, 4))
        # no progress bar while redrawing: a bar displayed and closed inside a widget's output area
        # leaves "model not found" in JupyterLab and a blank figure (seen on the GPU browser test);
        # measure_all() shows one when the points are measured up front
        pts = self.curve(progress=False, **fixed)
        xs = [p[0] for p in pts if p[1] is not None]
        ys = [p[1] for p in pts if p[1] is not None]
        ax.plot(xs, ys, marker="o")
        bad = [p[0] for p in pts if p[1] is None]
        for xv in bad:
            ax.axvline(xv, color="red", alpha=0.2)
        if self.logx:
            ax.set_xscale("log", base=2)
        ax.set_xlabel(self.x)
        ax.set_ylabel(self.metric)
        where = "measured here" if self.live else (
            f"recorded on {self.recorded_on} (no GPU here)" if self.recorded_on else "no GPU and no recording")
        fixed_txt = ", ".join(f"{k}={v}" for k, v in fixed.items())
        ax.set_title((self.title or self.name or "sweep") + (f" [{fixed_txt}]" if fixed_txt else "")
                     + f"\n{where}", fontsize=10)
        ax.grid(True, alpha=0.3)
        notes = [f"{self.x}={xv}: {self.note(**dict(fixed, **{self.x: xv}))}" for xv in bad]
        return ax, notes

    def plot_against_model(self, model, *, fixed=None, measured_label="measured", model_label="model",
                           xlabel=None, ylabel=None, title="", logx=False, ax=None):
        """The measured (or recorded) curve at ``fixed`` and a model's prediction of it.

        ``model(x, base)`` predicts the metric at x from ``base``, the measured value at x = 1 (or at the
        first x). Returns the axes, or None with one sentence when there is nothing to draw.
        """
        import matplotlib.pyplot as plt
        pts = [(x, v) for x, v in self.curve(progress=False, **(fixed or {})) if v is not None]
        if not pts:
            print("[no GPU] No recording of this sweep to draw; on a GPU this cell measures it.")
            return None
        if ax is None:
            _fig, ax = plt.subplots(figsize=(8, 4))
        xs, ys = zip(*pts)
        ax.plot(xs, ys, marker="o", label=measured_label)
        base = dict(pts).get(1, ys[0])
        ax.plot(xs, [model(x, base) for x in xs], ls="--", color="gray", marker=".", label=model_label)
        if logx:
            ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(xlabel or self.x)
        ax.set_ylabel(ylabel or self.metric)
        where = "measured here" if self.live else f"recorded on {self.recorded_on}"
        ax.set_title(f"{title}: {where}" if title else where, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        return ax

    def widget(self):
        """An ipywidgets box: one slider per non-x parameter and the live plot."""
        import ipywidgets as W
        import matplotlib.pyplot as plt
        out = W.Output()
        sliders = {k: W.SelectionSlider(options=v, value=v[len(v) // 2], description=k,
                                        continuous_update=False)
                   for k, v in self.params.items() if k != self.x}

        def redraw(*_):
            with out:
                out.clear_output(wait=True)
                _ax, notes = self.plot(**{k: s.value for k, s in sliders.items()})
                plt.show()
                for n in notes:
                    print("invalid:", n)
                fixed = {k: s.value for k, s in sliders.items()}
                for xv in self.params[self.x]:
                    vals = dict(fixed, **{self.x: xv})
                    if self.results.get(_key(vals), (None, ""))[0] is not None and self.note(**vals):
                        print(f"{self.x}={xv}: {self.note(**vals)}")
        for s in sliders.values():
            s.observe(redraw, names="value")
        redraw()
        return W.VBox([*sliders.values(), out])

    def _ipython_display_(self):
        from IPython.display import display
        if not self.live and not self.results:
            from ._env import gpu_available
            tag, gpu = ("[not measured here]", "on the GPUs it needs") if gpu_available() else ("[no GPU]", "on a GPU")
            print(f"{tag} This sweep measures {self.metric} {gpu}; no recording of it ({self.recorded}) is available "
                  "to replay here.")
            return
        try:
            display(self.widget())
        except ImportError:  # no ipywidgets: a static plot of the default slice
            import matplotlib.pyplot as plt
            self.plot()
            plt.show()


def sweep(run, params: dict, *, metric: str, x: str | None = None, name: str | None = None,
          recorded=None, title: str | None = None, logx: bool = False, record: bool | None = None,
          live: bool | None = None) -> Sweep:
    """Build a `Sweep`; display it as the cell's last expression to get the sliders.

    With ``record=True`` (or the environment variable COURSE_RECORD_SWEEPS=1) and a GPU, every
    combination is measured and saved for CPU-only replay.
    """
    s = Sweep(run, params, metric=metric, x=x, name=name, recorded=recorded, title=title, logx=logx, live=live)
    if record is None:
        from .profile import recording_run
        record = recording_run()
    if record and s.live and s.recorded is not None:
        s.measure_all(repeats=RECORD_REPEATS)
        s.save()
    return s
