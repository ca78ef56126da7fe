"""SM clock, power, temperature and throttle readings through NVML, so a throttled measurement shows as such.

Every reader returns None (a sampler: empty lists and a ``reason``) where NVML or a GPU is missing: the
readings explain a measurement, they are never what makes a cell fail.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import threading
import time

__all__ = ["sm_clock_mhz", "pcie_link", "throttle_reasons", "power_w", "temperature_c", "sample_clocks",
           "decode_throttle", "THROTTLE_REASONS", "SMI_FIELDS", "nvidia_smi"]

# nvmlClocksEventReason* bits (nvml.h; called ClocksThrottleReason* before driver 535), in words
THROTTLE_REASONS = {
    0x1: "idle",
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake",
    0x100: "display clock setting",
}


@functools.lru_cache(maxsize=1)
def _handle():
    try:
        import pynvml
        from cupy.cuda import runtime
        import cupy
        pynvml.nvmlInit()
        bus = runtime.deviceGetPCIBusId(cupy.cuda.Device().id)
        return pynvml, pynvml.nvmlDeviceGetHandleByPciBusId(bus)
    except Exception:
        return None


def _read(fn):
    """``fn(nvml, device)``, or None where NVML, the GPU or this one reading is unavailable."""
    h = _handle()
    if h is None:
        return None
    try:
        return fn(*h)
    except Exception:
        return None


def sm_clock_mhz():
    """(current SM clock, max SM clock) in MHz, or None when NVML is unavailable."""
    return _read(lambda nv, dev: (nv.nvmlDeviceGetClockInfo(dev, nv.NVML_CLOCK_SM),
                                  nv.nvmlDeviceGetMaxClockInfo(dev, nv.NVML_CLOCK_SM)))


def pcie_link():
    """(generation, width, theoretical GB/s per direction) of the GPU's PCIe link, or None."""
    link = _read(lambda nv, dev: (nv.nvmlDeviceGetCurrPcieLinkGeneration(dev), nv.nvmlDeviceGetCurrPcieLinkWidth(dev),
                                  nv.nvmlDeviceGetMaxPcieLinkGeneration(dev), nv.nvmlDeviceGetMaxPcieLinkWidth(dev)))
    if link is None:
        return None
    gen, width, gmax, wmax = link
    # GB/s per lane after line coding: gen1 2.5 GT/s 8b/10b, gen2 5 GT/s, gen3+ 128b/130b
    per_lane = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
    g, w = max(gen, gmax), max(width, wmax)  # idle links downshift; the max is what transfers get
    return g, w, per_lane.get(g, 0.0) * w


def decode_throttle(mask: int) -> list:
    """Names of the reasons set in an NVML clocks-event bit mask (unknown bits as hex)."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    return names + ([f"other (0x{rest:x})"] if rest else [])


def _throttle_mask(nv, dev):
    # the newer name first; drivers and nvidia-ml-py releases before 535 only have the old one
    for fn in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
        if hasattr(nv, fn):
            return int(getattr(nv, fn)(dev))
    raise AttributeError("this NVML binding has no clocks-event query")


# the sampler's readings, each from (nvml, device); units as the names say (NVML reports milliwatts)
_READINGS = {
    "sm_mhz": lambda nv, dev: nv.nvmlDeviceGetClockInfo(dev, nv.NVML_CLOCK_SM),
    "power_w": lambda nv, dev: nv.nvmlDeviceGetPowerUsage(dev) / 1000.0,
    "temp_c": lambda nv, dev: float(nv.nvmlDeviceGetTemperature(dev, nv.NVML_TEMPERATURE_GPU)),
    "throttle": lambda nv, dev: decode_throttle(_throttle_mask(nv, dev)),
}


def throttle_reasons():
    """Why the SM clock is below its maximum right now, in words ([] when nothing holds it back), or None
    without NVML. "idle" only means no kernel was running at the moment of the reading."""
    return _read(_READINGS["throttle"])


def power_w():
    """The board's power draw in watts, or None without NVML."""
    return _read(_READINGS["power_w"])


