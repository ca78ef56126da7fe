"""The impossible-speed floors: each exercise's own precision, from the GPU's description (no cache)."""
import pytest

from autograder.floors import flop_floor_ms, flops_per_clock_per_sm, peak_tflops

H100 = {"cc": [9, 0], "sm_count": 132, "max_clock_mhz": 1980}


def test_fp32_peak_of_an_h100_is_the_simt_rate():
    """Is an FP32 exercise's peak the SIMT rate (about 67 TFLOP/s on an H100), not the tensor cores'?"""
    assert peak_tflops("fp32", H100) == pytest.approx(66.9, rel=0.01)
    assert peak_tflops("bf16", H100) > 15 * peak_tflops("fp32", H100)


def test_an_sgemm_floor_flags_tensor_core_speed():
    """Would an FP32 SGEMM timed at cuBLAS BF16 speed (788 TFLOP/s) fall below its floor?"""
    flops = 2 * 4096 ** 3
    floor = flop_floor_ms(flops, "fp32", H100)
    assert flops / (788e12) * 1e3 < 0.75 * floor
    assert flops / (41e12) * 1e3 > floor  # the reference SGEMM (41 TFLOP/s) is well above it


def test_unknown_newer_gpus_use_the_largest_known_rate():
    """Does a compute capability the table does not know get an upper bound (a floor never too high)?"""
    assert flops_per_clock_per_sm("fp32", (13, 0)) == max(flops_per_clock_per_sm("fp32", cc) for cc in [(9, 0)])
    with pytest.raises(ValueError):
        flops_per_clock_per_sm("fp64", (9, 0))


def test_no_device_description_gives_no_floor():
    assert flop_floor_ms(1e12, "fp32", {}) is None
