"""SM clock readings through NVML, so a throttled measurement shows as such."""
from __future__ import annotations

import functools

__all__ = ["sm_clock_mhz", "pcie_link"]


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


def sm_clock_mhz():
    """(current SM clock, max SM clock) in MHz, or None when NVML is unavailable."""
    h = _handle()
    if h is None:
        return None
    nv, dev = h
    try:
        return (nv.nvmlDeviceGetClockInfo(dev, nv.NVML_CLOCK_SM),
                nv.nvmlDeviceGetMaxClockInfo(dev, nv.NVML_CLOCK_SM))
    except Exception:
        return None


def pcie_link():
    """(generation, width, theoretical GB/s per direction) of the GPU's PCIe link, or None."""
    h = _handle()
    if h is None:
        return None
    nv, dev = h
    try:
        gen = nv.nvmlDeviceGetCurrPcieLinkGeneration(dev)
        width = nv.nvmlDeviceGetCurrPcieLinkWidth(dev)
        gmax = nv.nvmlDeviceGetMaxPcieLinkGeneration(dev)
        wmax = nv.nvmlDeviceGetMaxPcieLinkWidth(dev)
    except Exception:
        return None
    # GB/s per lane after line coding: gen1 2.5 GT/s 8b/10b, gen2 5 GT/s, gen3+ 128b/130b
    per_lane = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
    g, w = max(gen, gmax), max(width, wmax)  # idle links downshift; the max is what transfers get
    return g, w, per_lane.get(g, 0.0) * w
