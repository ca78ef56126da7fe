#!/usr/bin/env python3
"""Carry the course's Python dependencies to a machine without internet, as wheels.

    python3 tools/wheelhouse.py build DIR [--python-version 3.12] [--platform manylinux_2_28_x86_64]
                                          [--cuda 13] [--for all|lab|test] [--minimal]
                                          [--extra cublaslt] [--skip NAME ...]
    python3 tools/wheelhouse.py install DIR [--target T]

`build` resolves the dependencies from pyproject.toml for the target Python and platform (pip's
resolver, dry run), drops what is not wanted, and downloads exact pins with --no-deps:
  --for test  skips JupyterLab, the notebook server and babel (grading and tests need none of them)
  --minimal   skips what a typical CUDA Python image already has (numpy, matplotlib, CuPy, ...)
A skipped package's own dependencies are dropped too, unless something kept still needs them.

`install` installs every wheel in DIR with --no-index --no-deps, with the running Python (run it with
the target's python3); with --target T, add T to PYTHONPATH afterwards. Or let the bootstrap use
the wheelhouse: COURSE_WHEELHOUSE=DIR python3 tools/bootstrap.py test
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # pip vendors packaging, so a bare Python with pip still works
    from pip._vendor.packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent

# Not needed to grade or test: the lab front end and the translations its server loads.
LAB_ONLY = {"jupyterlab", "notebook", "babel"}
# Present on a typical CUDA Python image (and on the course's GPU test machine).
PREINSTALLED = {
    "numpy", "matplotlib", "jinja2", "pyyaml", "pytest", "tqdm", "nvidia-ml-py",
    "cupy-cuda12x", "cupy-cuda13x", "cuda-python", "cuda-bindings", "cuda-core", "cuda-pathfinder",
    "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-cuda-cccl",
    "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12", "nvidia-cuda-cccl-cu12",
    "nvidia-cuda-nvcc-cu12",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def expand_platform(tag: str) -> list[str]:
    """A manylinux tag and every older one it can install (pip's --platform takes exact tags)."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", tag)
    legacy = re.fullmatch(r"manylinux(2014|2010|1)_(\w+)", tag)
    if legacy:
        glibc = {"2014": 17, "2010": 12, "1": 5}[legacy.group(1)]
        m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", f"manylinux_2_{glibc}_{legacy.group(2)}")
    if not m or m.group(1) != "2":
        return [tag]
    minor, arch = int(m.group(2)), m.group(3)
    tags = [f"manylinux_2_{v}_{arch}" for v in range(minor, 4, -1)]
    aliases = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{aliases[v]}_{arch}" for v in sorted(aliases, reverse=True) if v <= minor]
    return tags


def platform_options(python_version: str, platform: str) -> list[str]:
    opts = ["--only-binary=:all:", "--python-version", python_version]
    for tag in expand_platform(platform):
        opts += ["--platform", tag]
    return opts


def read_requirements(wants: str, cuda: str, extras: list[str]) -> list[str]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        sys.exit("wheelhouse: reading pyproject.toml needs Python 3.11 or newer")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    reqs = list(project["dependencies"]) + optional[f"cuda{cuda}"]
    for extra in (["test"] if wants in ("all", "test") else []) + extras:
        reqs += optional[extra]
    return reqs


def skip_set(wants: str, minimal: bool, extra_skips: list[str]) -> set[str]:
    skips = {canonical(s) for s in extra_skips}
    if wants == "test":
        skips |= LAB_ONLY
    if minimal:
        skips |= PREINSTALLED
    return skips


def resolve_command(reqs: list[str], report: str, target: str, opts: list[str]) -> list[str]:
    return [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
            "--disable-pip-version-check", "--report", report, "--target", target, *opts, *reqs]


def download_command(pins: list[str], dest: str, opts: list[str]) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
            "--disable-pip-version-check", "--dest", dest, *opts, *pins]


def install_command(wheels: list[str], target: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
           "--disable-pip-version-check"]
    if target:
        cmd += ["--upgrade", "--target", target]
    return cmd + wheels


def marker_env(python_version: str, platform: str) -> dict[str, str]:
    machine = "aarch64" if platform.endswith("aarch64") else "x86_64"
    return {"python_version": python_version, "python_full_version": f"{python_version}.0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": machine,
            "os_name": "posix", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "extra": ""}


def applies(req: Requirement, env: dict[str, str], extras: frozenset[str]) -> bool:
    if req.marker is None:
        return True
    return any(req.marker.evaluate({**env, "extra": e}) for e in ("", *extras))


def keep_reachable(resolved: dict[str, dict], roots: list[str], skips: set[str],
                   env: dict[str, str]) -> list[str]:
    """Names reachable from `roots` in the resolved graph without passing through `skips`.

    `resolved` maps canonical name -> pip report metadata (name, version, requires_dist).
    """
    kept: set[str] = set()
    seen: set[tuple[str, frozenset[str]]] = set()
    stack = [(canonical(r.name), frozenset(r.extras))
             for r in map(Requirement, roots) if applies(r, env, frozenset())]
    while stack:
        name, extras = stack.pop()
        if name in skips or (name, extras) in seen or name not in resolved:
            continue
        seen.add((name, extras))
        kept.add(name)
        for line in resolved[name].get("requires_dist") or []:
            req = Requirement(line)
            if applies(req, env, extras):
                stack.append((canonical(req.name), frozenset(req.extras)))
    return sorted(kept)


