"""course._nvml: throttle reasons, power, temperature and the clock sampler, with a fake NVML and without one
(CPU), and sampling a real GPU (GPU)."""
from __future__ import annotations

import time
import types

import pytest

from repo_helpers import import_course

course = import_course()
from course import _nvml  # noqa: E402


def fake_nvml(mask=0x4 | 0x40, *, old_name=False, power_fails=False):
    nv = types.SimpleNamespace(NVML_CLOCK_SM=1, NVML_TEMPERATURE_GPU=0)
    nv.nvmlDeviceGetClockInfo = lambda dev, which: 1755 if which == 1 else 0
    nv.nvmlDeviceGetMaxClockInfo = lambda dev, which: 1980

    def power(dev):
        if power_fails:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 312_500  # milliwatts
    nv.nvmlDeviceGetPowerUsage = power
    nv.nvmlDeviceGetTemperature = lambda dev, sensor: 64 if sensor == 0 else -1
    reasons = (lambda dev: mask)
    if old_name:
        nv.nvmlDeviceGetCurrentClocksThrottleReasons = reasons
    else:
        nv.nvmlDeviceGetCurrentClocksEventReasons = reasons
    return nv, object()


def test_without_nvml_readers_return_none(monkeypatch):
    """With no NVML (no driver), are the readers None and the sampler's lists empty with a reason, fn still run?"""
    monkeypatch.setattr(_nvml, "_handle", lambda: None)
    assert course.throttle_reasons() is None and _nvml.power_w() is None and _nvml.temperature_c() is None
    out = course.sample_clocks(lambda: "done")
    assert out["result"] == "done"
    assert all(out[k] == [] for k in ("t", "sm_mhz", "power_w", "temp_c", "throttle"))
    assert "NVML is not available" in out["reason"]


def test_throttle_reasons_decoded(monkeypatch):
    """Are the bits of the clocks-event mask named in words, with unknown bits kept as hex and none as []?"""
    monkeypatch.setattr(_nvml, "_handle", lambda: fake_nvml())
    assert course.throttle_reasons() == ["software power cap", "hardware thermal slowdown"]
    assert _nvml.decode_throttle(0) == []
    assert _nvml.decode_throttle(0x1 | 0x8) == ["idle", "hardware slowdown"]
    assert _nvml.decode_throttle(0x10000) == ["other (0x10000)"]
    monkeypatch.setattr(_nvml, "_handle", lambda: fake_nvml(0x8, old_name=True))  # drivers before 535
    assert course.throttle_reasons() == ["hardware slowdown"]


def test_power_and_temperature_units(monkeypatch):
    """Is power converted from NVML's milliwatts to watts, and the GPU sensor's temperature read?"""
    monkeypatch.setattr(_nvml, "_handle", lambda: fake_nvml())
    assert course.power_w() == pytest.approx(312.5)
    assert course.temperature_c() == 64.0


def test_sampler_reads_while_fn_runs(monkeypatch):
    """Does the sampler take readings before, during and after fn, each list as long as the times, t rising?"""
    monkeypatch.setattr(_nvml, "_handle", lambda: fake_nvml())
    out = course.sample_clocks(lambda: time.sleep(0.1) or 42, interval_s=0.005)
    assert out["result"] == 42 and "reason" not in out
    n = len(out["t"])
    assert n >= 5  # 100 ms at 5 ms: many more in practice; 5 leaves room for a loaded machine
    assert all(len(out[k]) == n for k in ("sm_mhz", "power_w", "temp_c", "throttle"))
    assert out["t"] == sorted(out["t"]) and out["t"][-1] >= 0.1
    assert set(out["sm_mhz"]) == {1755} and out["power_w"][0] == pytest.approx(312.5)
    assert out["throttle"][0] == ["software power cap", "hardware thermal slowdown"]


