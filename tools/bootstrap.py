#!/usr/bin/env python3
"""Set up the course environment and run it: the README's two commands.

    python3 tools/bootstrap.py lab  [jupyter lab args, e.g. --no-browser --port 8899]
    python3 tools/bootstrap.py test [pytest args, e.g. -m gpu]

Creates or reuses .venv in the repository root, installs the project with the CuPy build that
matches the NVIDIA driver, registers the venv's kernel as `python3`, then runs JupyterLab or
pytest. A second run with an unchanged pyproject.toml installs nothing.

COURSE_WHEELHOUSE=DIR installs from DIR only (see tools/wheelhouse.py), for labs without internet.
Standard library only: this runs before anything is installed, on any Python >= 3.10.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
STAMP = VENV / "course-install.json"
PIP_LOG = VENV / "course-install.log"
COMMANDS = ("lab", "test")
# pytest's exit code when it collected nothing: a test run that tested nothing must not pass.
PYTEST_NO_TESTS = 5

NO_GPU_SENTENCE = (
    "No NVIDIA driver found, so this machine is the CPU tier: every kernel still compiles "
    "(NVRTC for CUDA 13) and shows its machine code (SASS, through nvdisasm), the notebooks run "
    "their CPU parts and plots of recorded results, and "
    "the CPU tests run; running and timing kernels and grading them need a GPU (Colab's free "
    "one works, see README.md)."
)


# ---- choosing the CuPy build (pure functions, unit-tested in tests/test_tools.py) ----

def parse_nvidia_smi(text: str) -> tuple[int, int] | None:
    """The driver's CUDA version from `nvidia-smi` output ("CUDA Version: 13.0"), or None."""
    m = re.search(r"CUDA Version\s*:\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def decode_driver_version(value: int) -> tuple[int, int]:
    """cuDriverGetVersion's integer (13000 = 13.0, 12040 = 12.4) as (major, minor)."""
    return value // 1000, (value % 1000) // 10


def choose_cuda_extra(version: tuple[int, int] | None) -> tuple[str, str | None]:
    """The extra to install for a driver CUDA version (None: no driver), and a note to print."""
    if version is None:
        return "cuda13", NO_GPU_SENTENCE
    if version >= (13, 0):
        return "cuda13", None
    if version >= (12, 0):
        return "cuda12", None
    return "cuda13", (
        f"The NVIDIA driver supports CUDA {version[0]}.{version[1]}, older than the 12.0 that "
        "CuPy 14 needs: kernels will compile but not run until the driver is updated."
    )


# Tried where a GPU can use them; a failure is noted, never fatal: cuBLASLt (nvmath-python, chapter 10),
# cuda-python's runtime bindings (chapter 04's persisting L2 window), Triton (chapter 15) and CUTLASS's CuTe headers
# (chapter 13's CuTe view).
OPTIONAL = ["cublaslt", "cuda-python", "triton", "cute"]
OPTIONAL_NOTES = {"cublaslt": "nvmath-python did not install here, so cuBLASLt examples use their fallback",
                  "cuda-python": "cuda-python did not install here, so chapter 04 replays its persisting-L2 row",
                  "triton": "Triton did not install here, so chapter 15 shows recorded results and its graded "
                            "Triton exercises say that Triton is missing",
                  "cute": "nvidia-cutlass (CuTe's headers) did not install here, so chapter 13's CuTe cell says what to "
                          "install and its compile test is skipped",
                  "nccl13": "NCCL did not install here, so chapter 16's NCCL cells fail and its ring exercise cannot "
                            "be timed; pip install nvidia-nccl-cu13 to add it",
                  "nccl12": "NCCL did not install here, so chapter 16's NCCL cells fail and its ring exercise cannot "
                            "be timed; pip install nvidia-nccl-cu12 to add it"}
# NCCL's wheel (chapter 16's all-reduce, and the anchor its ring exercise is timed against) for the CUDA major of
# the CuPy build, tried only on a machine with two or more GPUs: a few hundred MB nothing else needs.
NCCL = {"cuda13": "nccl13", "cuda12": "nccl12"}


def is_optional(extra: str) -> bool:
    return extra in OPTIONAL or extra in NCCL.values()


def extras_for(command: str, cuda_extra: str, gpu: bool, gpus: int = 1) -> list[str]:
    """Extras to install for `command`; cuBLASLt is tried only where a GPU can use it, NCCL where ``gpus`` >= 2.
    Triton and CuTe's headers also on a machine without one for the tests: both compile without a GPU, so the CPU
    tier tests the grader's Triton path and compiles chapter 13's CuTe cell."""
    extras = [cuda_extra]
    if command == "test":
        extras.append("test")
    if gpu:
        extras += OPTIONAL
        if gpus >= 2:
            extras.append(NCCL[cuda_extra])
    elif command == "test":
        extras += ["triton", "cute"]
    return extras


def install_digest(pyproject: bytes, python: str, wheelhouse: str | None) -> str:
    """What an install depends on besides the extras: a change re-runs pip."""
    h = hashlib.sha256(pyproject)
    h.update(python.encode())
    h.update((wheelhouse or "").encode())
    return h.hexdigest()[:16]


def missing_extras(stamp: dict | None, digest: str, extras: list[str]) -> list[str]:
    """Extras still to install given the stamp of the last install (all of them if stale)."""
    if not stamp or stamp.get("digest") != digest:
        return list(extras)
    done = set(stamp.get("extras", ())) | set(stamp.get("failed_optional", ()))
    cuda_before = [e for e in done if e.startswith("cuda")]
    if any(e.startswith("cuda") and e not in done for e in extras) and cuda_before:
        return list(extras)  # the driver changed between CUDA majors: reinstall all
    return [e for e in extras if e not in done]


def pip_install_command(python: str, extras: list[str], wheelhouse: str | None) -> list[str]:
    """pip installing the project editable with `extras`.

    editable_mode=compat puts the repository root on sys.path, so packages created after the
    install (course/, autograder/, benchmarks/ grow while the course is written) import too.
    """
    cmd = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
           "--config-settings", "editable_mode=compat",
           "-e", f"{REPO}[{','.join(extras)}]"]
    if wheelhouse:
        cmd += ["--no-index", "--find-links", wheelhouse]
    return cmd


