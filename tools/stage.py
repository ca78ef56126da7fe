#!/usr/bin/env python3
"""Carry a browser and a wheelhouse to an air-gapped GPU machine in parts small enough to send.

Some GPU machines are reached only through a channel that takes a few tens of MiB at a time and have
no network, no Chromium and no Node.js. This packs what the browser test and the Colab simulation
need into one xz-compressed stream, splits it into parts, and puts it back together over there:

    # here (a Debian machine with chromium and nodejs installed, and internet for the wheels):
    python3 tools/wheelhouse.py build WH --python-version 3.12 --for all --cuda 13
    python3 tools/stage.py browser BROWSER          # Chromium + Node + their libraries, fonts
    python3 tools/stage.py check BROWSER            # every library resolves inside it or to glibc
    python3 tools/stage.py compress wheels.tar.xz --wheels WH
    python3 tools/stage.py compress browser.tar.xz --browser BROWSER
    python3 tools/stage.py split .stage browser.tar.xz wheels.tar.xz --part-mib 60
    # there, one part at a time (each call carries .stage/NN), then:
    python3 tools/stage.py unpack /tmp/stage /tmp/offline
    export PATH=/tmp/offline/browser/bin:$PATH COURSE_CHROMIUM=/tmp/offline/browser/bin/chromium \\
           COURSE_WHEELHOUSE=/tmp/offline/wheels

`compress` stores each wheel unzipped (xz compresses the files far better than the wheel's deflate) and
`unpack` zips it again: a wheel's RECORD hashes the files, not the archive, so pip accepts it.
`browser` copies Debian's /usr/lib/chromium, every non-glibc library it and node link (ldd,
recursively) plus the ones NSS and fontconfig load at run time, DejaVu fonts with a fonts.conf, and
tests/browser/node_modules (playwright-core); bin/chromium and bin/node are wrappers that set
LD_LIBRARY_PATH, so the bundle runs on any x86-64 Linux whose glibc is as new as the builder's.
`unpack` needs only Python's standard library.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHROMIUM_DIR = Path("/usr/lib/chromium")
NODE = Path("/usr/bin/node")
# glibc's own libraries: the target machine's must be used (they go with its ld.so).
GLIBC = re.compile(r"^(ld-linux[-\w.]*|lib(c|m|dl|pthread|rt|resolv|util|anl|nsl|BrokenLocale|"
                   r"mvec|thread_db|nss_\w+)\.so[.\d]*)$")
# Loaded with dlopen, so ldd does not list them: NSS's crypto modules and root certificates.
DLOPENED = ["libsoftokn3.so", "libfreebl3.so", "libfreeblpriv3.so", "libnssckbi.so", "libnssdbm3.so",
            "libsoftokn3.chk", "libfreebl3.chk", "libfreeblpriv3.chk", "libnssdbm3.chk"]
LIB_DIRS = [Path("/usr/lib/x86_64-linux-gnu"), Path("/lib/x86_64-linux-gnu")]
# Not needed headless: Vulkan's validation layer and mock driver (24 MiB).
CHROMIUM_SKIP = {"libVkLayer_khronos_validation.so", "libVkLayer_khronos_validation.so.TOC",
                 "libVkICD_mock_icd.so", "libVkICD_mock_icd.so.TOC", "extensions"}
FONT_DIRS = [Path("/usr/share/fonts/truetype/dejavu")]
FONTS = re.compile(r"DejaVu(Sans|SansMono|Serif)(-Bold|-Oblique|-BoldOblique|-Italic|-BoldItalic)?\.ttf")
CHROMIUM_FLAGS = "--disable-dev-shm-usage"
WHEEL_SUFFIX = ".whl.d"
MANIFEST = "manifest.json"

CHROMIUM_WRAPPER = """#!/bin/sh
# Debian's Chromium with the libraries and fonts of this bundle (tools/stage.py browser).
here=$(dirname "$(readlink -f "$0")")/..
export LD_LIBRARY_PATH="$here/lib" FONTCONFIG_FILE="$here/fonts/fonts.conf"
exec "$here/chromium/chromium" {flags} "$@"
"""
NODE_WRAPPER = """#!/bin/sh
here=$(dirname "$(readlink -f "$0")")/..
LD_LIBRARY_PATH="$here/lib" exec "$here/node/node" "$@"
"""
FONTS_CONF = """<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <dir prefix="relative">.</dir>
  <cachedir>/tmp/course-fontconfig-cache</cachedir>
  <alias><family>sans-serif</family><prefer><family>DejaVu Sans</family></prefer></alias>
  <alias><family>serif</family><prefer><family>DejaVu Serif</family></prefer></alias>
  <alias><family>monospace</family><prefer><family>DejaVu Sans Mono</family></prefer></alias>
