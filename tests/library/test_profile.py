"""course.profile: ncu CSV to metrics, derived numbers, the child's argument rebuilding, record and replay (CPU);
a real profile of a copy kernel under ncu (GPU)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from repo_helpers import import_course  # noqa: E402

course = import_course()
from course import ncu  # noqa: E402
from course.profile import (SECTIONS, STALL_METRIC, Profile, derive, metrics_for,  # noqa: E402
                            metrics_from_rows)

prof = sys.modules["course.profile"]  # `course.profile` itself is the function

N = 1 << 24  # floats copied in the CSV below: 64 MiB read, 64 MiB written
H100 = "NVIDIA H100 80GB HBM3"

_HEAD = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
         '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def _row(metric, unit, value):
    return (f'"0","4242","python3.11","127.0.0.1","copy","1","7","(256, 1, 1)","(65536, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


# What `ncu --csv --print-units base --metrics ...` prints for one launch of a float copy (values invented
# but consistent: 2^24 floats, 4 sectors per request, 50 us), around the program's own output.
CSV_ROWS = [
    ("gpu__time_duration.sum", "nsecond", "50,000"),
    ("dram__bytes_read.sum", "byte", "67,108,864"),
    ("dram__bytes_write.sum", "byte", "67,108,864"),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "80.12"),
    ("lts__t_bytes.sum", "byte", "140,000,000"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "sector", "2,097,152"),
    ("l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum", "", "524,288"),
    ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "sector", "2,097,152"),
    ("l1tex__t_requests_pipe_lsu_mem_global_op_st.sum", "", "524,288"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "", "12"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "", "3"),
    ("sm__sass_thread_inst_executed_op_ffma_pred_on.sum", "inst", "1,000,000"),
    ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum", "inst", "500,000"),
    ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum", "inst", "0"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "9.5"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "85.3"),
    ("launch__occupancy_limit_registers", "block", "8"),
    ("launch__occupancy_limit_shared_mem", "block", "32"),
    ("launch__occupancy_limit_warps", "block", "8"),
    ("launch__occupancy_limit_blocks", "block", "32"),
    ("launch__registers_per_thread", "register/thread", "16"),
    (STALL_METRIC.format("long_scoreboard"), "", "6.0"),
    (STALL_METRIC.format("wait"), "", "1.5"),
    (STALL_METRIC.format("not_selected"), "", "0.5"),
    (STALL_METRIC.format("barrier"), "", "0"),
    (STALL_METRIC.format("mio_throttle"), "", "n/a"),
]
CSV = "\n".join(["copied 16777216 floats", "==PROF== Connected to process 4242 (/usr/bin/python3.11)",
                 "==PROF== Profiling \"copy\" - 0: 0%....50%....100% - 9 passes", _HEAD]
                + [_row(*r) for r in CSV_ROWS] + ["==PROF== Disconnected from process 4242"]) + "\n"


def parsed() -> dict:
    return metrics_from_rows(ncu.parse_ncu_csv(CSV))


def test_csv_parses_to_metrics_in_base_units():
    """Does ncu's CSV (thousands separators, n/a, the program's own lines around it) give one value per metric?"""
    m = parsed()
    assert m["dram__bytes_read.sum"] == 67_108_864 and m["gpu__time_duration.sum"] == 50_000
    assert m["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"] == 524_288
    assert STALL_METRIC.format("mio_throttle") not in m  # n/a is no value
    assert len(m) == len(CSV_ROWS) - 1


def test_scaled_units_become_bytes_and_nanoseconds():
    """Does a report printed with scaled units (Mbyte, usecond, Msector) give the same numbers as base units?"""
    rows = [{"metric": "dram__bytes_read.sum", "unit": "Mbyte", "value": 67.108864},
            {"metric": "gpu__time_duration.sum", "unit": "usecond", "value": 50.0},
            {"metric": "sm__throughput.avg.pct_of_peak_sustained_elapsed", "unit": "%", "value": 9.5},
            {"metric": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "unit": "Msector", "value": 2.097152}]
    m = metrics_from_rows(rows)
    assert m["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"] == pytest.approx(2_097_152)
    assert m["dram__bytes_read.sum"] == pytest.approx(67_108_864)
    assert m["gpu__time_duration.sum"] == pytest.approx(50_000)
    assert m["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 9.5


def test_derived_numbers_from_the_csv():
    """Are bandwidths bytes/ns, sectors/request a ratio, FLOPs 2 per FMA, stalls shares sorted, the limiter named?"""
    d = derive(parsed())
    assert d["duration_us"] == pytest.approx(50.0)
    assert d["dram_gbps"] == pytest.approx(2 * 4 * N / 50_000)  # 2684 GB/s
    assert d["dram_pct"] == pytest.approx(80.12)
    assert d["l2_gbps"] == pytest.approx(140e6 / 50_000)
    assert d["sectors_per_request_ld"] == pytest.approx(4.0) and d["sectors_per_request_st"] == pytest.approx(4.0)
    assert d["bank_conflicts"] == 15
    assert d["gflops"] == pytest.approx((2 * 1e6 + 5e5) / 50_000)
    assert d["achieved_occupancy_pct"] == pytest.approx(85.3)
    assert d["occupancy_limiter"] == "warps"  # warps and registers both allow 8 blocks: the hardware cap first
    assert list(d["stalls"]) == ["long_scoreboard", "wait", "not_selected"]  # zero and n/a left out
    assert sum(d["stalls"].values()) == pytest.approx(1.0)
    assert d["stalls"]["long_scoreboard"] == pytest.approx(6.0 / 8.0)


def test_derived_numbers_are_none_where_not_collected():
    """With only the occupancy section, are bandwidths None (not 0) and the limiter still named?"""
    m = {k: v for k, v in parsed().items() if k in SECTIONS["occupancy"]}
    m["launch__occupancy_limit_shared_mem"] = 2.0
    d = derive(m)
    assert d["dram_gbps"] is None and d["gflops"] is None and d["sectors_per_request_ld"] is None
    assert d["occupancy_limiter"] == "shared memory" and d["stalls"] == {}


def test_sections_name_their_metrics():
    """Does each section ask for the contract's metrics, each once, and is a wrong section name refused?"""
    mem = metrics_for("memory")
    assert "dram__bytes_read.sum" in mem and "lts__t_bytes.sum" in mem
    both = metrics_for(("memory", "compute"))
    assert both.count("gpu__time_duration.sum") == 1
    assert "sm__sass_thread_inst_executed_op_ffma_pred_on.sum" in both
    assert all(m.startswith("smsp__average_warps_issue_stalled_") for m in metrics_for("stalls"))
    with pytest.raises(ValueError, match="memory"):
        metrics_for(("memroy",))


