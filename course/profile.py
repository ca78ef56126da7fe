"""Nsight Compute from a cell: ``course.profile(kernel, grid, block, *args)`` runs the kernel once under ``ncu``.

The kernel runs in a child process, never in the notebook's own: the child loads the kernel's cubin (the bytes
NVRTC made for the cell) with CuPy, rebuilds the arguments from files (arrays as .npy, scalars with their
NumPy type), launches once and synchronizes. No notebook code runs again, and the notebook's arrays are not
touched. The counters come back as a `Profile`: raw metrics, the derived numbers a lesson talks about
(bandwidth, sectors per request, bank conflicts, occupancy and its limiter, FLOP rate, stall reasons), a table
and a roofline point.

With ``record="name"`` a live profile is saved under benchmarks/results/profiles/; where no live profile can be
taken (no GPU, no ncu, counters not permitted) the recording is shown instead, and ``reason`` says why.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ._errors import LaunchError, NoGPUError
from .ncu import PERMISSION_HELP, ncu_path, parse_ncu_csv, run_ncu

__all__ = ["SECTIONS", "STALL_REASONS", "STALL_METRIC", "Profile", "profile", "recorded_profile", "derive",
           "metrics_for", "metrics_from_rows", "profiles_dir", "save_recording", "load_recording", "recording_run"]

# Warp stalls: Nsight Compute's Warp State section family, "average warps stalled for this reason per issued
# instruction". Shares of their sum say where a warp's cycles go (the lesson reads the top ones); the
# per-issue normalization makes kernels of different lengths comparable. Reasons of sm_70 to sm_90.
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALL_REASONS = ("barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
                 "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
                 "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait")

_FLOP = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
SECTIONS = {
    "memory": ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
               "dram__throughput.avg.pct_of_peak_sustained_elapsed", "lts__t_bytes.sum",
               "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
               "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    "compute": ("gpu__time_duration.sum", _FLOP.format("ffma"), _FLOP.format("fadd"), _FLOP.format("fmul"),
                "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    "occupancy": ("sm__warps_active.avg.pct_of_peak_sustained_active", "launch__occupancy_limit_registers",
                  "launch__occupancy_limit_shared_mem", "launch__occupancy_limit_warps",
                  "launch__occupancy_limit_blocks", "launch__registers_per_thread"),
    "stalls": tuple(STALL_METRIC.format(r) for r in STALL_REASONS),
    "cache": ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum",
              "lts__t_sector_hit_rate.pct", "l1tex__t_sector_hit_rate.pct"),
}
_LIMIT_NAMES = {"launch__occupancy_limit_warps": "warps", "launch__occupancy_limit_blocks": "blocks",
                "launch__occupancy_limit_registers": "registers",
                "launch__occupancy_limit_shared_mem": "shared memory"}

# ncu is asked for base units (--print-units base); these scales cover a report printed with scaled units too.
_TO_BYTES = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
             "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}
_TO_NS = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_SI = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}  # ncu scales counts too: "Msector", "Kinst"
_COUNTS = ("sector", "request", "inst", "warp", "cycle", "block")


def _scale(unit: str) -> float:
    if unit in _TO_BYTES or unit in _TO_NS:
        return _TO_BYTES.get(unit, _TO_NS.get(unit, 1))
    if unit[:1] in _SI and unit[1:] in _COUNTS:
        return _SI[unit[:1]]
    return 1


def profiles_dir() -> Path:
    """benchmarks/results/profiles: recorded profiles and traces, replayed where no GPU is present."""
    from ._ceilings import results_dir
    return results_dir() / "profiles"


def recording_run() -> bool:
    """Is this a run that records (COURSE_RECORD_SWEEPS=1, as tools/gpu_tier.sh sets it)? Only such runs write
    into benchmarks/results; a student's runs read the recordings and never change them."""
    return os.environ.get("COURSE_RECORD_SWEEPS") == "1"


def save_recording(name: str, data: dict, device: str, *, file_stem: str | None = None) -> Path:
    """Save a measurement taken on ``device`` (a profile, a trace, NVML samples, nvidia-smi readings) as
    benchmarks/results/profiles/<file_stem or name>-<gpu>.json, for machines without a GPU."""
    from ._env import gpu_slug
    if not _NAME_OK.fullmatch(file_stem or name):
        raise ValueError(f"`name` names a file: letters, digits, '-', '_' and '.'; got {file_stem or name!r}")
    path = profiles_dir() / f"{file_stem or name}-{gpu_slug(device)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": name, "device": device, **data}, indent=1, default=str) + "\n")
    return path