def pytest_command(python: str, args: list[str], ci: bool, gpu: bool = False) -> list[str]:
    """pytest from the repository root; under CI, plain output and the slowest tests named. ``gpu``: this
    machine has a usable driver, so the GPU-marked tests run too (and must not run side by side)."""
    cmd = [python, "-m", "pytest"]
    if ci:
        # CI logs are read as text: no colour codes, and no -q so the closing summary line stays.
        cmd += ["--color=no", "--durations=10"]
        args = [a for a in args if not re.fullmatch(r"-q+|--quiet", a)]
    gpu_tier = gpu or any(a == "gpu" or a.startswith("gpu") for a in args)
    if not gpu_tier and not any(a == "-n" or a.startswith("-n") or a == "no:xdist" for a in args):
        # pytest-xdist: many CPU tests wait on child processes (nbgrader, Dask, NVRTC), so more workers
        # than cores still help; never for the GPU tier, whose timings need the GPU alone
        cmd += ["-n", str(min(8, max(4, os.cpu_count() or 1))), "--dist", "loadfile"]
    return cmd + list(args)


def lab_command(python: str, args: list[str], as_root: bool = False) -> list[str]:
    """JupyterLab rooted at the repository (exercises/ reachable) and opening on chapters/."""
    cmd = [python, "-m", "jupyter", "lab", f"--ServerApp.root_dir={REPO}",
           "--LabApp.default_url=/lab/tree/chapters"]
    if as_root and "--allow-root" not in args:
        cmd.append("--allow-root")  # containers and cloud GPU boxes often only have root
    return cmd + list(args)


# ---- the machine ----

def driver_cuda_version() -> tuple[int, int] | None:
    """CUDA version the installed driver supports, from nvidia-smi or libcuda; None without one."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi], capture_output=True, text=True, timeout=30)
            found = parse_nvidia_smi(out.stdout)
            if found:
                return found
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        value = ctypes.c_int(0)
        if libcuda.cuDriverGetVersion(ctypes.byref(value)) == 0 and value.value > 0:
            return decode_driver_version(value.value)
    except OSError:
        pass
    return None


def gpu_count() -> int:
    """GPUs `nvidia-smi -L` lists (0 without it)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines())


def venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv() -> str:
    python = venv_python()
    ok = python.exists() and subprocess.run(
        [str(python), "-c", "import pip"], capture_output=True).returncode == 0
    if not ok:
        # A .venv copied from elsewhere or half-built is rebuilt rather than trusted.
        print(f"bootstrap: creating {VENV.relative_to(REPO)} with Python {sys.version.split()[0]}",
              flush=True)
        if subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)]).returncode:
            sys.exit("bootstrap: could not create .venv; on Debian or Ubuntu install python3-venv "
                     "(sudo apt install python3-venv) and run this again.")
    return str(python)


def read_stamp() -> dict | None:
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return None


def run_pip(cmd: list[str]) -> bool:
    with open(PIP_LOG, "a") as log:
        log.write(f"\n$ {' '.join(cmd)}\n")
        log.flush()
        return subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT).returncode == 0