def test_unknown_metric_is_found_in_ncu_errors():
    """When ncu rejects a metric, is it the one named in the error line (and only it) that gets dropped?"""
    out = ("==PROF== Connected to process 1\n==ERROR== Failed to find metric "
           "smsp__average_warps_issue_stalled_imc_miss_per_issue_active\n")
    bad = prof._unknown_metrics(out, metrics_for("stalls"))
    assert bad == [STALL_METRIC.format("imc_miss")]


def test_profile_dict_round_trip_recomputes_derived():
    """Does to_dict/from_dict keep everything and compute `derived` again from the metrics?"""
    p = Profile(metrics=parsed(), source="ncu", device=H100, kernel="copy", launch={"grid": [65536, 1, 1]},
                date="2026-11-25", ncu_version="2025.3.1")
    data = json.loads(json.dumps(p.to_dict()))
    data["derived"] = {"dram_gbps": -1}  # stale derived numbers in a recording are not trusted
    q = Profile.from_dict(data)
    assert q.metrics == p.metrics and q.derived == p.derived and q.launch == p.launch and q.device == H100
    assert bool(q) and not bool(Profile(reason="no ncu"))


def test_table_has_units_and_reason(capsys):
    """Does the table name units in its rows, show the top stalls, and say why a profile is not live?"""
    p = Profile(metrics=parsed(), source="recorded", device=H100, kernel="copy", date="2026-11-25",
                reason="Nsight Compute is not installed here.")
    p.table()
    out = capsys.readouterr().out
    assert "DRAM bandwidth (GB/s)" in out and f"{2 * 4 * N / 50_000:.0f}" in out
    assert "sectors/request" in out and "long_scoreboard 75%" in out
    assert "recorded on NVIDIA H100" in out and "not installed" in out
    Profile(reason="There is no usable GPU here.").table()
    assert "no usable GPU" in capsys.readouterr().out


