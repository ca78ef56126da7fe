"""Find the CUDA headers NVRTC needs on pip-only, conda, Colab and system installs.

NVRTC ships no headers of its own beyond its builtins. `mma.h` includes `crt/mma.h`, and
cooperative groups and `cuda/pipeline` include libcu++ (`cuda/std/...`); where those live differs
per install (pip's `nvidia/cu13/include` plus `include/cccl`, pip CUDA 12's per-component folders,
conda's `targets/<arch>/include`, a system toolkit), so we look in all of them, most specific first.
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

__all__ = ["include_dirs", "missing_headers", "LIBRARIES", "library_options"]

# headers the course's kernels include, with the install that provides them
_NEEDED = {
    "cuda_fp16.h": "the CUDA runtime headers (pip: nvidia-cuda-runtime)",
    "cuda_bf16.h": "the CUDA runtime headers (pip: nvidia-cuda-runtime)",
    "mma.h": "the CUDA runtime headers (pip: nvidia-cuda-runtime)",
    "crt/mma.h": "the CUDA C runtime headers (pip: nvidia-cuda-crt; CUDA 12: nvidia-cuda-nvcc-cu12)",
    "cooperative_groups.h": "the CUDA runtime headers (pip: nvidia-cuda-runtime)",
    "cuda/pipeline": "libcu++ from CCCL (pip: nvidia-cuda-cccl)",
    "cuda/std/type_traits": "libcu++ from CCCL (pip: nvidia-cuda-cccl)",
}


def _site_dirs():
    seen = []
    for p in sys.path:
        if p and os.path.isdir(os.path.join(p, "nvidia")) and p not in seen:
            seen.append(p)
    return seen


def _candidates():
    out = []
    pip_only = os.environ.get("COURSE_HEADERS", "").lower() == "pip"
    for site in _site_dirs():
        nv = Path(site) / "nvidia"
        # CUDA 13 wheels: one merged tree
        for cu in sorted(nv.glob("cu1*"), reverse=True):
            out += [cu / "include", cu / "include" / "cccl"]
        # CUDA 12 wheels: one folder per component
        for comp in ("cuda_runtime", "cuda_nvrtc", "cuda_nvcc", "cuda_cccl", "cuda_crt"):
            out += [nv / comp / "include", nv / comp / "include" / "cccl"]
    if pip_only:  # prove a pip-only install is complete (tests set COURSE_HEADERS=pip)
        return out
    for var in ("CUDA_PATH", "CUDA_HOME", "CONDA_PREFIX"):
        root = os.environ.get(var)
        if root:
            out += [Path(root) / "include", Path(root) / "include" / "cccl",
                    Path(root) / "targets" / "x86_64-linux" / "include",
                    Path(root) / "targets" / "x86_64-linux" / "include" / "cccl",
                    Path(root) / "targets" / "sbsa-linux" / "include"]
    out += [Path(sys.prefix) / "include", Path(sys.prefix) / "targets" / "x86_64-linux" / "include",
            Path("/usr/local/cuda/include"), Path("/usr/local/cuda/include/cccl")]
    return out


def include_dirs() -> tuple:
    """Directories to pass to NVRTC with -I, in search order, existing ones only.

    With the environment variable COURSE_HEADERS=pip only the pip wheels' folders are searched.
    """
    return _include_dirs(os.environ.get("COURSE_HEADERS", ""))


@functools.lru_cache(maxsize=4)
def _include_dirs(_mode: str) -> tuple:
    """Cached per COURSE_HEADERS mode: searching the file system on every compile is slow.

    A directory is kept only if it holds at least one CUDA header, so an unrelated
    ``$CONDA_PREFIX/include`` does not shadow anything.
    """
    dirs = []
    for d in _candidates():
        d = d.resolve() if d.exists() else d
        if d.is_dir() and str(d) not in dirs and (
                (d / "cuda_runtime.h").exists() or (d / "cuda" / "std").is_dir()
                or (d / "crt" / "mma.h").exists()):
            dirs.append(str(d))
    return tuple(dirs)


def missing_headers(dirs=None) -> dict:
    """Headers the course needs that none of ``dirs`` provides, with the package that would."""
    dirs = include_dirs() if dirs is None else dirs
    return {h: src for h, src in _NEEDED.items() if not any(os.path.exists(os.path.join(d, h)) for d in dirs)}


# Header-only libraries outside the CUDA wheels that a cell may name (`%%cuda --headers cute`); each has a module
# that finds it and says what to install where it is missing.
LIBRARIES = ("cute",)


def library_options(names) -> tuple:
    """NVRTC options for the header libraries ``names`` (``("cute",)``). Raises ValueError for an unknown name and
    FeatureUnavailable, saying what to install, for one that is not installed."""
    out = []
    for name in names:
        if name not in LIBRARIES:
            raise ValueError(f"unknown header library {name!r}; known: {', '.join(LIBRARIES)}")
        from . import cute
        out += cute.compile_options()
    return tuple(out)