def test_sampler_survives_an_unsupported_reading(monkeypatch):
    """When one reading (power) is unsupported, is it None while the others are still sampled?"""
    monkeypatch.setattr(_nvml, "_handle", lambda: fake_nvml(power_fails=True))
    out = course.sample_clocks(lambda: None, interval_s=0.005)
    assert len(out["t"]) >= 2 and set(out["power_w"]) == {None} and set(out["sm_mhz"]) == {1755}


def test_sampler_stops_when_fn_raises(monkeypatch):
    """If fn raises, does the error reach the caller and the sampling thread end?"""
    import threading
    monkeypatch.setattr(_nvml, "_handle", lambda: fake_nvml())
    with pytest.raises(ZeroDivisionError):
        course.sample_clocks(lambda: 1 / 0, interval_s=0.005)
    assert not any(t.name == "course-nvml-sampler" for t in threading.enumerate())


@pytest.mark.gpu
def test_sample_clocks_on_a_busy_gpu():
    """On a GPU, does sampling 0.3 s of matrix products return readings with a running SM clock?"""
    import cupy
    if _nvml._handle() is None:
        pytest.skip("NVML is not usable on this GPU machine")
    a = cupy.random.random((4096, 4096), dtype=cupy.float32)

    def work():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.3:
            a @ a
            cupy.cuda.Device().synchronize()
    out = course.sample_clocks(work, interval_s=0.01)
    assert len(out["t"]) >= 10
    assert max(v for v in out["sm_mhz"] if v) > 100
    assert all(isinstance(r, list) for r in out["throttle"])


FAKE_SMI = """#!{python}
import sys
args = sys.argv[1:]
open({log!r}, "a").write(" ".join(args) + "\\n")
fields = [a for a in args if a.startswith("--query-gpu=")][0].split("=", 1)[1].split(",")
values = {{"name": "NVIDIA Fake", "pstate": "P0", "clocks.sm": "1980", "power.draw": "612.34"}}
unknown = [f for f in fields if f not in values]
if unknown:
    print('Field "%s" is not a valid field to query.' % unknown[0])
    sys.exit(2)
print(", ".join(values[f] for f in fields))
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    exe = tmp_path / "nvidia-smi"
    log = tmp_path / "smi.log"
    exe.write_text(FAKE_SMI.format(python=__import__("sys").executable, log=str(log)))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:" + __import__("os").environ.get("PATH", ""))
    monkeypatch.setattr(_nvml, "_bus_id", lambda: "00000000:19:00.0")
    return log


def test_nvidia_smi_reads_the_fields_of_cupys_gpu(fake_smi):
    """Does one query read every field, without units, of the GPU named by CuPy's PCI bus id?"""
    got = course.nvidia_smi(("name", "clocks.sm", "power.draw"))
    assert got == {"name": "NVIDIA Fake", "clocks.sm": "1980", "power.draw": "612.34"}
    (line,) = fake_smi.read_text().splitlines()
    assert "--format=csv,noheader,nounits" in line and "-i 00000000:19:00.0" in line


def test_nvidia_smi_keeps_the_fields_an_older_driver_knows(fake_smi):
    """When the driver rejects one field, are the others still read, one at a time, and the gap named?"""
    got = course.nvidia_smi(("pstate", "clocks_event_reasons.active", "clocks.sm"))
    assert got == {"pstate": "P0", "clocks_event_reasons.active": "unknown field", "clocks.sm": "1980"}


def test_nvidia_smi_missing_is_none(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert course.nvidia_smi() is None


@pytest.mark.gpu
def test_nvidia_smi_agrees_with_nvml_on_a_gpu():
    """On a GPU machine with nvidia-smi, do its name and maximum SM clock agree with NVML's through course?"""
    import shutil
    if shutil.which("nvidia-smi") is None or _nvml._handle() is None:
        pytest.skip("nvidia-smi or NVML is not usable on this GPU machine")
    smi = course.nvidia_smi()
    assert smi["name"] == course.device_info().name, smi
    assert float(smi["clocks.max.sm"]) == course.sm_clock_mhz()[1], smi
