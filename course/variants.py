"""One harness for every chapter that compares numbered variants of a kernel.

The order never changes: every variant (and every anchor that can be checked) proves its output first,
on inputs chosen to expose a wrong answer; only then is anything timed, each with `course.benchmark`, on
the large inputs the variants were built with. One table, one plot::

    from course.variants import Variant, compare
    rows = compare([Variant("1 interleaved", lambda: k1(grid, 256, x, out, n), check=lambda: ...), ...],
                   anchors=[Variant("cupy.sum", lambda: x.sum(out=out[0]))], work=4 * n, unit="GB/s")
    rows.plot()

The rows are plain dicts (``name``, ``about``, ``ms``, ``spread``, ``rate``, ``unit``, ``anchor``,
``of_anchor``), so the benchmark suite records the very numbers the lesson prints.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from ._errors import CheckError

__all__ = ["Variant", "Comparison", "compare", "rate_of", "UNITS"]

UNITS = {"GB/s": "gbps", "TFLOP/s": "tflops", "ms": None}


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of a comparison.

    ``launch()`` enqueues one timed run on the current CuPy stream (its inputs already bound);
    ``check()`` runs it on checking inputs and returns a truthy value (a `course.CheckResult` or a bool)
    when the output is right, or raises `course.CheckError`; ``work`` is the bytes (GB/s) or FLOPs
    (TFLOP/s) of one launch where it differs from `compare`'s; ``anchor`` names the anchor row this
    variant is a fraction of where it is not the first anchor (a BF16 kernel against cuBLAS BF16, say).
    """

    name: str
    launch: Callable[[], object]
    check: Callable[[], object] | None = None
    about: str = ""
    work: float | None = None
    anchor: str | None = None


def _check(v: Variant, role: str) -> None:
    try:
        ok = v.check()
    except CheckError as exc:
        raise CheckError(f"{role} {v.name!r} is wrong, so nothing was timed: {exc}") from None
    if not ok:
        detail = getattr(ok, "message", "") or "its check returned False"
        raise CheckError(f"{role} {v.name!r} is wrong, so nothing was timed: {detail}")


def rate_of(result, work: float | None, unit: str) -> float | None:
    """GB/s or TFLOP/s of a `course.BenchResult` for ``work`` bytes or FLOPs per launch (None for "ms")."""
    if unit not in UNITS:
        raise ValueError(f"`unit` should be one of {', '.join(UNITS)}; got {unit!r}")
    how = UNITS[unit]
    return None if how is None or not work else getattr(result, how)(work)


class Comparison(list):
    """The rows of `compare` (a list of dicts) that can print themselves as a table and draw one plot."""

    title: str = ""
    unit: str = "GB/s"

    def table(self) -> list:
        """The rows as `course.print_table` prints them."""
        out = []
        rates, anchored, about = (any(x[k] for x in self) for k in ("rate", "anchor", "about"))
        for r in self:
            row = {"variant": r["name"], "ms": f"{r['ms']:.3f}", "spread": f"±{100 * r['spread']:.1f}%"}
            if rates:
                row[self.unit] = "" if r["rate"] is None else f"{r['rate']:.4g}"
            if anchored:
                row["vs anchor"] = "" if r["of_anchor"] is None else f"{r['of_anchor']:.3g}x {r['anchor']}"
            if about:
                row["what it changes"] = r["about"]
            out.append(row)
        return out

    def show(self) -> None:
        from ._table import print_table
        if self.title:
            print(self.title)
        print_table(self.table())

    def plot(self, ax=None, *, title: str | None = None):
        """Horizontal bars of each row's rate (or time), labelled with its fraction of its anchor."""
        import matplotlib.pyplot as plt
        if ax is None:
            _fig, ax = plt.subplots(figsize=(8, 0.45 * len(self) + 1.4))
        use_rate = all(r["rate"] is not None for r in self)
        vals = [r["rate"] if use_rate else r["ms"] for r in self]
        colors = ["0.6" if r.get("is_anchor") else "tab:blue" for r in self]
        ax.barh(range(len(self)), vals, color=colors)
        for i, r in enumerate(self):
            label = f" {vals[i]:.3g}" + (f" ({r['of_anchor']:.3g}x {r['anchor']})" if r["of_anchor"] is not None
                                         and not r.get("is_anchor") else "")
            ax.text(vals[i], i, label, va="center", fontsize=8)
        ax.set_yticks(range(len(self)), [r["name"] for r in self], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(self.unit if use_rate else "ms (median)")
        ax.set_xlim(0, max(vals, default=1) * 1.45)
        ax.set_title(title if title is not None else self.title, fontsize=10)
        ax.grid(True, axis="x", alpha=0.3)
        return ax


def compare(variants, *, anchors=(), work: float | None = None, unit: str = "GB/s", title: str = "",
            budget_s: float = 1.0, max_samples: int = 100, verbose: bool = True, progress: bool | None = None,
            **bench) -> Comparison:
    """Check every variant (and every anchor with a check), then time anchors and variants.

    Parameters
    ----------
    variants, anchors : sequences of `Variant`
        Anchors are what the variants are measured against in the same run (cupy.sum, cuBLAS, a copy);
        a variant's ratio is ``its rate / its anchor's rate`` (or the time ratio for unit "ms").
    work : bytes (unit "GB/s") or FLOPs (unit "TFLOP/s") of one launch, unless a Variant sets its own.
    progress : a progress bar while timing; default: in a notebook only (not in the benchmark suite's log).
    bench : passed to `course.benchmark` (warmup, flush_l2, ...).

    Raises `course.CheckError` naming the first wrong variant; nothing is timed then.
    """
    from ._timing import benchmark
    variants, anchors = list(variants), list(anchors)
    rate_of(None, None, unit)  # a bad unit fails before any work
    names = [v.name for v in anchors + variants]
    if len(set(names)) != len(names):
        raise ValueError(f"every variant and anchor needs its own name; got {names}")
    for v in anchors:
        if v.check is not None:
            _check(v, "the anchor")
    for v in variants:
        if v.check is not None:
            _check(v, "variant")
    todo = [(v, True) for v in anchors] + [(v, False) for v in variants]
    if progress is None:
        import sys
        progress = "ipykernel" in sys.modules
    if progress and len(todo) > 2:
        try:
            from tqdm.auto import tqdm
            todo = tqdm(todo, desc=title or "timing", leave=False)
        except ImportError:
            pass
    rows = Comparison()
    rows.title, rows.unit = title, unit
    by_name: dict = {}
    for v, is_anchor in todo:
        res = benchmark(v.launch, name=v.name, budget_s=budget_s, max_samples=max_samples, **bench)
        row = {"name": v.name, "about": v.about, "ms": res.median_ms, "spread": res.rel_iqr,
               "rate": rate_of(res, v.work if v.work is not None else work, unit), "unit": unit,
               "anchor": None, "of_anchor": None, "is_anchor": is_anchor, "result": res}
        by_name[v.name] = row
        if not is_anchor and anchors:
            ref = by_name[v.anchor or anchors[0].name] if (v.anchor or anchors[0].name) in by_name else None
            if ref is None:
                raise ValueError(f"variant {v.name!r} names anchor {v.anchor!r}, which is not among the anchors "
                                 f"({', '.join(a.name for a in anchors)})")
            row["anchor"] = ref["name"]
            row["of_anchor"] = (row["rate"] / ref["rate"] if row["rate"] and ref["rate"]
                                else ref["ms"] / row["ms"])
        rows.append(row)
    if verbose:
        rows.show()
    return rows
