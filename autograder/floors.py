"""The fastest time the hardware allows for an exercise's arithmetic, from the GPU's own description.

The impossible-speed flag compares a student's time with a floor. For FLOP-bound exercises the floor
must use the exercise's own precision: an FP32 SGEMM is bounded by the FP32 SIMT rate, not by the BF16
tensor cores, which are 15x faster and would let a replaying kernel through. Peaks come from a table of
FLOPs per clock per SM (dense, upper bounds taken from NVIDIA's architecture documents) times the SM count
times the highest SM clock: an upper bound on the rate, so the floor never flags honest work. Nothing here
is read from a cache a student could plant.
"""
from __future__ import annotations

__all__ = ["PRECISIONS", "flops_per_clock_per_sm", "peak_tflops", "flop_floor_ms"]

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "int8")

# (major, minor) -> FLOPs per clock per SM, dense; FMA counts as 2. Unknown newer parts use the largest
# known figure of their precision, so the floor stays a lower bound.
_TABLE = {
    "fp32": {(7, 5): 128, (8, 0): 128, (8, 6): 256, (8, 7): 256, (8, 9): 256, (9, 0): 256, (10, 0): 256,
             (12, 0): 256},
    "tf32": {(8, 0): 1024, (8, 6): 512, (8, 7): 512, (8, 9): 512, (9, 0): 2048, (10, 0): 4096, (12, 0): 1024},
    "fp16": {(7, 5): 1024, (8, 0): 2048, (8, 6): 1024, (8, 7): 1024, (8, 9): 1024, (9, 0): 4096, (10, 0): 8192,
             (12, 0): 2048},
}
_TABLE["bf16"] = {cc: v for cc, v in _TABLE["fp16"].items() if cc >= (8, 0)}
_TABLE["int8"] = {cc: 2 * v for cc, v in _TABLE["fp16"].items()}
_FALLBACK_CLOCK_MHZ = 2600  # above any shipping data-center part: a safe upper bound


def flops_per_clock_per_sm(precision: str, cc) -> int:
    """Dense FLOPs per clock per SM for ``precision`` on compute capability ``cc``."""
    if precision not in _TABLE:
        raise ValueError(f"`precision` should be one of {', '.join(PRECISIONS)}; got {precision!r}")
    table = _TABLE[precision]
    cc = tuple(int(x) for x in cc)
    if cc in table:
        return table[cc]
    same_major = [v for k, v in table.items() if k[0] == cc[0]]
    return max(same_major or table.values())


def peak_tflops(precision: str, device: dict) -> float | None:
    """Upper bound of ``precision``'s rate on ``device`` (a probe dict: cc, sm_count, max_clock_mhz)."""
    try:
        sms = int(device["sm_count"])
        cc = device["cc"]
    except (KeyError, TypeError, ValueError):
        return None
    clock = float(device.get("max_clock_mhz") or _FALLBACK_CLOCK_MHZ)
    return flops_per_clock_per_sm(precision, cc) * sms * clock * 1e6 / 1e12


def flop_floor_ms(flops: float, precision: str, device: dict) -> float | None:
    """Milliseconds ``flops`` take at the peak rate of ``precision``; None when the device is not known."""
    peak = peak_tflops(precision, device)
    if not peak or not flops:
        return None
    return float(flops) / (peak * 1e12) * 1e3
