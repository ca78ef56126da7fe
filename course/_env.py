"""What GPU (if any) this process can use, and which course features it supports.

Nothing here initializes CUDA at import time; `gpu_available` never raises.
"""
from __future__ import annotations

import dataclasses
import functools
import re

from ._errors import FeatureUnavailable, NoGPUError

__all__ = [
    "DeviceInfo", "FEATURES", "gpu_available", "device_info", "require", "supports",
    "gpu_slug", "no_gpu_message",
]

# feature -> (minimum compute capability, what it is, the fallback the course uses without it)
FEATURES = {
    "wmma": ((7, 0), "WMMA tensor-core fragments (f16 in, f32 accumulate)",
             "the FP32 shared-memory GEMM"),
    "bf16_mma": ((8, 0), "bf16 tensor-core MMA (mma.sync m16n8k16 .bf16)",
                 "f16 inputs with m16n8k8 on sm_75"),
    "cp_async": ((8, 0), "asynchronous global-to-shared copies (cp.async)",
                 "ordinary loads into shared memory with __syncthreads"),
    "ldmatrix": ((7, 5), "ldmatrix shared-to-register fragment loads",
                 "per-thread shared-memory loads"),
    "clusters": ((9, 0), "thread-block clusters and distributed shared memory",
                 "one block per tile, exchanging data through global memory"),
    "tma": ((9, 0), "the Tensor Memory Accelerator (cp.async.bulk.tensor)",
            "cp.async multi-stage pipelines"),
    "wgmma": ((9, 0), "warpgroup MMA (wgmma, needs the sm_90a target)",
              "mma.sync m16n8k16 with ldmatrix"),
}

_COLAB_HINT = ("To run it, open the notebook in Google Colab and pick Runtime > Change runtime type > "
               "a GPU, or use any machine with an NVIDIA GPU and run the README's lab command there.")


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """Facts about the current GPU that the course uses for gates, tuning and plots."""

    name: str
    cc: tuple
    sm_count: int
    l2_bytes: int
    smem_per_block_optin: int
    max_threads_per_sm: int
    total_memory: int
    driver: str
    runtime: str
    nvrtc: str
    cupy: str

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"


def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


@functools.lru_cache(maxsize=1)
def _probe():
    """Return (DeviceInfo or None, reason string). Cached: the answer does not change in a process."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None, "this machine has no NVIDIA driver"
    try:
        import cupy
        from cupy.cuda import runtime
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return None, f"CuPy is not importable ({type(exc).__name__}: {exc})"
    try:
        count = runtime.getDeviceCount()
    except Exception as exc:
        return None, f"no usable CUDA driver or device ({exc})"
    if count < 1:
        return None, "the CUDA driver reports no device"
    try:
        dev = cupy.cuda.Device()
        props = runtime.getDeviceProperties(dev.id)
        attrs = dev.attributes
        try:
            from cupy_backends.cuda.libs import nvrtc
            nv = "%d.%d" % nvrtc.getVersion()
        except Exception:
            nv = "unknown"
        info = DeviceInfo(
            name=props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"]),
            cc=(int(props["major"]), int(props["minor"])),
            sm_count=int(props["multiProcessorCount"]),
            l2_bytes=int(props["l2CacheSize"]),
            smem_per_block_optin=int(attrs.get("MaxSharedMemoryPerBlockOptin", 49152)),
            max_threads_per_sm=int(props["maxThreadsPerMultiProcessor"]),
            total_memory=int(props["totalGlobalMem"]),
            driver=_version(runtime.driverGetVersion()),
            runtime=_version(runtime.runtimeGetVersion()),
            nvrtc=nv,
            cupy=cupy.__version__,
        )
    except Exception as exc:
        return None, f"the GPU could not be queried ({exc})"
    return info, ""


def gpu_available() -> bool:
    """True when CuPy imports and a CUDA device answers; never raises."""
    return _probe()[0] is not None


def device_info() -> DeviceInfo:
    """Describe the current GPU.

    Raises
    ------
    NoGPUError
        With the reason (CuPy missing, no driver, no device) and where to get a GPU.
    """
    info, why = _probe()
    if info is None:
        raise NoGPUError(f"This needs an NVIDIA GPU, and none is usable here: {why}. {_COLAB_HINT}", reason=why)
    return info


def no_gpu_message(what: str = "this cell") -> str:
    """One line for a GPU cell on a machine without a GPU: what was skipped, why, and where to run it.

    ``what`` is whatever describes the skipped work, an action ("launch 3 blocks and print who ran where")
    or a thing ("The benchmark suite"); the line reads naturally with either.
    """
    what = " ".join(str(what).split()).rstrip(".:;,") or "this cell"
    return f"[no GPU] Skipped: {what} (it needs an NVIDIA GPU). {_COLAB_HINT}"


def supports(feature: str, cc: tuple | None = None) -> bool:
    """Whether compute capability ``cc`` (default: the current GPU's) has ``feature``."""
    if feature not in FEATURES:
        raise ValueError(f"unknown feature {feature!r}; known features: {', '.join(FEATURES)}")
    if cc is None:
        if not gpu_available():
            return False
        cc = device_info().cc
    return tuple(cc) >= FEATURES[feature][0]


def require(feature: str, *, strict: bool = False) -> bool:
    """Check that the current GPU has ``feature``; print why not and the fallback when it lacks it.

    Returns True when the feature is there. With ``strict=True`` a missing feature raises
    `FeatureUnavailable` instead of returning False.
    """
    need, what, fallback = FEATURES[feature] if feature in FEATURES else (None, None, None)
    if need is None:
        raise ValueError(f"unknown feature {feature!r}; known features: {', '.join(FEATURES)}")
    if supports(feature):
        return True
    have = device_info().arch if gpu_available() else "no GPU"
    msg = (f"{what} needs compute capability {need[0]}.{need[1]} (sm_{need[0]}{need[1]}) or newer; "
           f"this machine has {have}. The course uses {fallback} instead here.")
    if strict:
        raise FeatureUnavailable(msg)
    print(msg)
    return False


def gpu_slug(name: str | None = None) -> str:
    """A file-name-safe slug of the GPU name, e.g. 'nvidia-h100-80gb-hbm3'."""
    if name is None:
        name = device_info().name
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