def test_roofline_point_from_counters():
    """Is the point at FLOP per DRAM byte and TFLOP/s from the counters, on the recorded ceilings' roofline?"""
    p = Profile(metrics=parsed(), source="recorded", device=H100, kernel="copy")
    ax = p.roofline()
    x, y = ax.collections[-1].get_offsets()[0]
    flop = 2 * 1e6 + 5e5
    assert x == pytest.approx(flop / (2 * 4 * N)) and y == pytest.approx(flop / 50_000 / 1e3)


# --- record and replay ------------------------------------------------------------------------------------

FAKE_KERNEL = types.SimpleNamespace(name="copy", module=types.SimpleNamespace(program=object()))


@pytest.fixture
def profiles(tmp_path, monkeypatch):
    monkeypatch.setattr(prof, "profiles_dir", lambda: tmp_path)
    return tmp_path


def test_record_then_replay_without_gpu(profiles, monkeypatch):
    """On a recording run, is a live profile recorded under the GPU's slug, and returned (same metrics) when
    live fails later? On a student's run, is nothing written?"""
    live = Profile(metrics=parsed(), source="ncu", device=H100, kernel="copy", date="2026-11-25")
    monkeypatch.setattr(prof, "_reason_no_live", lambda k: "")
    monkeypatch.setattr(prof, "_live", lambda *a, **k: live)
    monkeypatch.delenv("COURSE_RECORD_SWEEPS", raising=False)
    got = course.profile(FAKE_KERNEL, 65536, 256, record="copy")
    path = profiles / "copy-nvidia-h100-80gb-hbm3.json"
    assert got.source == "ncu" and got.name == "copy" and not path.exists()
    monkeypatch.setenv("COURSE_RECORD_SWEEPS", "1")
    course.profile(FAKE_KERNEL, 65536, 256, record="copy")
    assert json.loads(path.read_text())["metrics"] == live.metrics

    monkeypatch.setattr(prof, "_reason_no_live", lambda k: "There is no usable GPU here (no driver).")
    back = course.profile(None, record="copy")
    assert back.source == "recorded" and bool(back)
    assert back.metrics == live.metrics and back.derived == live.derived
    assert "no usable GPU" in back.reason and "recorded on NVIDIA H100" in back.reason


def test_failed_live_run_falls_back_to_the_recording(profiles, monkeypatch):
    """When ncu runs but counters are refused, is the recording returned with the refusal as its reason?"""
    (profiles / "copy-nvidia-h100-80gb-hbm3.json").write_text(json.dumps(
        Profile(metrics=parsed(), name="copy", device=H100, date="2026-11-25").to_dict()))
    monkeypatch.setattr(prof, "_reason_no_live", lambda k: "")
    monkeypatch.setattr(prof, "_live", lambda *a, **k: Profile(reason=prof._PERM))
    got = course.profile(FAKE_KERNEL, 1, 32, record="copy")
    assert got.source == "recorded" and "ERR_NVGPUCTRPERM" in got.reason


def test_recorded_profile_picks_name_exactly_and_h100_first(profiles):
    """Does 'copy' skip 'copy-strided' files, and prefer the H100's recording over another GPU's?"""
    def put(name, device, dram):
        m = dict(parsed(), **{"dram__bytes_read.sum": dram})
        p = Profile(metrics=m, name=name, device=device, date="2026-11-25")
        (profiles / f"{name}-{course.gpu_slug(device)}.json").write_text(json.dumps(p.to_dict()))
    put("copy-strided", "NVIDIA A100-SXM4-80GB", 1.0)
    put("copy", "NVIDIA A100-SXM4-80GB", 2.0)
    put("copy", H100, 3.0)
    assert course.recorded_profile("copy").metrics["dram__bytes_read.sum"] == 3.0
    assert course.recorded_profile("copy", gpu="NVIDIA A100-SXM4-80GB").metrics["dram__bytes_read.sum"] == 2.0
    assert course.recorded_profile("copy-strided").metrics["dram__bytes_read.sum"] == 1.0
    assert course.recorded_profile("transpose") is None


