"""Nsight Compute from a notebook: run a short script under ``ncu`` and read its metrics.

Lessons compare their models (sectors per request, bank-conflict wavefronts) with the profiler's own
counters where ncu is installed and allowed to read them; nothing here raises when it is not.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["ncu_path", "parse_ncu_csv", "NcuResult", "run_ncu"]


_NCU_GUESSES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/ncu", "/usr/bin/ncu")


def ncu_path() -> str | None:
    """The ``ncu`` executable (PATH, $NCU, or the usual install folders), or None."""
    cand = [os.environ.get("NCU"), shutil.which("ncu"), *_NCU_GUESSES]
    cand += sorted((str(p) for p in Path("/opt/nvidia").glob("nsight-compute/*/ncu")), reverse=True)
    cand += sorted((str(p) for p in Path("/usr/local").glob("cuda*/bin/ncu")), reverse=True)
    for c in cand:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


def _number(text: str):
    t = text.strip().replace(",", "").replace(" ", "")
    try:
        return float(t)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list:
    """Metric rows from ``ncu --csv`` output (the 'details' page, one row per kernel and metric).

    Returns a list of dicts with ``kernel``, ``id``, ``metric``, ``unit`` and ``value`` (a float, or
    None when ncu printed n/a). Lines that are not CSV (the profiled program's own output, ``==PROF==``
    notes) are skipped.
    """
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    header_at = next((i for i, ln in enumerate(lines) if '"Metric Name"' in ln and '"Metric Value"' in ln), None)
    if header_at is None:
        return []
    reader = csv.reader(io.StringIO("\n".join(lines[header_at:])))
    header = next(reader)
    col = {name: j for j, name in enumerate(header)}
    out = []
    for row in reader:
        if len(row) != len(header) or row == header:
            continue
        out.append({"id": row[col["ID"]] if "ID" in col else "", "kernel": row[col.get("Kernel Name", 0)],
                    "metric": row[col["Metric Name"]], "unit": row[col.get("Metric Unit", col["Metric Name"])],
                    "value": _number(row[col["Metric Value"]])})
    return out


@dataclasses.dataclass
class NcuResult:
    """Metrics by name (summed over the profiled launches), or why there are none."""

    metrics: dict
    reason: str = ""
    output: str = ""
    by_kernel: dict = dataclasses.field(default_factory=dict)  # kernel name -> {metric: value}

    def __bool__(self) -> bool:
        return bool(self.metrics) and not self.reason


_PERMISSION = ("ERR_NVGPUCTRPERM", "permission to access NVIDIA GPU Performance Counters")


def run_ncu(script: str, metrics, *, kernel: str, launches: int = 1, timeout: float = 300.0,
            options=()) -> NcuResult:
    """Run the Python ``script`` under Nsight Compute and collect ``metrics`` of kernel ``kernel``.

    The script runs in a child process with this repository on its path; it should compile and
    launch the kernel once. ``options`` are further ncu flags (``--clock-control none``, for example).
    Nothing here raises for a missing or forbidden profiler: the result is
    then falsy and ``reason`` says what to do.
    """
    ncu = ncu_path()
    if ncu is None:
        return NcuResult({}, "Nsight Compute (ncu) is not installed here, so only the model's count is "
                             "shown. Install it with the CUDA toolkit to compare.")
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.py"
        path.write_text(script)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
        cmd = [ncu, "--csv", "--metrics", ",".join(metrics), "--kernel-name", kernel,
               "--launch-count", str(launches), *options, sys.executable, str(path)]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            return NcuResult({}, f"ncu did not finish within {timeout:.0f} s.")
    out = (p.stdout or "") + (p.stderr or "")
    if any(s in out for s in _PERMISSION):
        return NcuResult({}, "Nsight Compute is installed but this user may not read the GPU's performance "
                             "counters (ERR_NVGPUCTRPERM); an administrator can allow it (NVIDIA's "
                             "'ERR_NVGPUCTRPERM' page), so only the model's count is shown.", out)
    rows = parse_ncu_csv(p.stdout or "")
    got: dict = {}
    by_kernel: dict = {}
    for r in rows:
        if r["value"] is not None:
            got[r["metric"]] = got.get(r["metric"], 0.0) + r["value"]
            name = r["kernel"].split("(")[0].strip()
            per = by_kernel.setdefault(name, {})
            per[r["metric"]] = per.get(r["metric"], 0.0) + r["value"]
    if not got:
        tail = "\n".join(out.strip().splitlines()[-5:])
        return NcuResult({}, f"ncu ran but reported no metrics for kernel {kernel!r} (exit {p.returncode}):\n"
                             f"{tail}", out)
    return NcuResult(got, "", out, by_kernel)
