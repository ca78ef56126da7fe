"""Chapter 07's warptiling sweep on this GPU, recorded: `python -m benchmarks.warptile_sweep`.

`course.lessons.ch07_warptile.sweep` checks every candidate shape of the chapter's `sgemm_warptile` cell at odd
sizes and times the right ones with cuBLAS SGEMM (TF32 off) in one interleaved run; this command records the
rows in benchmarks/results/ch07-warptile-sweep-<gpu>.{json,md}, which the chapter's stage 6b paragraph quotes.

  python -m benchmarks.warptile_sweep [--n 4096] [--only 1,9,13] [--budget 4] [--out DIR]

Without a GPU it measures nothing, writes nothing and exits 2.
"""
from __future__ import annotations

import argparse
import platform
import sys

from . import _record

__all__ = ["STEM", "main"]

STEM = "ch07-warptile-sweep"
EXIT_NO_GPU = 2


def main(argv=None) -> int:
    import course
    from course.lessons import ch07_warptile as wt
    p = argparse.ArgumentParser(prog="python -m benchmarks.warptile_sweep", description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=wt.SIZE, help="M = N = K of the timed product (default %(default)s)")
    p.add_argument("--budget", type=float, default=4.0, help="seconds of timing for the whole interleaved run")
    p.add_argument("--only", default="", help="comma-separated 1-based numbers of CANDIDATES (default: all)")
    p.add_argument("--out", default=str(_record.RESULTS), help="results folder (default benchmarks/results)")
    args = p.parse_args(argv)
    configs = [wt.CANDIDATES[int(i) - 1] for i in args.only.split(",") if i.strip()] or wt.CANDIDATES
    try:
        rows = wt.sweep(args.n, configs, budget_s=args.budget)
    except course.NoGPUError as exc:
        print(exc, file=sys.stderr)
        return EXIT_NO_GPU
    info, device = course.device_info(), _record.device()
    table = wt.markdown(rows)
    head = f"sgemm_warptile at {args.n}^3 on {device['name']}, against cuBLAS SGEMM (TF32 off) in the same run"
    print(head + "\n\n" + table)
    result = {"device": device, "date": _record.utc_now(), "size": args.n,
              "versions": {"runtime": info.runtime, "nvrtc": info.nvrtc, "cupy": info.cupy,
                           "python": platform.python_version()},
              "command": "python -m benchmarks.warptile_sweep " + " ".join(argv if argv is not None else sys.argv[1:]),
              "rows": rows}
    path = _record.record_path(args.out, STEM, device["name"])
    _record.write_record(path, result, f"# {head}\n\n{result['date']}; driver {device['driver']}, CuPy "
                                       f"{info.cupy}.\n\n{table}\n")
    print(f"\nwrote {path} and {path.with_suffix('.md').name}")
    return 0 if any(r["correct"] and r["params"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
