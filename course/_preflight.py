"""The first cell of every notebook: what this machine can run, in one glance."""
from __future__ import annotations

from ._env import FEATURES, _probe, device_info, gpu_available, supports
from ._headers import include_dirs, missing_headers

__all__ = ["preflight"]


def _nvrtc_version():
    try:
        from cupy_backends.cuda.libs import nvrtc
        return "%d.%d" % nvrtc.getVersion()
    except Exception:
        return None


def preflight(measure: bool = True) -> str:
    """Print what this machine offers the course and return the same text. Never raises.

    With a GPU: name, compute capability, SMs, L2, memory, driver/runtime/NVRTC/CuPy versions, the
    feature gates (sm_75/sm_80/sm_90/sm_90a) and the measured ceilings (measured on first use, about
    15 s, then cached). Without one: a paragraph on what still works and where to get a GPU.
    """
    try:
        text = _preflight_text(measure)
    except Exception as exc:  # the first cell must never show a traceback
        text = f"Preflight could not finish ({type(exc).__name__}: {exc}). The rest of the notebook may still work."
    print(text)
    return text


def _preflight_text(measure: bool) -> str:
    lines = []
    nv = _nvrtc_version()
    miss = missing_headers()
    if not gpu_available():
        why = _probe()[1]
        lines += [
            "No GPU here (" + why + ").",
            "What still works: reading every lesson, the CPU visualizers (sector, bank and fragment "
            "diagrams), index arithmetic, plots of results recorded on real GPUs, and compiling every "
            "kernel with NVRTC" + (f" {nv}" if nv else " (not installed: run the README's lab command)")
            + " for sm_75/sm_80/sm_90 to see its registers and shared memory. Cells that need a GPU say so in "
            "one sentence and are skipped.",
            "To run the kernels: open the notebook in Google Colab (Runtime > Change runtime type > T4 or "
            "better) or use any machine with an NVIDIA GPU and the README's lab command.",
        ]
        try:
            from ._ceilings import recorded_ceilings
            lines.append("Recorded ceilings used for plots: " + str(recorded_ceilings()))
        except Exception:
            pass
        return "\n".join(lines)
    d = device_info()
    lines.append(f"GPU: {d.name} | compute capability {d.cc[0]}.{d.cc[1]} ({d.arch}) | {d.sm_count} SMs | "
                 f"L2 {d.l2_bytes / 2**20:.0f} MiB | {d.total_memory / 2**30:.0f} GiB | "
                 f"max {d.smem_per_block_optin // 1024} KiB shared per block")
    lines.append(f"Driver {d.driver} | runtime {d.runtime} | NVRTC {d.nvrtc} | CuPy {d.cupy}")
    gates = []
    for f, (cc, what, _fb) in FEATURES.items():
        gates.append(f"{'yes' if supports(f) else 'no '} {f} (sm_{cc[0]}{cc[1]}{'a' if f == 'wgmma' else ''})")
    lines.append("Features: " + ", ".join(gates))
    if miss:
        lines.append("Missing CUDA headers (WMMA/bf16/cooperative groups cells will fail to compile): "
                     + "; ".join(f"{h} from {s}" for h, s in miss.items()))
    else:
        lines.append(f"Headers: all found ({len(include_dirs())} include folders)")
    if measure:
        from ._ceilings import ceilings
        lines.append("Ceilings: " + str(ceilings()))
    return "\n".join(lines)