def test_no_kernel_and_no_recording_says_both(profiles):
    """Without a kernel and without a recording, is the empty profile falsy with both reasons, not an error?"""
    p = course.profile(None, record="never-recorded")
    assert p.source == "none" and not p
    assert "No compiled kernel" in p.reason and "never-recorded" in p.reason
    with pytest.raises(ValueError, match="clock_control"):
        course.profile(None, clock_control="boost")
    with pytest.raises(course.LaunchError, match="course.Kernel"):
        course.profile(object(), 1, 1)


def test_arguments_are_described_for_the_child(tmp_path):
    """Are NumPy scalars passed with their dtype, Python numbers as they are, and anything else refused?"""
    spec = prof._arg_spec(0, np.float32(2.5), tmp_path, FAKE_KERNEL)
    assert spec == {"kind": "scalar", "dtype": "<f4", "value": 2.5}
    assert prof._arg_spec(1, np.int64(7), tmp_path, FAKE_KERNEL)["dtype"] == "<i8"
    assert prof._arg_spec(2, 3, tmp_path, FAKE_KERNEL) == {"kind": "python", "value": 3}
    with pytest.raises(course.LaunchError, match="argument 3"):
        prof._arg_spec(3, np.zeros(4), tmp_path, FAKE_KERNEL)  # a host array cannot be a kernel argument


FAKE_CUPY = '''
import json, os
class _Fn:
    max_dynamic_shared_size_bytes = 0
    def __call__(self, grid, block, args, shared_mem=0):
        import numpy as np
        desc = [{"type": type(a).__name__, "dtype": str(getattr(a, "dtype", "")),
                 "value": a.tolist() if hasattr(a, "tolist") else a} for a in args]
        json.dump({"grid": grid, "block": block, "args": desc, "shared_mem": shared_mem,
                   "opt_in": self.max_dynamic_shared_size_bytes, "symbol": self.symbol, "path": self.path},
                  open(os.environ["FAKE_OUT"], "w"))
class RawModule:
    def __init__(self, path):
        self.path = path
    def get_function(self, name):
        f = _Fn(); f.symbol = name; f.path = self.path
        return f
def asarray(x):
    return x
class _Dev:
    def synchronize(self):
        pass
class cuda:
    Device = _Dev
'''


def test_child_script_rebuilds_the_launch(tmp_path):
    """Does the child load the cubin's symbol and relaunch with the same arrays, scalar types and shared memory?"""
    fake = tmp_path / "fake"
    (fake / "cupy").mkdir(parents=True)
    (fake / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    x = np.arange(6, dtype=np.float32)
    np.save(tmp_path / "arg0.npy", x)
    spec = {"grid": [3, 1, 1], "block": [128, 1, 1], "shared_mem": 64 * 1024, "cubin": str(tmp_path / "k.cubin"),
            "symbol": "_Z4copyPKfPfi", "args": [{"kind": "array", "path": str(tmp_path / "arg0.npy")},
                                                {"kind": "scalar", "dtype": "<i4", "value": 6},
                                                {"kind": "python", "value": 1.5}]}
    (tmp_path / "launch.json").write_text(json.dumps(spec))
    out = tmp_path / "out.json"
    env = dict(os.environ, PYTHONPATH=str(fake), FAKE_OUT=str(out))
    script = prof._CHILD.format(spec=str(tmp_path / "launch.json"))
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=tmp_path)
    got = json.loads(out.read_text())
    assert got["symbol"] == "_Z4copyPKfPfi" and got["path"].endswith("k.cubin")
    assert got["grid"] == [3, 1, 1] and got["block"] == [128, 1, 1] and got["shared_mem"] == 65536
    assert got["opt_in"] == 65536  # above 48 KiB the child opts in, as Kernel does
    assert got["args"][0] == {"type": "ndarray", "dtype": "float32", "value": x.tolist()}
    assert got["args"][1] == {"type": "int32", "dtype": "int32", "value": 6}
    assert got["args"][2]["value"] == 1.5


