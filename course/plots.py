"""Plots the lessons draw: rooflines, bandwidth curves and stream timelines."""
from __future__ import annotations

__all__ = ["roofline", "bandwidth_curve", "timeline", "vs_ceiling"]


def _ax(ax):
    if ax is None:
        import matplotlib.pyplot as plt
        _fig, ax = plt.subplots(figsize=(7, 4.5))
    return ax


def roofline(points=(), ceilings=None, *, ax=None, roofs=("sgemm", "tf32", "bf16"), title=None):
    """Draw the roofline of this GPU's measured ceilings, and ``points`` on it.

    Parameters
    ----------
    points : iterable of (label, arithmetic intensity FLOP/byte, TFLOP/s)
    ceilings : Ceilings, optional
        Default: `course.ceilings()` (measured here, or recorded ones without a GPU).
    roofs : which compute ceilings to draw as horizontal lines.
    """
    import numpy as np
    if ceilings is None:
        from ._ceilings import ceilings as _c
        ceilings = _c()
    ax = _ax(ax)
    bw = ceilings.copy_gbps / 1e3  # TB/s: TFLOP/s per FLOP/byte
    ai = np.logspace(-2, 4, 400)
    names = {"sgemm": ("FP32 (cuBLAS SGEMM)", ceilings.sgemm_tflops),
             "tf32": ("TF32 tensor cores", ceilings.tf32_tflops),
             "bf16": ("BF16 tensor cores", ceilings.bf16_tflops),
             "fp16": ("FP16 tensor cores", ceilings.fp16_tflops)}
    for r in roofs:
        label, peak = names[r]
        if peak:
            ax.plot(ai, np.minimum(bw * ai, peak), lw=1.5, label=f"{label}: {peak:.0f} TFLOP/s")
            ax.annotate(f"ridge {peak / bw:.0f} FLOP/B", (peak / bw, peak), textcoords="offset points",
                        xytext=(4, -12), fontsize=8)
    for label, x, y in points:
        ax.scatter([x], [y], zorder=3)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(5, 5), fontsize=9)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(title or f"Roofline of {ceilings.gpu} (memory {ceilings.copy_gbps:.0f} GB/s, {ceilings.source})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax


def bandwidth_curve(sizes_bytes, series: dict, *, peak_gbps=None, peak_label="peak", ax=None, title=None):
    """Bandwidth against transfer size, one line per entry of ``series`` (label -> GB/s list)."""
    ax = _ax(ax)
    for label, gbps in series.items():
        ax.plot(sizes_bytes, gbps, marker="o", ms=3, label=label)
    if peak_gbps:
        ax.axhline(peak_gbps, ls="--", color="gray", label=f"{peak_label}: {peak_gbps:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("bytes per transfer")
    ax.set_ylabel("GB/s")
    if title:
        ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def timeline(spans, *, ax=None, title=None):
    """A Gantt chart: ``spans`` is an iterable of (lane, label, start_ms, end_ms).

    Lanes (e.g. "stream 1") become rows; labels pick colours (e.g. "H2D", "kernel", "D2H").
    """
    ax = _ax(ax)
    spans = list(spans)
    lanes = list(dict.fromkeys(s[0] for s in spans))
    kinds = list(dict.fromkeys(s[1] for s in spans))
    import matplotlib.pyplot as plt
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    seen = set()
    for lane, label, t0, t1 in spans:
        c = colors[kinds.index(label) % len(colors)]
        ax.barh(lanes.index(lane), t1 - t0, left=t0, color=c, edgecolor="black", lw=0.4,
                label=None if label in seen else label)
        seen.add(label)
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def vs_ceiling(results: dict, ceiling_gbps: float, *, ceiling_label: str = "device-to-device copy",
                    title: str = "", ax=None):
    """Horizontal bars of GB/s per kernel with the copy ceiling as a line, each labelled with its %."""
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(8, 0.45 * len(results) + 1.4))
    names = list(results)
    vals = [results[n] for n in names]
    ax.barh(range(len(names)), vals, color="tab:blue", alpha=0.8)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.0f} GB/s ({100 * v / ceiling_gbps:.0f}%)", va="center", fontsize=8)
    ax.axvline(ceiling_gbps, color="black", ls="--", lw=1)
    # the ceiling's label gets a row of its own above the first bar: clear of the bars' labels and ticks
    ax.text(ceiling_gbps, -1.0, f" {ceiling_label}: {ceiling_gbps:.0f} GB/s", fontsize=8, va="center")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(len(names) - 0.5, -1.6)  # inverted: the first name on top, the label's row above it
    ax.set_xlabel("GB/s (bytes read + written per second)")
    ax.set_xlim(0, max(max(vals, default=0), ceiling_gbps) * 1.35)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    return ax
