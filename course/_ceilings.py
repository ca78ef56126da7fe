"""The measured ceilings of this GPU (bandwidths, matmul rates), measured once and cached."""
from __future__ import annotations

import dataclasses
import datetime
import json
from pathlib import Path

from ._compile import cache_dir

__all__ = ["Ceilings", "ceilings", "measure_ceilings", "recorded_ceilings", "results_dir"]


@dataclasses.dataclass
class Ceilings:
    """What this GPU reaches in practice; bandwidths in GB/s (1e9 B/s), rates in TFLOP/s."""

    gpu: str
    copy_gbps: float  # device-to-device copy, bytes read + written
    h2d_gbps: float  # pinned host to device
    d2h_gbps: float  # device to pinned host
    sgemm_tflops: float  # cuBLAS FP32, no tensor cores
    tf32_tflops: float
    bf16_tflops: float
    fp16_tflops: float = 0.0
    measured: str = ""  # ISO date
    versions: dict = dataclasses.field(default_factory=dict)
    source: str = "measured"  # or "recorded on <gpu>"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        return (f"copy {self.copy_gbps:.0f} GB/s | H2D {self.h2d_gbps:.1f} GB/s | D2H {self.d2h_gbps:.1f} GB/s"
                f" | SGEMM {self.sgemm_tflops:.1f} | TF32 {self.tf32_tflops:.0f} | BF16 {self.bf16_tflops:.0f}"
                f" | FP16 {self.fp16_tflops:.0f} TFLOP/s ({self.source}, {self.measured})")


def results_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def _copy_gbps(nbytes: int) -> float:
    import cupy
    from ._timing import benchmark
    src = cupy.random.random(nbytes // 8, dtype=cupy.float64)
    dst = cupy.empty_like(src)
    r = benchmark(lambda: cupy.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, 3,
                                                        cupy.cuda.get_current_stream().ptr),
                  name="d2d copy", min_samples=20, budget_s=3)
    assert bool((dst == src).all()), "device-to-device copy produced wrong data"
    return r.gbps(2 * src.nbytes)


def _transfer_gbps(nbytes: int):
    import cupy
    import numpy as np
    from ._timing import benchmark
    pinned = cupy.cuda.alloc_pinned_memory(nbytes)
    host = np.frombuffer(pinned, dtype=np.uint8, count=nbytes)
    host[:] = np.random.default_rng(0).integers(0, 255, nbytes, dtype=np.uint8)
    dev = cupy.empty(nbytes, dtype=cupy.uint8)
    s = lambda: cupy.cuda.get_current_stream().ptr  # noqa: E731
    h2d = benchmark(lambda: cupy.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, nbytes, 1, s()),
                    name="pinned H2D", flush_l2=False, min_samples=10, budget_s=3)
    d2h = benchmark(lambda: cupy.cuda.runtime.memcpyAsync(host.ctypes.data, dev.data.ptr, nbytes, 2, s()),
                    name="pinned D2H", flush_l2=False, min_samples=10, budget_s=3)
    return h2d.gbps(nbytes), d2h.gbps(nbytes)


def _gemm_tflops(compute: str, n: int = 4096) -> float:
    import cupy
    from .cublas import COMPUTE, gemm, to_bf16
    from ._timing import benchmark
    rng = cupy.random.default_rng(1)
    a32 = rng.standard_normal((n, n), dtype=cupy.float32)
    b32 = rng.standard_normal((n, n), dtype=cupy.float32)
    dt = COMPUTE[compute][1]
    if compute == "bf16":
        a, b = to_bf16(a32), to_bf16(b32)
    else:
        a, b = a32.astype(dt), b32.astype(dt)
    out = cupy.empty((n, n), dtype=COMPUTE[compute][3])
    r = benchmark(lambda: gemm(a, b, out, compute=compute), name=f"cuBLAS {compute}", min_samples=10,
                  budget_s=3)
    return r.tflops(2.0 * n ** 3)


def measure_ceilings(verbose: bool = True) -> Ceilings:
    """Measure this GPU's ceilings now (about 15 s on an H100)."""
    import cupy
    from ._env import device_info
    info = device_info()
    free = cupy.cuda.runtime.memGetInfo()[0]
    big = int(min(1 << 30, free // 8)) // 256 * 256
    steps = [("copy", lambda: _copy_gbps(big)), ("transfers", lambda: _transfer_gbps(min(256 << 20, big))),
             ("fp32", lambda: _gemm_tflops("fp32")), ("tf32", lambda: _gemm_tflops("tf32")),
             ("bf16", lambda: _gemm_tflops("bf16")), ("fp16", lambda: _gemm_tflops("fp16"))]
    got = {}
    it = steps
    if verbose:
        try:
            from tqdm.auto import tqdm
            it = tqdm(steps, desc="measuring ceilings", leave=False)
        except ImportError:
            pass
    for key, fn in it:
        got[key] = fn()
        cupy.get_default_memory_pool().free_all_blocks()
    return Ceilings(
        gpu=info.name, copy_gbps=got["copy"], h2d_gbps=got["transfers"][0], d2h_gbps=got["transfers"][1],
        sgemm_tflops=got["fp32"], tf32_tflops=got["tf32"], bf16_tflops=got["bf16"], fp16_tflops=got["fp16"],
        measured=datetime.date.today().isoformat(),
        versions={"driver": info.driver, "runtime": info.runtime, "nvrtc": info.nvrtc, "cupy": info.cupy,
                  "cc": f"{info.cc[0]}.{info.cc[1]}"})


def _cache_file(slug: str) -> Path:
    return cache_dir() / "ceilings" / f"{slug}.json"


def ceilings(refresh: bool = False) -> Ceilings:
    """This GPU's ceilings, from the cache when measured before; with no GPU, recorded ones.

    With no GPU the ceilings recorded in benchmarks/results are returned (``source`` says which GPU),
    so plots still have something real to draw against.
    """
    from ._env import gpu_available, gpu_slug
    if not gpu_available():
        return recorded_ceilings()
    slug = gpu_slug()
    f = _cache_file(slug)
    if not refresh and f.exists():
        try:
            return Ceilings(**json.loads(f.read_text()))
        except (ValueError, TypeError):
            pass  # stale format: measure again
    c = measure_ceilings()
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(c.to_dict(), indent=1))
    except OSError:
        pass
    return c


def recorded_ceilings(gpu_slug: str | None = None) -> Ceilings:
    """Ceilings recorded by the benchmark suite (benchmarks/results/<slug>.json).

    Raises
    ------
    FileNotFoundError
        When no results are recorded (or none for ``gpu_slug``).
    """
    d = results_dir()
    files = sorted(d.glob("*.json")) if gpu_slug is None else [d / f"{gpu_slug}.json"]
    for f in files:
        if f.exists():
            data = json.loads(f.read_text())
            c = data.get("ceilings")
            if c:
                c = dict(c)
                c["source"] = f"recorded on {data.get('device', {}).get('name', f.stem)}"
                return Ceilings(**c)
    raise FileNotFoundError(f"no recorded ceilings under {d}" + (f" for {gpu_slug}" if gpu_slug else ""))