def ensure_installed(python: str, extras: list[str]) -> None:
    wheelhouse = os.environ.get("COURSE_WHEELHOUSE") or None
    digest = install_digest((REPO / "pyproject.toml").read_bytes(), python, wheelhouse)
    stamp = read_stamp()
    todo = missing_extras(stamp, digest, extras)
    if not todo and kernel_spec().exists():
        return
    if stamp and stamp.get("digest") == digest:
        kept = stamp.get("extras", [])
    else:
        kept = []
    other_cupy = {"cuda13": "cupy-cuda12x", "cuda12": "cupy-cuda13x"}
    for extra in todo:
        if extra in other_cupy:
            # Two CuPy builds in one environment shadow each other; keep only the chosen one.
            subprocess.run([python, "-m", "pip", "uninstall", "-y", "-q", other_cupy[extra]],
                           capture_output=True)
            kept = [e for e in kept if not e.startswith("cuda")]
    required = [e for e in extras if not is_optional(e)]
    source = f" from {wheelhouse}" if wheelhouse else ""
    print(f"bootstrap: installing course[{','.join(required)}] into .venv{source} "
          "(a few minutes the first time) ...", end="", flush=True)
    start = time.monotonic()
    if not run_pip(pip_install_command(python, sorted(set(kept) | set(required)), wheelhouse)):
        print(" failed.")
        # pip's warnings about unreachable indexes drown the error that matters
        lines = [ln for ln in PIP_LOG.read_text().splitlines() if not ln.startswith("WARNING:")]
        tail = lines[-25:]
        sys.exit(f"bootstrap: pip failed; the end of {PIP_LOG.relative_to(REPO)}:\n"
                 + "\n".join(tail))
    print(f" done in {time.monotonic() - start:.0f} s.", flush=True)
    failed = []
    for extra in (e for e in todo if is_optional(e)):
        if not run_pip(pip_install_command(python, [extra], wheelhouse)):
            failed.append(extra)
            print(f"bootstrap: {OPTIONAL_NOTES[extra]} (details in .venv/course-install.log).")
    register_kernel(python)
    done = sorted((set(kept) | set(extras)) - set(failed))
    STAMP.write_text(json.dumps({"digest": digest, "extras": done, "failed_optional": failed}))


def kernel_spec() -> Path:
    return VENV / "share" / "jupyter" / "kernels" / "python3" / "kernel.json"


def register_kernel(python: str) -> None:
    """The venv's kernel as `python3` inside the venv, so nbclient and nbgrader run the venv."""
    subprocess.run([python, "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3",
                    "--display-name", "Python 3 (CUDA course)"],
                   check=True, stdout=subprocess.DEVNULL)


def course_env() -> dict[str, str]:
    env = dict(os.environ)
    # JUPYTER_PATH outranks the user's own kernels dir, where a stale `python3` spec could
    # point at another interpreter.
    share = str(VENV / "share" / "jupyter")
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (share, env.get("JUPYTER_PATH")) if p)
    # As `source .venv/bin/activate` would: nbgrader runs the venv's `alembic` script by name.
    env["VIRTUAL_ENV"] = str(VENV)
    env["PATH"] = os.pathsep.join(p for p in (str(venv_python().parent), env.get("PATH")) if p)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # debugpy's frozen-modules warning
    return env


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"], ["help"]):
        print(__doc__.strip())
        return 0
    if len(argv) < 1 or argv[0] not in COMMANDS:
        print("usage:\n" + __doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    if sys.version_info < (3, 10):
        print(f"bootstrap: Python 3.10 or newer is needed, this is {sys.version.split()[0]}.",
              file=sys.stderr)
        return 2
    command, args = argv[0], argv[1:]
    version = driver_cuda_version()
    cuda_extra, note = choose_cuda_extra(version)
    print(note if note else f"bootstrap: driver supports CUDA {version[0]}.{version[1]}; "
          f"using CuPy for {cuda_extra.replace('cuda', 'CUDA ')}.", flush=True)
    python = ensure_venv()
    gpu = version is not None and version >= (12, 0)
    ensure_installed(python, extras_for(command, cuda_extra, gpu, gpu_count() if gpu else 0))
    env = course_env()
    if command == "lab":
        as_root = hasattr(os, "geteuid") and os.geteuid() == 0
        return subprocess.run(lab_command(python, args, as_root), cwd=REPO, env=env).returncode
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    rc = subprocess.run(pytest_command(python, args, ci, gpu), cwd=REPO, env=env).returncode
    if rc == PYTEST_NO_TESTS:
        print("bootstrap: pytest collected no tests, which counts as a failure "
              "(check the -m/-k selection or the tests/ folder).", file=sys.stderr)
        return 1
    return rc


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        sys.exit(130)
