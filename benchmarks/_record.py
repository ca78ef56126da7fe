"""Where a benchmark record ran and how it is written: the GPU as NVML names it, the file-name slug, the UTC
time, and the pair of files `<stem>-<gpu slug>.{json,md}` under benchmarks/results."""
from __future__ import annotations

import datetime
import json
from pathlib import Path

__all__ = ["RESULTS", "device", "slug", "utc_now", "record_path", "write_record"]

RESULTS = Path(__file__).resolve().parent / "results"


def device() -> dict:
    """GPU 0's name, the GPU count and the NVIDIA driver version (NVML: what nvidia-smi prints)."""
    import pynvml
    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        return {"name": name.decode() if isinstance(name, bytes) else name,
                "count": pynvml.nvmlDeviceGetCount(), "driver": str(pynvml.nvmlSystemGetDriverVersion())}
    finally:
        pynvml.nvmlShutdown()


def slug(name: str) -> str:
    """The GPU name as the results' file names spell it ('NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3')."""
    import course
    return course.gpu_slug(name)


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def record_path(out: Path | str, stem: str, gpu_name: str) -> Path:
    """``out/<stem>-<slug>.json``; the markdown twin has the same name with ``.md``."""
    return Path(out) / f"{stem}-{slug(gpu_name)}.json"


def write_record(path: Path, result: dict, markdown: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")
    path.with_suffix(".md").write_text(markdown)
