"""course.cute: where CuTe's headers are found, in which order, and what is said where they are not (no GPU)."""
import pytest

from repo_helpers import import_course


@pytest.fixture
def cute(monkeypatch):
    course = import_course()
    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    return course.cute


def _checkout(root, version=(4, 3, 1)):
    (root / "include" / "cute").mkdir(parents=True)
    (root / "include" / "cute" / "tensor.hpp").write_text("#pragma once\n")
    (root / "include" / "cutlass").mkdir()
    (root / "include" / "cutlass" / "version.h").write_text(
        "".join(f"#define CUTLASS_{p} {v}\n" for p, v in zip(("MAJOR", "MINOR", "PATCH"), version)))
    return root


def test_cutlass_path_comes_first(cute, monkeypatch, tmp_path):
    """Is $CUTLASS_PATH/include taken ahead of the wheel, with its version and the NVRTC options it needs?"""
    monkeypatch.setenv("CUTLASS_PATH", str(_checkout(tmp_path)))
    inc = str((tmp_path / "include").resolve())
    assert cute.available() == (True, inc) and cute.version() == "4.3.1"
    assert cute.compile_options() == (f"-I{inc}", "-default-device")
    assert import_course().library_options(["cute"]) == cute.compile_options()


def test_a_cutlass_path_without_cute_is_an_error_not_a_fallback(cute, monkeypatch, tmp_path):
    """Does a CUTLASS_PATH that holds no include/cute say so, even where the wheel would have served?"""
    monkeypatch.setenv("CUTLASS_PATH", str(tmp_path))
    with pytest.raises(import_course().FeatureUnavailable, match="include/cute"):
        cute.include_dir()


def test_without_either_the_message_says_what_to_install(cute, monkeypatch):
    """With neither CUTLASS_PATH nor the wheel, is the answer the install line, never a traceback from available()?"""
    monkeypatch.setattr(cute, "_from_wheel", lambda: None)
    ok, why = cute.available()
    assert not ok and why == cute.MISSING and "pip install 'nvidia-cutlass>=4.2,<5'" in why
    with pytest.raises(ValueError, match="unknown header library"):
        import_course().library_options(["thrust"])


def test_the_wheel_is_found_without_importing_it(cute):
    """Where nvidia-cutlass is installed, are its headers found without importing cutlass_library (which pulls in
    scipy and networkx)?"""
    import sys
    if cute._from_wheel() is None:
        pytest.skip("the nvidia-cutlass wheel (the `cute` extra) is not installed here")
    assert cute.include_dir().endswith("cutlass_library/source/include") and "cutlass_library" not in sys.modules
