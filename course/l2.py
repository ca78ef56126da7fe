"""L2 persistence from Python: what the GPU offers, and a persisting access-policy window on a stream.

CuPy has no API for either, so this goes through cuda-python's runtime bindings (the course's optional
``cuda-python`` extra), in the same process and primary context as CuPy.

A window marks accesses to ``[base, base + num_bytes)`` made by work on one stream: a ``hit_ratio`` share of
its lines gets the persisting property, the rest the streaming one. Persisting lines live in a set-aside part
of L2 (``cudaLimitPersistingL2CacheSize``) and are evicted only by other persisting lines, so neither a
streaming kernel nor the course timer's L2 flush removes them. That is why `persisting` resets them on exit
and why `course.benchmark` resets them when it starts: lines left persisting by one measurement would make
the next one's data warm and its L2 smaller.
"""
from __future__ import annotations

import contextlib
import re

from ._bindings import bindings
from ._errors import FeatureUnavailable

__all__ = ["limits", "persisting", "paths_table"]

# cudaDeviceAttr values (cuda_runtime_api.h), read through CuPy so that `limits` needs no cuda-python
_L2_CACHE_SIZE, _MAX_PERSISTING_L2, _MAX_WINDOW = 38, 108, 109


def limits(device: int | None = None) -> dict:
    """L2 size, the largest set-aside for persisting lines and the largest window, in bytes (0: none)."""
    import cupy
    dev = cupy.cuda.Device().id if device is None else int(device)
    get = cupy.cuda.runtime.deviceGetAttribute
    return {"l2_bytes": get(_L2_CACHE_SIZE, dev), "max_persisting_bytes": get(_MAX_PERSISTING_L2, dev),
            "max_window_bytes": get(_MAX_WINDOW, dev)}


def paths_table(source: str, kernels, arch: str = "sm_90") -> list:
    """One row per kernel: its global loads and stores as PTX says them (the hint the source asked for) and
    as SASS says them (what the hardware is told). Compiles with NVRTC; no GPU needed."""
    from ._compile import compile_for_arch, sass_of, sass_opcodes
    prog = compile_for_arch(source, arch)
    parts = re.split(r"\.visible \.entry (\w+)\(", prog.ptx)
    ptx = dict(zip(parts[1::2], parts[2::2]))
    sass = sass_opcodes(sass_of(prog.cubin), modifiers=True)

    def found(pattern, text):
        return ", ".join(sorted(set(re.findall(pattern, text)))) or "-"
    return [{"kernel": k, "PTX loads": found(r"\bld\.global[\w.]*", ptx.get(k, "")),
             "PTX stores": found(r"\bst\.global[\w.]*", ptx.get(k, "")),
             "SASS loads": found(r"\bLDG[\w.]*", " ".join(sass.get(k, ()))),
             "SASS stores": found(r"\bSTG[\w.]*", " ".join(sass.get(k, ())))} for k in kernels]


def _ok(result, what: str):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        raise FeatureUnavailable(f"{what} failed: {getattr(err, 'name', err)}. Persisting L2 needs compute "
                                 "capability 8.0 or newer, and is refused under MIG and some virtual GPUs.")


def _window(rt, base: int, num_bytes: int, hit_ratio: float):
    value = rt.cudaStreamAttrValue()
    w = value.accessPolicyWindow
    w.base_ptr, w.num_bytes, w.hitRatio = int(base), int(num_bytes), float(hit_ratio)
    w.hitProp = rt.cudaAccessProperty.cudaAccessPropertyPersisting
    w.missProp = rt.cudaAccessProperty.cudaAccessPropertyStreaming
    return value


@contextlib.contextmanager
def persisting(array, *, stream, hit_ratio: float | None = None):
    """Make ``array``'s lines persist in L2 for work launched on ``stream`` (a `cupy.cuda.Stream`) inside the
    block; yields ``{"window_bytes", "set_aside_bytes", "hit_ratio"}``.

    The set-aside is as large as the array or the GPU allows; ``hit_ratio`` defaults to the share of the
    window that fits in it (a larger share would make persisting lines evict each other). On exit the window
    is removed, the persisting lines are reset to normal and the set-aside is returned to ordinary use.
    """
    rt = bindings("runtime", "A persisting L2 window")
    lim = limits()
    if not lim["max_persisting_bytes"]:
        raise FeatureUnavailable("This GPU offers no persisting L2 (compute capability 8.0 or newer needed).")
    window = min(int(array.nbytes), lim["max_window_bytes"])
    set_aside = min(window, lim["max_persisting_bytes"])
    ratio = min(1.0, set_aside / window) if hit_ratio is None else float(hit_ratio)
    attr = rt.cudaStreamAttrID.cudaLaunchAttributeAccessPolicyWindow
    _ok(rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, set_aside), "cudaDeviceSetLimit")
    try:
        _ok(rt.cudaStreamSetAttribute(stream.ptr, attr, _window(rt, array.data.ptr, window, ratio)),
            "cudaStreamSetAttribute")
        yield {"window_bytes": window, "set_aside_bytes": set_aside, "hit_ratio": ratio}
    finally:
        stream.synchronize()
        rt.cudaStreamSetAttribute(stream.ptr, attr, _window(rt, 0, 0, 0.0))
        rt.cudaCtxResetPersistingL2Cache()
        rt.cudaDeviceSetLimit(rt.cudaLimit.cudaLimitPersistingL2CacheSize, 0)