def temperature_c():
    """The GPU core temperature in degrees Celsius, or None without NVML."""
    return _read(_READINGS["temp_c"])


def _sample(nv, dev, t0: float) -> dict:
    row = {"t": time.perf_counter() - t0}
    for key, read in _READINGS.items():
        try:
            row[key] = read(nv, dev)
        except Exception:  # one unsupported reading (power on some boards) must not end the sampling
            row[key] = None
    return row


def _wait_for_gpu() -> None:
    import sys
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return
    try:
        cupy.cuda.Device().synchronize()
    except Exception:
        pass


def sample_clocks(fn, *, interval_s: float = 0.01) -> dict:
    """Run ``fn()`` while a thread reads the SM clock, power, temperature and throttle reasons every
    ``interval_s`` seconds.

    Returns ``{"t": [s since start], "sm_mhz": [...], "power_w": [...], "temp_c": [...], "throttle":
    [[names], ...], "result": fn's return value}``; there is a reading before ``fn`` starts and one after
    the GPU has finished its work, so even a short ``fn`` has two. Without NVML the lists are empty and
    ``"reason"`` says why; ``fn`` runs all the same.
    """
    keys = ("t", "sm_mhz", "power_w", "temp_c", "throttle")
    out = {k: [] for k in keys}
    h = _handle()
    if h is None:
        out["result"] = fn()
        out["reason"] = ("NVML is not available here (no NVIDIA driver, no GPU, or nvidia-ml-py missing), so "
                         "no clock readings were taken; the function ran without them.")
        return out
    nv, dev = h
    stop = threading.Event()
    rows = []
    t0 = time.perf_counter()

    def loop():
        # the sampler reads until told to stop; each NVML query takes well under a millisecond
        while not stop.wait(interval_s):
            rows.append(_sample(nv, dev, t0))
    rows.append(_sample(nv, dev, t0))
    thread = threading.Thread(target=loop, name="course-nvml-sampler", daemon=True)
    thread.start()
    try:
        out["result"] = fn()
        _wait_for_gpu()  # work fn enqueued without waiting still belongs to the run being sampled
    finally:
        stop.set()
        thread.join()
        rows.append(_sample(nv, dev, t0))
    for k in keys:
        out[k] = [r[k] for r in rows]
    return out


# nvidia-smi --query-gpu fields (nvidia-smi --help-query-gpu lists them all), what a benchmark's reader wants
SMI_FIELDS = ("name", "pstate", "clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem",
              "clocks.applications.graphics", "power.draw", "power.limit", "temperature.gpu", "persistence_mode",
              "clocks_event_reasons.active", "compute_mode")


def _bus_id():
    try:
        import cupy
        return cupy.cuda.runtime.deviceGetPCIBusId(cupy.cuda.Device().id)
    except Exception:
        return None


def _smi(exe: str, fields, bus) -> dict | None:
    cmd = [exe, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"] + (["-i", bus] if bus else [])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    line = p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else ""
    values = [v.strip() for v in line.split(",")] if line else []
    return dict(zip(fields, values)) if len(values) == len(fields) else None


def nvidia_smi(fields=SMI_FIELDS) -> dict | None:
    """One ``nvidia-smi --query-gpu`` reading of the GPU CuPy uses (matched by PCI bus id, since nvidia-smi
    numbers GPUs in its own order): {field: text as nvidia-smi prints it, without units}, or None where
    nvidia-smi is missing. A field this driver's nvidia-smi does not know reads "unknown field"."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    bus = _bus_id()
    got = _smi(exe, tuple(fields), bus)
    if got is not None:
        return got
    out = {}   # one field at a time: an older driver rejects the whole query for one name it lacks
    for f in fields:
        one = _smi(exe, (f,), bus)
        out[f] = one[f] if one else "unknown field"
    return out if any(v != "unknown field" for v in out.values()) else None
