"""Run the benchmark rows of every chapter against anchors measured in the same run.

Every figure is a ratio to an anchor timed in this run (copy bandwidth, CuPy/CUB, cuBLAS), so results
from different days or GPUs compare by ratio, never by a number remembered from elsewhere.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import pkgutil
import platform
import sys
import traceback
from pathlib import Path

__all__ = ["Context", "Row", "run_suite", "main"]


@dataclasses.dataclass
class Row:
    """One measured figure; ``ratio`` is value / anchor_value and ``target`` the minimum ratio."""

    chapter: str
    name: str
    value: float
    unit: str
    anchor: str | None = None
    anchor_value: float | None = None
    target: float | None = None
    note: str = ""
    higher_is_better: bool = True

    @property
    def ratio(self):
        if self.anchor_value in (None, 0) or self.value is None:
            return None
        return self.value / self.anchor_value

    @property
    def ok(self):
        if self.target is None or self.ratio is None:
            return None
        return self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.update(ratio=self.ratio, ok=self.ok)
        return d


class Context:
    """What a chapter's ``rows(ctx)`` gets: the anchors of this run and the course's timer."""

    def __init__(self, ceilings, chapter: str = ""):
        import course
        self.ceilings = ceilings
        self.copy_gbps = ceilings.copy_gbps
        self.benchmark = course.benchmark
        self.interleaved = course.interleaved
        self.chapter = chapter

    def row(self, name, value, unit, anchor=None, anchor_value=None, target=None, note="",
            higher_is_better=True) -> Row:
        return Row(self.chapter, name, value, unit, anchor, anchor_value, target, note, higher_is_better)


def _cupy_copy_gbps(nbytes: int) -> float:
    """CuPy's own timer on CuPy's own copy: an independent check of `course.benchmark`."""
    import cupy
    from cupyx.profiler import benchmark as cupy_bench
    src = cupy.random.random(nbytes // 8)
    dst = cupy.empty_like(src)
    r = cupy_bench(cupy.copyto, (dst, src), n_repeat=50, n_warmup=5)
    t = float(sorted(r.gpu_times[0])[len(r.gpu_times[0]) // 2])
    return 2 * src.nbytes / t / 1e9


def _optional_versions() -> dict:
    """Triton's and PyTorch's versions where they import (chapters 14 and 15 time them or their kernels)."""
    import importlib
    out = {}
    for name in ("triton", "torch"):
        try:
            out[name] = importlib.import_module(name).__version__
        except Exception:  # noqa: BLE001 - optional: absent, or broken, is simply not recorded
            pass
    return out


def _chapter_modules(only=None):
    from . import rows as _rows
    names = sorted(m.name for m in pkgutil.iter_modules(_rows.__path__))
    return [n for n in names if not only or n in only]


def run_suite(only=None, out_dir=None, log=print) -> dict:
    import course
    info = course.device_info()
    log(f"measuring ceilings on {info.name} ...")
    ceil = course.measure_ceilings(verbose=False)
    rows = [Row("00_ceilings", "course copy (D2D, read+write)", ceil.copy_gbps, "GB/s",
                "cupy.copyto timed by cupyx.profiler", _cupy_copy_gbps(1 << 30), 0.95,
                "the course's timer and copy within 5% of CuPy's own")]
    rows += [Row("00_ceilings", n, v, u) for n, v, u in (
        ("pinned H2D", ceil.h2d_gbps, "GB/s"), ("pinned D2H", ceil.d2h_gbps, "GB/s"),
        ("cuBLAS SGEMM 4096^3 (FP32)", ceil.sgemm_tflops, "TFLOP/s"),
        ("cuBLAS TF32 4096^3", ceil.tf32_tflops, "TFLOP/s"),
        ("cuBLAS BF16 4096^3", ceil.bf16_tflops, "TFLOP/s"), ("cuBLAS FP16 4096^3", ceil.fp16_tflops, "TFLOP/s"))]
    errors = {}
    for mod in _chapter_modules(only):
        log(f"running {mod} ...")
        try:
            m = importlib.import_module(f"benchmarks.rows.{mod}")
            rows += list(m.rows(Context(ceil, mod)))
        except Exception:
            errors[mod] = traceback.format_exc()
            log(f"  {mod} FAILED:\n{errors[mod]}")
    result = {
        "device": {"name": info.name, "cc": f"{info.cc[0]}.{info.cc[1]}", "sm_count": info.sm_count,
                   "l2_bytes": info.l2_bytes},
        "versions": {"driver": info.driver, "runtime": info.runtime, "nvrtc": info.nvrtc, "cupy": info.cupy,
                     "python": platform.python_version(), **_optional_versions()},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ceilings": ceil.to_dict(),
        "rows": [r.to_dict() for r in rows],
        "errors": errors,
    }
    out = Path(out_dir or Path(__file__).parent / "results")
    out.mkdir(parents=True, exist_ok=True)
    slug = course.gpu_slug(info.name)
    old = out / f"{slug}.json"
    if only and old.exists():  # a partial run keeps the other chapters' rows
        prev = json.loads(old.read_text())
        keep = [r for r in prev.get("rows", []) if r["chapter"] not in set(only) | {"00_ceilings"}]
        result["rows"] = sorted(keep + result["rows"], key=lambda r: r["chapter"])
    (out / f"{slug}.json").write_text(json.dumps(result, indent=1))
    (out / f"{slug}.md").write_text(to_markdown(result))
    return result


def to_markdown(result: dict) -> str:
    d, v = result["device"], result["versions"]
    lines = [f"# Benchmarks on {d['name']} (sm_{d['cc'].replace('.', '')}, {d['sm_count']} SMs)", "",
             f"{result['date']} | driver {v['driver']} | runtime {v['runtime']} | NVRTC {v['nvrtc']} | "
             f"CuPy {v['cupy']} | Python {v['python']}", "",
             "| chapter | row | value | anchor | ratio | target | ok |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.3f}"
        tgt = "" if r["target"] is None else ("≥ " if r["higher_is_better"] else "≤ ") + f"{r['target']}"
        anchor = "" if r["anchor"] is None else f"{r['anchor']}: {r['anchor_value']:.4g}"
        ok = {True: "yes", False: "**NO**", None: ""}[r["ok"]]
        lines.append(f"| {r['chapter']} | {r['name']} | {r['value']:.4g} {r['unit']} | {anchor} | {ratio} | "
                     f"{tgt} | {ok} |")
    for ch, tb in result.get("errors", {}).items():
        lines += ["", f"**{ch} failed:**", "```", tb.strip()[-2000:], "```"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    p.add_argument("--only", default="", help="comma-separated chapter stems, e.g. 01_first_kernel")
    p.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    a = p.parse_args(argv)
    import course
    if not course.gpu_available():
        print(course.no_gpu_message("The benchmark suite"))
        return 3
    only = [s for s in a.only.split(",") if s] or None
    res = run_suite(only, a.out)
    print(to_markdown(res))
    failed = [r for r in res["rows"] if r["ok"] is False]
    if res["errors"] or failed:
        print(f"{len(failed)} row(s) below target, {len(res['errors'])} chapter(s) failed", file=sys.stderr)
        return 1
    return 0