FAKE_NCU = """#!{python}
import json, os, subprocess, sys
args = sys.argv[1:]
if "--version" in args:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 36273991)")
    sys.exit(0)
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
metrics = args[args.index("--metrics") + 1].split(",")
reject = os.environ.get("FAKE_REJECT")
if reject and reject in metrics:
    print("==ERROR== Failed to find metric " + reject.rsplit(".", 1)[0])
    sys.exit(1)
child = subprocess.run(args[-2:], capture_output=True, text=True)
print(child.stdout + child.stderr, end="")
rows = json.loads(os.environ["FAKE_ROWS"])
print(os.environ["FAKE_HEAD"])
for m in metrics:
    if m in rows:
        print(os.environ["FAKE_ROW"].format(metric=m, unit=rows[m][0], value=rows[m][1]))
"""


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch, profiles):
    """A stand-in `ncu` that logs its arguments, runs the child (with a stand-in CuPy) and prints CSV_ROWS."""
    ncu_exe = tmp_path / "ncu"
    ncu_exe.write_text(FAKE_NCU.format(python=sys.executable))
    ncu_exe.chmod(0o755)
    fake = tmp_path / "fake"
    (fake / "cupy").mkdir(parents=True)
    (fake / "cupy" / "__init__.py").write_text(FAKE_CUPY)
    log = tmp_path / "ncu.log"
    monkeypatch.setenv("NCU", str(ncu_exe))
    monkeypatch.setenv("PYTHONPATH", str(fake))
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.setenv("COURSE_RECORD_SWEEPS", "1")   # a recording run, into tmp_path
    monkeypatch.setenv("FAKE_OUT", str(tmp_path / "launch.out"))
    monkeypatch.setenv("FAKE_ROWS", json.dumps({m: (u, v) for m, u, v in CSV_ROWS}))
    monkeypatch.setenv("FAKE_HEAD", _HEAD)
    monkeypatch.setenv("FAKE_ROW", _row("{metric}", "{unit}", "{value}"))
    from course import _env
    monkeypatch.setattr(_env, "device_info", lambda: types.SimpleNamespace(name=H100))
    monkeypatch.setattr(prof, "_reason_no_live", lambda k: "")
    program = types.SimpleNamespace(cubin=b"\x7fELF-not-really", lowered_names={"copy": "_Z4copyPKfPfi"})
    kernel = types.SimpleNamespace(name="copy", module=types.SimpleNamespace(program=program),
                                   convert_args=lambda args: tuple(args))
    return kernel, log, tmp_path / "launch.out"


def test_live_profile_through_a_stand_in_ncu(fake_ncu):
    """Does profile() call ncu with the clock, name and unit flags, the child relaunch the kernel's symbol with its
    arguments, and the CSV come back as a live, recorded Profile?"""
    kernel, log, launched = fake_ncu
    p = course.profile(kernel, (4, 2), 128, np.int32(7), 2.5, sections=("memory", "occupancy"),
                       record="copy-live")
    assert p.source == "ncu" and p.reason == "" and p.ncu_version == "2025.3.1.0", p.reason
    args = json.loads(log.read_text().splitlines()[0])
    flags = dict(zip(args, args[1:]))
    assert flags["--clock-control"] == "none" and flags["--kernel-name-base"] == "mangled"
    assert flags["--print-units"] == "base" and flags["--kernel-name"] == "_Z4copyPKfPfi"
    assert set(flags["--metrics"].split(",")) == set(metrics_for(("memory", "occupancy")))
    child = json.loads(launched.read_text())
    assert child["symbol"] == "_Z4copyPKfPfi" and child["grid"] == [4, 2, 1] and child["block"] == [128, 1, 1]
    assert child["args"][0] == {"type": "int32", "dtype": "int32", "value": 7} and child["args"][1]["value"] == 2.5
    assert p.derived["dram_gbps"] == pytest.approx(2 * 4 * N / 50_000)
    assert p.launch == {"grid": [4, 2, 1], "block": [128, 1, 1], "shared_mem": 0}
    assert course.recorded_profile("copy-live").metrics == p.metrics