def load_recording(name: str, *, file_stem: str | None = None, accept=None):
    """The recording saved as ``name`` (in ``<file_stem or name>-<gpu>.json``; an H100's first, else any GPU's,
    of those ``accept(data)`` takes), or None where there is none. Profiles, traces and a lesson's own
    measurements are all found this way."""
    found = []
    for path in sorted(profiles_dir().glob(f"{file_stem or name}-*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        # the name inside, not the file's: "11-clocks" must not pick up "11-clocks-idle-..."
        if isinstance(data, dict) and data.get("name") == name and (accept is None or accept(data)):
            found.append(("h100" not in path.name, path.name, data))
    return min(found, key=lambda t: t[:2])[2] if found else None


def metrics_for(sections) -> list:
    """The ncu metric names of ``sections`` (names of `SECTIONS`), in order, each once."""
    if isinstance(sections, str):
        sections = (sections,)
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        raise ValueError(f"`sections` should name some of {', '.join(SECTIONS)}; got {list(sections)!r}")
    return list(dict.fromkeys(m for s in sections for m in SECTIONS[s]))


def metrics_from_rows(rows) -> dict:
    """metric -> value in bytes, nanoseconds or ncu's own unit, from `course.ncu.parse_ncu_csv` rows."""
    out: dict = {}
    for r in rows:
        v = r.get("value")
        if v is None:
            continue
        v *= _scale((r.get("unit") or "").strip())
        out[r["metric"]] = out.get(r["metric"], 0.0) + v  # one launch is profiled: a sum over one row
    return out


def _ratio(a, b):
    return a / b if a is not None and b else None


def derive(m: dict) -> dict:
    """The numbers a lesson talks about, from raw metrics (None where a metric was not collected).

    GB/s are 1e9 bytes per second: bytes / nanoseconds. ``gflops`` counts an FMA as two FP32 operations.
    ``stalls`` maps each reason to its share of all stall reasons, largest first.
    """
    g = m.get
    ns = g("gpu__time_duration.sum")
    rd, wr = g("dram__bytes_read.sum"), g("dram__bytes_write.sum")
    dram = None if rd is None and wr is None else (rd or 0.0) + (wr or 0.0)
    flops = [g(_FLOP.format(op)) for op in ("ffma", "fadd", "fmul")]
    flop = None if all(f is None for f in flops) else 2 * (flops[0] or 0) + (flops[1] or 0) + (flops[2] or 0)
    conflicts = [g("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
                 g("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")]
    limits = {name: g(metric) for metric, name in _LIMIT_NAMES.items() if g(metric) is not None}
    # "selected" is a warp that issued, not one that waited: it stays out of the shares of stall reasons
    stalls = {r: g(STALL_METRIC.format(r)) for r in STALL_REASONS if r != "selected" and g(STALL_METRIC.format(r))}
    total = sum(stalls.values())
    from .occupancy import limiter_of
    return {
        "duration_us": None if ns is None else ns / 1e3,
        "dram_gbps": _ratio(dram, ns),
        "dram_pct": g("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "l2_gbps": _ratio(g("lts__t_bytes.sum"), ns),
        "sectors_per_request_ld": _ratio(g("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"),
                                         g("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")),
        "sectors_per_request_st": _ratio(g("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"),
                                         g("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum")),
        "bank_conflicts": None if all(c is None for c in conflicts) else sum(c or 0 for c in conflicts),
        "achieved_occupancy_pct": g("sm__warps_active.avg.pct_of_peak_sustained_active"),
        "occupancy_limiter": limiter_of(limits) or None,
        "gflops": _ratio(flop, ns),
        "sm_pct": g("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
        "l2_hit_pct": g("lts__t_sector_hit_rate.pct"),
        "l1_hit_pct": g("l1tex__t_sector_hit_rate.pct"),
        "stalls": {r: v / total for r, v in sorted(stalls.items(), key=lambda kv: -kv[1])} if total else {},
    }


_ROWS = (("kernel time (us)", "duration_us", "{:.2f}"), ("DRAM bandwidth (GB/s)", "dram_gbps", "{:.0f}"),
         ("DRAM throughput (% of peak)", "dram_pct", "{:.1f}"), ("L2 bandwidth (GB/s)", "l2_gbps", "{:.0f}"),
         ("global loads (sectors/request)", "sectors_per_request_ld", "{:.2f}"),
         ("global stores (sectors/request)", "sectors_per_request_st", "{:.2f}"),
         ("shared-memory bank conflicts (count)", "bank_conflicts", "{:.0f}"),
         ("achieved occupancy (% of max warps)", "achieved_occupancy_pct", "{:.1f}"),
         ("occupancy limiter", "occupancy_limiter", "{}"), ("FP32 rate (GFLOP/s)", "gflops", "{:.1f}"),
         ("SM throughput (% of peak)", "sm_pct", "{:.1f}"), ("L2 hit rate (% of sectors)", "l2_hit_pct", "{:.1f}"),
         ("L1 hit rate (% of sectors)", "l1_hit_pct", "{:.1f}"))


@dataclasses.dataclass
class Profile:
    """One kernel launch as Nsight Compute counted it, or a recording of one, or why there is none.

    ``source`` is "ncu" (measured now), "recorded" (read from benchmarks/results/profiles) or "none";
    ``reason`` says why the profile is not live. ``bool(profile)`` is True when it has metrics.
    """

    metrics: dict = dataclasses.field(default_factory=dict)
    derived: dict = dataclasses.field(default_factory=dict)
    source: str = "none"
    reason: str = ""
    device: str = ""
    kernel: str = ""
    name: str = ""
    launch: dict = dataclasses.field(default_factory=dict)
    clock_control: str = "none"
    ncu_version: str = ""
    date: str = ""
    notes: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        if self.metrics and not self.derived:
            self.derived = derive(self.metrics)

    def __bool__(self) -> bool:
        return bool(self.metrics)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Profile":
        """The inverse of `to_dict`; ``derived`` is computed again from the metrics, so a recording replays
        with the current definitions."""
        fields = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in data.items() if k in fields and k != "derived"}
        return cls(**kept)

    def table(self) -> None:
        """Print the derived numbers (units in the row names), and where they come from."""
        where = {"ncu": f"measured now with Nsight Compute {self.ncu_version}".rstrip(),
                 "recorded": f"recorded on {self.device} ({self.date})"}.get(self.source, "no profile")
        print(f"{self.kernel or self.name or 'kernel'}: {where}, clock control {self.clock_control}")
        if self.reason:
            print(self.reason)
        if not self:
            return
        from ._table import print_table
        rows = []
        for label, key, fmt in _ROWS:
            v = self.derived.get(key)
            if v is not None:
                rows.append({"quantity": label, "value": fmt.format(v)})
        stalls = self.derived.get("stalls") or {}
        if stalls:
            top = ", ".join(f"{r} {100 * s:.0f}%" for r, s in list(stalls.items())[:3])
            rows.append({"quantity": "top warp stalls (share of stalls)", "value": top})
        print_table(rows)
        for note in self.notes:
            print("note:", note)

    def ceilings(self):
        """The ceilings of the GPU this profile was taken on: measured here for a live profile, the ones the
        benchmark suite recorded on that GPU for a recording (FileNotFoundError when there are none)."""
        from ._ceilings import ceilings, recorded_ceilings
        from ._env import gpu_slug
        return ceilings() if self.source == "ncu" else recorded_ceilings(gpu_slug(self.device))

    def roofline_point(self):
        """(label, FP32 FLOP per DRAM byte, TFLOP/s) of this launch, or None where no FLOPs or no DRAM traffic
        were counted: the intensity is what reached DRAM, not a model's."""
        gf, bw = self.derived.get("gflops") or 0.0, self.derived.get("dram_gbps") or 0.0
        return (self.kernel or self.name, gf / bw, gf / 1e3) if gf > 0 and bw > 0 else None

    def roofline(self, ax=None):
        """This launch as one point (`roofline_point`) on the roofline of the GPU it ran on (`ceilings`).
        Returns the axes."""
        from . import plots
        try:
            ceil = self.ceilings()
        except FileNotFoundError:
            print("No measured ceilings are available (none measured here, none recorded), so there is no "
                  "roofline to draw the point on.")
            return None
        point = self.roofline_point()
        if point is None:
            print(f"{self.kernel or self.name or 'This profile'}: no FP32 FLOPs or no DRAM traffic were counted "
                  "(profile the 'memory' and 'compute' sections), so it has no point on the roofline.")
        return plots.roofline([point] if point else [], ceil, ax=ax)


def _reason_no_live(kernel) -> str:
    if kernel is None:
        return "No compiled kernel was given (a notebook without a GPU has none), so nothing could be profiled."
    from ._env import device_info
    try:
        device_info()
    except NoGPUError as e:
        return f"There is no usable GPU here ({e.reason}), so Nsight Compute cannot count anything."
    if ncu_path() is None:
        return ("Nsight Compute (ncu) is not installed here; it comes with the CUDA toolkit or as NVIDIA's "
                "nsight-compute package. Install it (or set $NCU to its path) to profile live.")
    return ""


_NAME_OK = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def recorded_profile(name: str, gpu: str | None = None):
    """The profile recorded as ``name`` (an H100's first, else any GPU's; only ``gpu``'s when given, a GPU
    name or slug), with ``source == "recorded"``; None when there is none."""
    from ._env import gpu_slug
    data = load_recording(name, accept=lambda d: gpu is None or gpu_slug(d.get("device", "")) == gpu_slug(gpu))
    if data is None:
        return None
    p = Profile.from_dict(data)
    p.source, p.reason = "recorded", f"Recorded on {p.device} ({p.date})."
    return p


def _fallback(record, why: str) -> Profile:
    if record:
        rec = recorded_profile(record)
        if rec is not None:
            rec.reason = f"{why} Showing the profile recorded on {rec.device} ({rec.date}) instead."
            return rec
        why += (f" No profile named {record!r} is recorded under benchmarks/results/profiles either; on a GPU "
                f"with ncu, course.profile(..., record={record!r}) records one.")
    return Profile(source="none", reason=why, name=record or "")


def _arg_spec(i: int, a, folder: Path, kernel) -> dict:
    import numpy as np
    try:
        import cupy
    except ImportError:  # pragma: no cover - a live profile has a GPU and so CuPy
        cupy = None
    if cupy is not None and isinstance(a, cupy.ndarray):
        if not (a.flags.c_contiguous or a.flags.f_contiguous):
            raise LaunchError(f"{kernel.name}: argument {i} is a strided view of a CuPy array; the profiled "
                              "child gets a copy of the array's memory, so pass a contiguous array "
                              "(cupy.ascontiguousarray(x)) to profile it.")
        path = folder / f"arg{i}.npy"
        np.save(path, cupy.asnumpy(a.ravel(order="K")))  # memory order: the kernel sees a pointer, not a shape
        return {"kind": "array", "path": str(path)}
    if isinstance(a, np.generic):
        return {"kind": "scalar", "dtype": a.dtype.str, "value": a.item()}
    if isinstance(a, (bool, int, float)):
        return {"kind": "python", "value": a}
    raise LaunchError(f"{kernel.name}: argument {i} is a {type(a).__name__}; course.profile can pass CuPy arrays "
                      "and numbers to the profiled child process. Pass the data as a CuPy array.")


# The child: loads the cubin and the arguments, launches once, waits. Nothing of the notebook runs again.
_CHILD = '''import json, numpy as np, cupy
spec = json.load(open({spec!r}))
fn = cupy.RawModule(path=spec["cubin"]).get_function(spec["symbol"])
if spec["shared_mem"] > 48 * 1024:
    fn.max_dynamic_shared_size_bytes = spec["shared_mem"]
args = []
for a in spec["args"]:
    if a["kind"] == "array":
        args.append(cupy.asarray(np.load(a["path"])))
    elif a["kind"] == "scalar":
        args.append(np.dtype(a["dtype"]).type(a["value"]))
    else:
        args.append(a["value"])
fn(tuple(spec["grid"]), tuple(spec["block"]), tuple(args), shared_mem=spec["shared_mem"])
cupy.cuda.Device().synchronize()
'''

_PERM = f"Nsight Compute is installed, but {PERMISSION_HELP}."


def _ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    line = next((ln for ln in out.splitlines() if "Version" in ln), "")
    return line.split("Version", 1)[1].strip().split(" ")[0] if line else ""


def _unknown_metrics(output: str, metrics) -> list:
    """Metrics an ncu error line names: an older or newer ncu may lack one; the rest are still worth having."""
    errors = "\n".join(ln for ln in output.splitlines() if "ERROR" in ln)
    return [m for m in metrics if m in errors or m.rsplit(".", 1)[0] in errors]


def _live(kernel, grid, block, args, shared_mem, metrics, clock_control, timeout) -> Profile:
    from ._env import device_info
    from ._launch import _dim3
    program = kernel.module.program
    symbol = program.lowered_names.get(kernel.name, kernel.name)
    converted = kernel.convert_args(args)
    launch = {"grid": list(_dim3(grid, "grid")), "block": list(_dim3(block, "block")), "shared_mem": int(shared_mem)}
    base = dict(kernel=kernel.name, launch=launch, clock_control=clock_control, device=device_info().name)
    opts = ["--kernel-name-base", "mangled", "--print-units", "base", "--clock-control", clock_control]
    notes = []
    with tempfile.TemporaryDirectory(prefix="course-profile-") as tmp:
        folder = Path(tmp)
        (folder / "kernel.cubin").write_bytes(program.cubin)
        spec = dict(launch, cubin=str(folder / "kernel.cubin"), symbol=symbol,
                    args=[_arg_spec(i, a, folder, kernel) for i, a in enumerate(converted)])
        (folder / "launch.json").write_text(json.dumps(spec))
        script = _CHILD.format(spec=str(folder / "launch.json"))
        res = run_ncu(script, metrics, kernel=symbol, launches=1, timeout=timeout, options=opts)
        bad = [] if res else _unknown_metrics(res.output, metrics)
        if bad and len(bad) < len(metrics):
            notes.append(f"this ncu does not know {', '.join(bad)}; profiled without them")
            metrics = [m for m in metrics if m not in bad]
            res = run_ncu(script, metrics, kernel=symbol, launches=1, timeout=timeout, options=opts)
    if not res:
        why = _PERM if "ERR_NVGPUCTRPERM" in res.reason else res.reason
        return Profile(source="none", reason=why, **base)
    got = metrics_from_rows(r for r in parse_ncu_csv(res.output) if r["metric"] in metrics)
    return Profile(metrics=got, source="ncu", ncu_version=_ncu_version(ncu_path()), notes=notes,
                   date=datetime.date.today().isoformat(), **base)


def profile(kernel, grid=1, block=1, *args, shared_mem: int = 0,
            sections=("memory", "compute", "occupancy", "stalls"), clock_control: str = "none",
            record: str | None = None, timeout: float = 300) -> Profile:
    """Run ``kernel(grid, block, *args, shared_mem=...)`` once under Nsight Compute and return its `Profile`.

    Parameters
    ----------
    kernel : course.Kernel or None
        From a ``%%cuda`` cell or `course.compile`. None (a notebook without a GPU has no kernel) returns the
        recording named ``record``.
    sections : names of `SECTIONS` to collect; fewer sections mean fewer replays of the kernel.
    clock_control : "none" (default) leaves the GPU's clocks as they are, so bandwidth compares with
        event timing; "base" is ncu's own default, which locks clocks to base for repeatable counts.
    record : str, optional
        Without a live profile (no GPU, no ncu, counters not permitted, the run failed) return the recording of
        that name instead. A live one is saved as benchmarks/results/profiles/<record>-<gpu>.json only on a
        recording run (COURSE_RECORD_SWEEPS=1, as the benchmark tier sets it), so a student's runs never write
        into the course's files.

    The child gets copies of the arrays, each in a fresh allocation: a view that starts off a 16-byte boundary
    is profiled aligned, and two arguments that overlap in the notebook do not overlap there.

    Never raises for a missing GPU, profiler or permission: the result is then a recording or empty, and
    ``reason`` says why. Arguments are checked as a launch checks them (LaunchError).
    """
    metrics = metrics_for(sections)
    if clock_control not in ("none", "base"):
        raise ValueError(f"`clock_control` should be 'none' or 'base'; got {clock_control!r}")
    if record is not None and not _NAME_OK.fullmatch(record):
        raise ValueError(f"`record` names a file: letters, digits, '-', '_' and '.'; got {record!r}")
    if kernel is not None and not hasattr(getattr(kernel, "module", None), "program"):
        raise LaunchError(f"course.profile needs a course.Kernel (from a %%cuda cell or course.compile(...)."
                          f"kernel(name)); got {type(kernel).__name__}.")
    why = _reason_no_live(kernel)
    if why:
        return _fallback(record, why)
    live = _live(kernel, grid, block, args, shared_mem, metrics, clock_control, timeout)
    if not live:
        return _fallback(record, live.reason)
    if record:
        live.name = record
        if recording_run():
            try:
                save_recording(record, dict(live.to_dict(), source="recorded"), live.device)
            except OSError as exc:
                live.notes.append(f"not recorded ({exc.strerror or exc})")
    return live