</fontconfig>
"""


# ---- the browser bundle ----

def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def ldd(path: Path, env: dict | None = None) -> dict[str, str | None]:
    """soname -> resolved path (None: not found), as ldd prints them."""
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env).stdout
    found: dict[str, str | None] = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(not found|\S+)", line)
        if m:
            found[m.group(1)] = None if m.group(2) == "not found" else m.group(2)
    return found


def library_closure(roots: list[Path]) -> dict[str, Path]:
    """Every non-glibc library that `roots` need, and theirs (ldd already follows the graph)."""
    libs: dict[str, Path] = {}
    todo = [r for r in roots if is_elf(r)]
    seen: set[Path] = set()
    while todo:
        elf = todo.pop()
        if elf in seen:
            continue
        seen.add(elf)
        for name, where in ldd(elf).items():
            if GLIBC.match(name):
                continue
            if where is None:
                sys.exit(f"stage: {elf} needs {name}, which is not installed here")
            if name not in libs:
                libs[name] = Path(where)
                todo.append(Path(where))
    return libs


def build_browser(dest: Path) -> int:
    for need in (CHROMIUM_DIR / "chromium", NODE):
        if not need.exists():
            sys.exit(f"stage: {need} is missing; apt-get install chromium nodejs")
    modules = REPO / "tests" / "browser" / "node_modules" / "playwright-core"
    if not modules.is_dir():
        sys.exit(f"stage: {modules} is missing; run `npm install` in tests/browser first")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "lib").mkdir(parents=True)
    shutil.copytree(CHROMIUM_DIR, dest / "chromium", symlinks=False,
                    ignore=lambda d, names: [n for n in names if n in CHROMIUM_SKIP])
    (dest / "node").mkdir()
    shutil.copy2(NODE, dest / "node" / "node")
    extra = [d / n for n in DLOPENED for d in LIB_DIRS if (d / n).exists()]
    extra = list({p.name: p for p in extra}.values())
    roots = [p for p in (dest / "chromium").rglob("*") if p.is_file()] + [dest / "node" / "node"]
    roots += [p for p in extra if p.suffix == ".so"]
    libs = library_closure(roots)
    for name, src in libs.items():
        shutil.copy2(src, dest / "lib" / name)  # follows the symlink: the soname holds the file
    for src in extra:
        shutil.copy2(src, dest / "lib" / src.name)
    fonts = dest / "fonts"
    fonts.mkdir()
    for d in FONT_DIRS:
        for f in d.glob("*.ttf"):
            if FONTS.fullmatch(f.name):
                shutil.copy2(f, fonts / f.name)
    (fonts / "fonts.conf").write_text(FONTS_CONF)
    (dest / "bin").mkdir()
    for name, text in (("chromium", CHROMIUM_WRAPPER.format(flags=CHROMIUM_FLAGS)),
                       ("node", NODE_WRAPPER)):
        (dest / "bin" / name).write_text(text)
        (dest / "bin" / name).chmod(0o755)
    shutil.copytree(REPO / "tests" / "browser" / "node_modules", dest / "node_modules", symlinks=True)
    glibc = subprocess.run(["ldd", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    (dest / "BUILT-WITH").write_text(f"{glibc}\nlibraries: {len(libs) + len(extra)}\n")
    size = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"stage: browser bundle in {dest}: {len(libs) + len(extra)} libraries, "
          f"{size / 2**20:.0f} MiB; needs glibc >= the builder's ({glibc})")
    return check_browser(dest)


def check_browser(dest: Path) -> int:
    """Every ELF file of the bundle resolves each library inside the bundle or to glibc."""
    dest = dest.resolve()
    env = dict(os.environ, LD_LIBRARY_PATH=str(dest / "lib"))
    problems = []
    elves = [p for p in dest.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p)
             and "node_modules" not in p.parts]
    for elf in elves:
        for name, where in ldd(elf, env).items():
            if where is None:
                problems.append(f"{elf.relative_to(dest)}: {name} not found")
            elif not GLIBC.match(name) and not Path(where).resolve().is_relative_to(dest):
                problems.append(f"{elf.relative_to(dest)}: {name} resolves outside: {where}")
    for p in problems:
        print("stage: " + p)
    print(f"stage: checked {len(elves)} ELF files: "
          + ("every library inside the bundle or glibc" if not problems else f"{len(problems)} problems"))
    return 1 if problems else 0


# ---- wheels, stored unzipped ----

def explode_wheel(wheel: Path, dest: Path) -> None:
    out = dest / (wheel.name[:-4] + WHEEL_SUFFIX)
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            target = out / info.filename
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as f:
                shutil.copyfileobj(src, f)
            mode = (info.external_attr >> 16) & 0o777
            target.chmod(mode or 0o644)


def zip_wheel(tree: Path) -> Path:
    """The wheel again from its unzipped tree; the .dist-info folder last, as wheels have it."""
    wheel = tree.with_name(tree.name[:-len(WHEEL_SUFFIX)] + ".whl")
    files = sorted((p for p in tree.rglob("*") if p.is_file()),
                   key=lambda p: (".dist-info" in p.relative_to(tree).parts[0], p.as_posix()))
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for p in files:
            info = zipfile.ZipInfo(p.relative_to(tree).as_posix(), date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | (p.stat().st_mode & 0o777)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(p, "rb") as src, z.open(info, "w") as f:
                shutil.copyfileobj(src, f, 1 << 20)
    shutil.rmtree(tree)
    return wheel


# ---- the stream and its parts ----

def compress(out: Path, browser: str | None, wheels: str | None, level: str) -> Path:
    """One tar.xz of browser/ and wheels/ (each wheel unzipped), written to `out`."""
    work = out.with_name(out.name + "-work")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    members = []
    if browser:
        members.append(("browser", Path(browser).resolve()))
    if wheels:
        tree = work / "wheels"
        tree.mkdir()
        found = sorted(Path(wheels).glob("*.whl"))
        if not found:
            sys.exit(f"stage: no wheels in {wheels}")
        for w in found:
            explode_wheel(w, tree)
        members.append(("wheels", tree))
        print(f"stage: {len(found)} wheels unzipped", flush=True)
    if not members:
        sys.exit("stage: nothing to pack (--browser and/or --wheels)")
    print(f"stage: compressing {', '.join(n for n, _ in members)} with xz -{level} (minutes) ...",
          flush=True)
    tar = ["tar", "-cf", "-", "--owner=0", "--group=0"]
    for name, path in members:
        tar += ["-C", str(path.parent), f"--transform=s,^{re.escape(path.name)},{name},", path.name]
    with open(out, "wb") as f:
        t = subprocess.Popen(tar, stdout=subprocess.PIPE)
        x = subprocess.run(["xz", f"-{level}", "-T0", "-c"], stdin=t.stdout, stdout=f)
        t.stdout.close()
        if t.wait() or x.returncode:
            sys.exit("stage: tar | xz failed")
    shutil.rmtree(work)
    print(f"stage: {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return out


def split(streams: list[Path], out: Path, part_mib: float) -> int:
    """The streams, end to end, in parts out/01/part-01 ... (a folder each, so that each `run`
    carries one), with manifest.json beside the last part. `unpack` reads concatenated xz streams
    and tar archives, so streams compressed separately (browser, wheels) split together."""
    if out.exists():
        shutil.rmtree(out)
    size, part = sum(s.stat().st_size for s in streams), int(part_mib * 2**20)
    n = -(-size // part)
    parts = []
    reader = io.BufferedReader(_Parts(streams), 1 << 20)
    for i in range(1, n + 1):
        data = reader.read(part)
        folder = out / f"{i:02d}"
        folder.mkdir(parents=True)
        (folder / f"part-{i:02d}").write_bytes(data)
        parts.append({"name": f"part-{i:02d}", "bytes": len(data),
                      "sha256": hashlib.sha256(data).hexdigest()})
    (out / f"{n:02d}" / MANIFEST).write_text(json.dumps({"parts": parts, "bytes": size}, indent=1))
    rel = out.relative_to(REPO) if out.is_relative_to(REPO) else out
    print(f"stage: {size / 2**20:.1f} MiB in {n} parts of at most {part_mib:g} MiB under {rel}/")
    print("On the device, one call per part (carry only that part's folder), then unpack:")
    for i in range(1, n + 1):
        print(f"  [carry {rel}/{i:02d}]  mkdir -p /tmp/stage && cp {rel}/{i:02d}/* /tmp/stage/")
    print("  python3 tools/stage.py unpack /tmp/stage /tmp/offline")
    return 0


class _Parts(io.RawIOBase):
    """The parts read as one file."""

    def __init__(self, paths):
        self._files = [open(p, "rb") for p in paths]

    def readable(self):
        return True

    def readinto(self, buf):
        while self._files:
            n = self._files[0].readinto(buf)
            if n:
                return n
            self._files.pop(0).close()
        return 0


def unpack(args: argparse.Namespace) -> int:
    stage, dest = Path(args.stage), Path(args.dest)
    manifest = json.loads((stage / MANIFEST).read_text())
    paths, bad = [], []
    for p in manifest["parts"]:
        path = stage / p["name"]
        if not path.exists():
            bad.append(f"{p['name']} is missing")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != p["sha256"]:
            bad.append(f"{p['name']} is damaged (sha256 differs)")
        paths.append(path)
    if bad:
        sys.exit("stage: " + "; ".join(bad))
    dest.mkdir(parents=True, exist_ok=True)
    print(f"stage: {len(paths)} parts intact; unpacking into {dest} ...", flush=True)
    with lzma.open(io.BufferedReader(_Parts(paths), 1 << 20)) as xz, \
            tarfile.open(fileobj=xz, mode="r|", ignore_zeros=True) as tar:
        tar.extractall(dest, filter="tar" if hasattr(tarfile, "tar_filter") else None)
    trees = sorted((dest / "wheels").glob("*" + WHEEL_SUFFIX)) if (dest / "wheels").is_dir() else []
    for tree in trees:
        zip_wheel(tree)
    print(f"stage: unpacked {', '.join(sorted(p.name for p in dest.iterdir()))}"
          + (f"; {len(trees)} wheels zipped again in {dest / 'wheels'}" if trees else ""))
    return 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="stage.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("browser", help="build a portable Chromium + Node bundle from this machine's")
    b.add_argument("dest")
    c = sub.add_parser("check", help="check that a bundle's libraries all resolve inside it")
    c.add_argument("dest")
    p = sub.add_parser("compress", help="one tar.xz of a browser bundle and/or wheels")
    p.add_argument("out", help="the .tar.xz to write")
    p.add_argument("--browser")
    p.add_argument("--wheels")
    p.add_argument("--level", default="9", help="xz preset (default 9)")
    s = sub.add_parser("split", help="split tar.xz streams into parts, a folder each")
    s.add_argument("out", help="folder for the parts (out/01/part-01, ...)")
    s.add_argument("streams", nargs="+")
    s.add_argument("--part-mib", type=float, default=60)
    u = sub.add_parser("unpack", help="verify, join and unpack the parts (on the device)")
    u.add_argument("stage", help="folder holding part-NN and manifest.json")
    u.add_argument("dest")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.command == "browser":
        return build_browser(Path(args.dest).resolve())
    if args.command == "check":
        return check_browser(Path(args.dest))
    if args.command == "compress":
        compress(Path(args.out).resolve(), args.browser, args.wheels, args.level)
        return 0
    if args.command == "split":
        return split([Path(s) for s in args.streams], Path(args.out).resolve(), args.part_mib)
    return unpack(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