def test_metric_unknown_to_ncu_is_dropped_and_noted(fake_ncu, monkeypatch):
    """When this ncu does not know one metric, is the profile taken again without it, and the gap noted?"""
    kernel, log, _ = fake_ncu
    bad = STALL_METRIC.format("imc_miss")
    monkeypatch.setenv("FAKE_REJECT", bad)
    p = course.profile(kernel, 1, 32, sections=("stalls",))
    assert p.source == "ncu" and len(log.read_text().splitlines()) == 2
    assert bad not in p.metrics and any("imc_miss" in n for n in p.notes)
    assert list(p.derived["stalls"])[0] == "long_scoreboard"


def test_refused_counters_fall_back_with_the_reason(fake_ncu, monkeypatch):
    """When ncu prints ERR_NVGPUCTRPERM, is the result empty (no recording) with the teacher's explanation?"""
    kernel, _, _ = fake_ncu
    monkeypatch.setenv("FAKE_ROWS", "{}")
    monkeypatch.setenv("FAKE_HEAD", "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    p = course.profile(kernel, 1, 32, sections=("memory",))
    assert not p and p.source == "none" and "administrator" in p.reason


# --- GPU -------------------------------------------------------------------------------------------------

COPY = r'''
extern "C" __global__ void copy_f32(const float* __restrict__ x, float* __restrict__ y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
'''


@pytest.mark.gpu
def test_profile_of_a_copy_kernel(tmp_path, monkeypatch):
    """Under ncu, does a float copy read 4 bytes per element from DRAM and write 4 (less what L2 still holds at
    the end), at > 0 GB/s, with 4 sectors per request of 32 lanes x 4 bytes, and is it recorded and replayed?"""
    import cupy
    if ncu.ncu_path() is None:
        pytest.skip("Nsight Compute (ncu) is not installed on this GPU machine")
    monkeypatch.setattr(prof, "profiles_dir", lambda: tmp_path)
    monkeypatch.setenv("COURSE_RECORD_SWEEPS", "1")   # a recording run, into tmp_path
    k = course.compile(COPY).kernel("copy_f32")
    n = 1 << 26                         # 256 MiB a side: four times the largest L2 (the H200's 60 MiB)
    x = cupy.random.random(n, dtype=cupy.float32)
    y = cupy.zeros_like(x)
    p = course.profile(k, course.grid_for(n, 256), 256, x, y, n, sections=("memory", "occupancy"),
                       record="copy-test")
    if p.source != "ncu" and "ERR_NVGPUCTRPERM" in p.reason:
        pytest.skip(p.reason)
    assert p.source == "ncu", p.reason
    d = p.derived
    assert d["dram_gbps"] > 0 and d["duration_us"] > 0
    assert d["sectors_per_request_ld"] == pytest.approx(4.0, abs=0.05)
    assert d["sectors_per_request_st"] == pytest.approx(4.0, abs=0.05)
    # every input byte is read from DRAM once; of the output, up to an L2's worth of the last writes may still
    # sit in L2 when the kernel ends (on the H200, 19 MB of a 64 MiB output), uncounted
    assert p.metrics["dram__bytes_read.sum"] == pytest.approx(4 * n, rel=0.05)
    written, l2 = p.metrics["dram__bytes_write.sum"], course.device_info().l2_bytes
    assert 4 * n - l2 - 0.05 * 4 * n <= written <= 1.05 * 4 * n, (written, l2)
    assert d["achieved_occupancy_pct"] > 0 and d["occupancy_limiter"] in course.occupancy.LIMITERS
    assert float(y[12345]) == 0.0  # the child ran the kernel; the notebook's arrays are untouched
    back = course.recorded_profile("copy-test")
    assert back is not None and back.metrics == p.metrics


def test_lesson_recordings_round_trip_and_prefer_the_h100(profiles):
    """Does a lesson's own recording come back by its exact name, an H100's before another GPU's?"""
    prof.save_recording("11-clocks", {"t": [0.0, 0.1]}, "NVIDIA H200")
    assert prof.load_recording("11-clocks")["device"] == "NVIDIA H200"
    prof.save_recording("11-clocks", {"t": [0.0]}, H100)
    prof.save_recording("11-clocks-idle", {"t": [9.0]}, H100)
    got = prof.load_recording("11-clocks")
    assert got["device"] == H100 and got["t"] == [0.0]
    assert prof.load_recording("11-smi") is None
    with pytest.raises(ValueError, match="names a file"):
        prof.save_recording("../x", {}, H100)
