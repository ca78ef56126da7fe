"""CUTLASS's CuTe headers for `%%cuda` cells (chapter 13's CuTe view): where they are, and how NVRTC takes them.

CuTe is header-only C++ with guards for NVRTC (``__CUDACC_RTC__``: libcu++'s ``cuda/std`` instead of the host
standard library), so a cell compiles against it like against any CUDA header once NVRTC is told where the
headers are. They are not part of the CUDA wheels the course installs: they come with a CUTLASS checkout
(``CUTLASS_PATH``) or with the ``nvidia-cutlass`` wheel (the course's optional ``cute`` extra), which ships them
inside its ``cutlass_library`` package. A cell asks for them with ``%%cuda --headers cute``; where neither is
found, the magic prints `MISSING` and the rest of the chapter runs without that cell.
"""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from ._errors import FeatureUnavailable

__all__ = ["MISSING", "OPTIONS", "available", "include_dir", "compile_options", "version"]

MISSING = ("CuTe's headers (CUTLASS) are not installed in this Python, so this cell cannot compile. Install them "
           "with `pip install 'nvidia-cutlass>=4.2,<5'` (the course's `cute` extra; the wheel carries the "
           "headers), or set CUTLASS_PATH to a CUTLASS checkout, then restart the kernel.")

# NVRTC compiles device code only and rejects a function without __host__/__device__; a few of CUTLASS's
# constexpr helpers (cutlass/platform/platform.h, cutlass/exmy_base.h) carry neither, which nvcc takes as host
# code. -default-device makes such functions __device__ functions, which is what a kernel uses them as.
OPTIONS = ("-default-device",)

_PROBE = Path("cute") / "tensor.hpp"   # one header that says a folder holds CuTe


def _from_env() -> Path | None:
    """``$CUTLASS_PATH/include`` where CUTLASS_PATH is set (CUTLASS's own convention for a checkout); an error
    where it is set but holds no CuTe, since silently falling back to the wheel would hide the typo."""
    root = os.environ.get("CUTLASS_PATH")
    if not root:
        return None
    inc = Path(root).expanduser() / "include"
    if not (inc / _PROBE).is_file():
        raise FeatureUnavailable(f"CUTLASS_PATH is set to {root!r}, but {inc / _PROBE} does not exist: point it at "
                                 "the root of a CUTLASS checkout (the folder that holds include/cute), or unset "
                                 "it to use the nvidia-cutlass wheel.")
    return inc


def _from_wheel() -> Path | None:
    """The headers inside the installed ``cutlass_library`` package (the nvidia-cutlass wheel). find_spec does
    not import it: the package pulls in networkx and scipy at import, which finding a folder does not need."""
    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        inc = Path(loc) / "source" / "include"
        if (inc / _PROBE).is_file():
            return inc
    return None


def include_dir() -> str:
    """The folder holding ``cute/`` and ``cutlass/``: ``$CUTLASS_PATH/include`` first, else the nvidia-cutlass
    wheel's. Raises FeatureUnavailable with `MISSING` (what to install) where neither exists."""
    found = _from_env() or _from_wheel()
    if found is None:
        raise FeatureUnavailable(MISSING)
    return str(found.resolve())


def available() -> tuple:
    """(True, include folder) where CuTe's headers are found, else (False, what to do). Never raises."""
    try:
        return True, include_dir()
    except FeatureUnavailable as exc:
        return False, str(exc)


def compile_options() -> tuple:
    """NVRTC options that compile a cell including CuTe: the include folder and `OPTIONS`."""
    return (f"-I{include_dir()}", *OPTIONS)


def version() -> str:
    """CUTLASS's version as its headers state it (``cutlass/version.h``), e.g. ``"4.2.0"``."""
    text = (Path(include_dir()) / "cutlass" / "version.h").read_text(encoding="utf-8", errors="replace")
    parts = [re.search(rf"#define\s+CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else "unknown"