def build(args: argparse.Namespace) -> int:
    dest = Path(args.dir).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    reqs = read_requirements(args.wants, args.cuda, args.extra)
    if not args.minimal:
        reqs.append("setuptools>=64")  # the build backend, for `pip install -e .` offline
    opts = platform_options(args.python_version, args.platform)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = resolve_command(reqs, str(report), str(Path(tmp) / "target"), opts)
        print(f"wheelhouse: resolving {len(reqs)} requirements for Python {args.python_version} "
              f"on {args.platform} ...", flush=True)
        if subprocess.run(cmd).returncode:
            return 1
        items = json.loads(report.read_text())["install"]
    resolved = {canonical(i["metadata"]["name"]): i["metadata"] for i in items}
    env = marker_env(args.python_version, args.platform)
    kept = keep_reachable(resolved, reqs, skip_set(args.wants, args.minimal, args.skip), env)
    pins = [f"{resolved[n]['name']}=={resolved[n]['version']}" for n in kept]
    print(f"wheelhouse: downloading {len(pins)} wheels into {dest} ...", flush=True)
    if subprocess.run(download_command(pins, str(dest), opts)).returncode:
        return 1
    report_size(dest)
    return 0


def report_size(dest: Path) -> None:
    wheels = sorted(dest.glob("*.whl"), key=lambda p: -p.stat().st_size)
    total = sum(p.stat().st_size for p in wheels)
    for p in wheels:
        print(f"  {p.stat().st_size / 2**20:8.2f} MiB  {p.name}")
    print(f"wheelhouse: {len(wheels)} wheels, {total / 2**20:.1f} MiB in {dest}")


def install(args: argparse.Namespace) -> int:
    wheels = sorted(str(p) for p in Path(args.dir).glob("*.whl"))
    if not wheels:
        print(f"wheelhouse: no wheels in {args.dir}", file=sys.stderr)
        return 1
    rc = subprocess.run(install_command(wheels, args.target)).returncode
    if rc == 0 and args.target:
        target = Path(args.target).resolve()
        # nbgrader runs its `alembic` script by name, hence PATH as well as PYTHONPATH.
        print(f"wheelhouse: installed {len(wheels)} wheels; now\n"
              f"  export PYTHONPATH={target}:$PYTHONPATH PATH={target}/bin:$PATH")
    return rc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wheelhouse.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download wheels for an offline machine", description=(
        "Download the wheels the course needs on the offline machine into DIR. The machine it is for fixes "
        "--python-version, --platform and --cuda: wheels for another Python, platform or CUDA do not install."))
    b.add_argument("dir", metavar="DIR", help="folder for the wheels (created if missing)")
    b.add_argument("--python-version", default=f"{sys.version_info[0]}.{sys.version_info[1]}", help=(
        "major.minor of the python3 that will run on the offline machine, e.g. 3.12 "
        "(default: this Python's, %(default)s)"))
    b.add_argument("--platform", default="manylinux_2_28_x86_64", help=(
        "the offline machine's wheel platform: manylinux_2_28_x86_64 takes glibc 2.28 or newer on x86-64 "
        "(and every older manylinux tag); manylinux_2_28_aarch64 for ARM (default: %(default)s)"))
    b.add_argument("--cuda", choices=("12", "13"), default="13", help=(
        "the CUDA major version of the offline machine's NVIDIA driver (nvidia-smi, 'CUDA Version'); "
        "it picks the CuPy build and NVRTC, as the bootstrap does: 13 for 13.x or no GPU, 12 for 12.x "
        "(default: %(default)s)"))
    b.add_argument("--for", dest="wants", choices=("all", "lab", "test"), default="all", help=(
        "all: JupyterLab and the tests; lab: what `bootstrap.py lab` installs; test: grading and tests "
        "without JupyterLab, the notebook server and babel (default: %(default)s)"))
    b.add_argument("--minimal", action="store_true", help=(
        "leave out what a CUDA Python image already has; the image must then have those of them the "
        "course needs: "
        + ", ".join(sorted(PREINSTALLED)) + "; and the setuptools that `pip install -e .` needs, so the "
        "result is for `wheelhouse.py install` on such an image, not for the bootstrap"))
    b.add_argument("--extra", action="append", default=[], metavar="EXTRA", help=(
        "also an optional dependency group of pyproject.toml, e.g. cublaslt for chapter 10's cuBLASLt "
        "cells (repeatable)"))
    b.add_argument("--skip", action="append", default=[], metavar="NAME", help=(
        "a package not to download, with the dependencies only it needs (repeatable)"))
    i = sub.add_parser("install", help="install the wheels of DIR, no index, no deps", description=(
        "Install every wheel in DIR with the running Python, without an index and without resolving "
        "dependencies (the wheelhouse holds them all)."))
    i.add_argument("dir", metavar="DIR", help="the folder `build` filled")
    i.add_argument("--target", metavar="T", help=(
        "install into folder T instead of the running Python's site-packages; then put T on PYTHONPATH "
        "and T/bin on PATH"))
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    return build(args) if args.command == "build" else install(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
