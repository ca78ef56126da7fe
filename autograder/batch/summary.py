"""The batch at a glance: a table per exercise and GPU model, CSV and JSON for spreadsheets and LMS
uploads, and plots of the score and speed-ratio distributions per exercise."""
from __future__ import annotations

import collections
import csv
import json
from pathlib import Path

__all__ = ["exercise_table", "write_report", "plot_distributions"]

_CSV_FIELDS = ("student", "assignment", "exercise", "status", "points", "max_points", "ratio", "gpu", "spec",
               "graded_at", "duration_s")


def _groups(rows) -> dict:
    groups = collections.defaultdict(list)
    for r in rows:
        groups[(r["assignment"], r["exercise"], r["gpu"])].append(r)
    return dict(sorted(groups.items()))


def exercise_table(rows) -> str:
    """One line per exercise and GPU model: submissions, mean points, full marks, statuses, median ratio."""
    head = f"{'exercise':<34} {'GPU':<24} {'n':>4} {'mean':>11} {'full':>5} {'ratio p50':>9}  statuses"
    lines = [head, "-" * len(head)]
    for (assignment, exercise, gpu), rs in _groups(rows).items():
        pts = [r["points"] for r in rs]
        top = max(r["max_points"] for r in rs)
        ratios = sorted(r["ratio"] for r in rs if r["ratio"] is not None)
        med = f"{ratios[len(ratios) // 2]:.2f}" if ratios else "-"
        counts = collections.Counter(r["status"] for r in rs)
        lines.append(f"{assignment + '/' + exercise:<34} {gpu[:24]:<24} {len(rs):>4} "
                     f"{sum(pts) / len(pts):>5.2f}/{top:<5g} {sum(p >= top for p in pts):>5} {med:>9}  "
                     + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    return "\n".join(lines)


def plot_distributions(rows, path=None):
    """Two rows of histograms, one column per exercise: points, and speed ratio (with the threshold)."""
    import matplotlib
    if path is not None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    groups = collections.defaultdict(list)
    for r in rows:
        groups[f"{r['assignment']}/{r['exercise']}"].append(r)
    names = sorted(groups)
    fig, axes = plt.subplots(2, max(len(names), 1), figsize=(3.4 * max(len(names), 1), 5.2), squeeze=False)
    for i, name in enumerate(names):
        rs = groups[name]
        top = max(r["max_points"] for r in rs)
        ax = axes[0][i]
        ax.hist([r["points"] for r in rs], bins=[x - 0.5 for x in range(int(top) + 2)], color="tab:blue")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("points")
        ax.set_ylabel("submissions")
        ax = axes[1][i]
        ratios = [r["ratio"] for r in rs if r["ratio"] is not None]
        if ratios:
            ax.hist(ratios, bins=20, color="tab:green")
            thresholds = {json.loads(r["report"]).get("speed", {}).get("threshold") for r in rs if r["ratio"]}
            for t in thresholds - {None}:
                ax.axvline(t, color="black", linestyle="--", linewidth=1, label=f"full points at {t:g}x")
            ax.legend(fontsize=7, loc="upper left")
        ax.set_xlabel("speed / reference")
        ax.set_ylabel("submissions")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
        plt.close(fig)
    return fig


def write_report(result, folder) -> list:
    """results.json, results.csv, summary.txt and distributions.png in ``folder``; the paths written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = result.rows
    paths = [folder / "results.json", folder / "results.csv", folder / "summary.txt"]
    with open(paths[0], "w", encoding="utf-8") as f:
        json.dump({"graded": result.graded, "reused": result.reused, "lost": result.lost,
                   "elapsed_s": result.elapsed_s, "gpus": result.gpus,
                   "results": [{**{k: r[k] for k in _CSV_FIELDS}, "feedback": r["feedback"]} for r in rows]},
                  f, indent=1)
    with open(paths[1], "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=_CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    paths[2].write_text(exercise_table(rows) + "\n", encoding="utf-8")
    if rows:
        paths.append(folder / "distributions.png")
        plot_distributions(rows, paths[-1])
    return paths
