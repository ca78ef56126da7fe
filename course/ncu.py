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
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["ncu_path", "parse_ncu_csv", "NcuResult", "run_ncu", "run_profiled", "denied", "PERMISSION_HELP"]


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
# one wording wherever the counters are refused: the lesson's profile, its model check, the grader's counter checks
PERMISSION_HELP = ("this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM, usual on Colab and "
                   "shared machines); an administrator can allow it, as NVIDIA's 'ERR_NVGPUCTRPERM' page explains")


def denied(output: str) -> bool:
    """Does ncu's output say this user may not read the GPU's performance counters?"""
    return any(s in output for s in _PERMISSION)


def run_profiled(cmd, *, timeout: float, cwd=None) -> tuple:
    """Run ``cmd`` (ncu and the program it profiles) with this repository on PYTHONPATH, in a process group of
    its own: (exit code, or None when ``timeout`` ran out, stdout and stderr together). On a timeout the whole
    group is killed, so the profiled program (a kernel that hangs) does not outlive ncu."""
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out or ""
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:   # a process stuck in the driver: leave its output behind
            out = ""
        return None, out or ""


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
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.py"
        path.write_text(script)
        cmd = [ncu, "--csv", "--metrics", ",".join(metrics), "--kernel-name", kernel,
               "--launch-count", str(launches), *options, sys.executable, str(path)]
        code, out = run_profiled(cmd, timeout=timeout, cwd=tmp)
    if code is None:
        return NcuResult({}, f"ncu did not finish within {timeout:.0f} s.")
    if denied(out):
        return NcuResult({}, f"Nsight Compute is installed, but {PERMISSION_HELP}. Only the model's count is "
                             "shown.", out)
    rows = parse_ncu_csv(out)
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
        return NcuResult({}, f"ncu ran but reported no metrics for kernel {kernel!r} (exit {code}):\n"
                             f"{tail}", out)
    return NcuResult(got, "", out, by_kernel)
