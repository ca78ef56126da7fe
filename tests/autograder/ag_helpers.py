"""Helpers for the grader's tests (a module of its own: `import conftest` is ambiguous under tests/)."""
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def make_notebook(cells, path=None):
    """A minimal nbformat-4 notebook; cells are (cell_type, source, tags)."""
    kernelspec = {"name": "python3", "language": "python", "display_name": "Python 3"}
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": kernelspec},
          "cells": [{"id": f"cell-{i}", "cell_type": t, "metadata": {"tags": list(tags)}, "source": src,
                     **({"outputs": [], "execution_count": None} if t == "code" else {})}
                    for i, (t, src, tags) in enumerate(cells)]}
    if path is not None:
        Path(path).write_text(json.dumps(nb))
    return nb


def gpu_present() -> bool:
    """Asked in a subprocess, so this test process never initializes CUDA itself."""
    try:
        r = subprocess.run([sys.executable, "-c", "import course; print(course.gpu_available())"],
                           capture_output=True, text=True, timeout=120, cwd=str(ROOT))
    except Exception:
        return False
    return r.stdout.strip().endswith("True")


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """GPUs this machine has, asked in a subprocess (this test process never initializes CUDA itself)."""
    try:
        r = subprocess.run([sys.executable, "-c", "import course; print(course.multi_gpu.gpu_count())"],
                           capture_output=True, text=True, timeout=120, cwd=str(ROOT))
        return int(r.stdout.strip().splitlines()[-1])
    except Exception:
        return 0


def no_gpu_env():
    """Environment in which CUDA sees no device, so the no-GPU path runs even on a GPU machine."""
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


from repo_helpers import nvrtc_or_skip  # noqa: F401,E402  (shared with the lesson tests)
