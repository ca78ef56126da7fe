"""Environment probing, feature gates and the no-GPU experience."""
import pytest

import course
from course import _env


def test_supports_by_compute_capability():
    """Do the feature gates follow the compute capabilities the course documents?"""
    assert course.supports("wmma", (7, 5)) and not course.supports("cp_async", (7, 5))
    assert course.supports("cp_async", (8, 0)) and not course.supports("tma", (8, 9))
    assert course.supports("wgmma", (9, 0))
    with pytest.raises(ValueError, match="known features"):
        course.supports("warp_magic", (9, 0))


def test_require_names_feature_cc_and_fallback(monkeypatch, capsys):
    """Does a missing feature print what it is, the CC it needs and the fallback, and return False?"""
    fake = _env.DeviceInfo("Tesla T4", (7, 5), 40, 4 << 20, 65536, 1024, 16 << 30, "13.0", "13.0", "13.0", "14")
    monkeypatch.setattr(_env, "_probe", lambda: (fake, ""))
    assert course.require("cp_async") is False
    out = capsys.readouterr().out
    assert "cp.async" in out and "8.0" in out and "sm_75" in out and "instead" in out
    with pytest.raises(course.FeatureUnavailable):
        course.require("tma", strict=True)
    assert course.require("wmma") is True


def test_no_gpu_paths(monkeypatch, capsys):
    """Without a GPU: is device_info a clear NoGPUError, and preflight a paragraph, not a traceback?"""
    monkeypatch.setattr(_env, "_probe", lambda: (None, "this machine has no NVIDIA driver"))
    assert course.gpu_available() is False
    with pytest.raises(course.NoGPUError, match="Colab"):
        course.device_info()
    text = course.preflight()
    assert "No GPU here" in text and "Colab" in text and "Traceback" not in text
    assert "[no GPU]" in course.no_gpu_message("Timing the copy")


def test_slug():
    """Is the GPU slug file-name safe?"""
    assert course.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
