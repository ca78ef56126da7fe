"""Compile CUDA C++ with NVRTC, with or without a GPU, and load the result through CuPy.

We drive NVRTC ourselves instead of going through `cupy.RawModule` because the course needs things
RawModule hides: the ptxas resource report (absent on a CuPy cache hit), the cubin for SASS views and
the grader's instruction checks, compiling for a named arch with no GPU, and error messages that show
numbered source. Results are cached on disk, keyed by everything that changes the binary.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

from ._errors import CompileError
from ._headers import include_dirs
from ._signature import parse_kernels

__all__ = ["Program", "Resources", "compile_for_arch", "declared_arch", "cache_dir", "sass_of", "sass_opcodes", "normalize_arch", "arch_cc",
           "arch_runs_on", "target_for",
           "DEFAULT_OPTIONS", "LOCAL_MEMORY_NOTE", "resource_lines"]

DEFAULT_OPTIONS = ("-std=c++17", "-lineinfo")
_REQUIRES_LINE = re.compile(r"^\s*//\s*requires:\s*(sm_\d+a?)\s*$")


def declared_arch(source: str) -> str | None:
    """The arch a source asks for on its first line (``// requires: sm_80``), or None.

    Solution files and the graded cells copied from them start this way; the %%cuda magic and the
    compile-everything test read it so that an sm_80 kernel is not compiled for an sm_75 GPU.
    """
    m = _REQUIRES_LINE.match(source.split("\n", 1)[0])
    return m.group(1) if m else None


# no ";" in it: the %%cuda magic joins several kernels' summaries with "; "
LOCAL_MEMORY_NOTE = ("per-thread stack memory in DRAM, for register spills and arrays indexed at run time: "
                     "much slower than registers when used")


@dataclasses.dataclass(frozen=True)
class Resources:
    """What ptxas reports for one kernel (None where only the driver knows, e.g. with no GPU)."""

    registers: int | None = None
    static_smem: int | None = None
    local_bytes: int | None = None  # stack frame: local memory per thread
    spill_stores: int | None = None
    spill_loads: int | None = None
    const_bytes: int | None = None
    max_threads_per_block: int | None = None

    def summary(self, explain: bool = True) -> str:
        """One line: registers, static shared, local memory, spills, max threads per block.

        With ``explain`` and local memory in use, a short clause says what local memory is, since a
        report such as "32 B local" is the first place many students meet it.
        """
        def fmt(v, unit=""):
            return "?" if v is None else f"{v}{unit}"
        local = f"{fmt(self.local_bytes, ' B')} local"
        if explain and self.local_bytes:
            local += f" ({LOCAL_MEMORY_NOTE})"
        spill = "" if not (self.spill_stores or self.spill_loads) else (
            f", SPILLS {self.spill_stores} B stored / {self.spill_loads} B loaded")
        mt = "" if self.max_threads_per_block is None else f", max {self.max_threads_per_block} threads/block"
        return (f"{fmt(self.registers)} registers, {fmt(self.static_smem, ' B')} static shared, "
                f"{local}{spill}{mt}")


def resource_lines(pairs) -> list:
    """``"name: summary"`` for each (name, `Resources`) pair; what local memory is, said once only."""
    out, said = [], False
    for name, res in pairs:
        out.append(f"{name}: {res.summary(explain=not said)}")
        said = said or bool(res.local_bytes)
    return out


@dataclasses.dataclass
class Program:
    """The output of one NVRTC compile for one arch."""

    source: str
    arch: str
    options: tuple
    cubin: bytes
    ptx: str
    log: str
    lowered_names: dict  # name expression -> mangled symbol
    resources: dict  # symbol (and name expression) -> Resources
    name: str = "kernel.cu"

    @property
    def kernel_names(self) -> list:
        return list(parse_kernels(self.source))

    def sass(self) -> str:
        return sass_of(self.cubin)


def normalize_arch(arch) -> str:
    """'sm_80', '80', 80, (8, 0), 'compute_90a' -> 'sm_80' / 'sm_90a'."""
    if isinstance(arch, tuple):
        return f"sm_{arch[0]}{arch[1]}"
    s = str(arch).strip().lower()
    m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3}[af]?)", s)
    if not m:
        raise ValueError(f"`arch` should look like 'sm_80' or (8, 0); got {arch!r}")
    return f"sm_{m.group(1)}"


def arch_cc(arch) -> tuple:
    """'sm_90a' -> (9, 0); 'sm_100' -> (10, 0)."""
    digits = re.search(r"(\d+)", normalize_arch(arch)).group(1)
    return int(digits[:-1]), int(digits[-1])


def arch_runs_on(arch, cc) -> bool:
    """Whether code built for ``arch`` runs on a GPU of compute capability ``cc``: that one or newer, but exactly
    that one for an arch-specific target (sm_90a: wgmma and setmaxnreg exist on Hopper only)."""
    need, cc = arch_cc(arch), tuple(int(x) for x in cc)
    return cc == need if normalize_arch(arch).endswith("a") else cc >= need


def target_for(arch, needs) -> str | None:
    """The target to build code that ``needs`` an arch (``// requires:``, ``--arch``, ``Exercise.arch``) when
    building for ``arch``: ``arch`` itself, or ``needs`` where it is an arch-specific target of the same GPU;
    None where ``arch``'s GPUs cannot run it."""
    if not needs:
        return normalize_arch(arch)
    if not arch_runs_on(needs, arch_cc(arch)):
        return None
    return normalize_arch(needs) if normalize_arch(needs).endswith("a") else normalize_arch(arch)


def cache_dir() -> Path:
    root = os.environ.get("COURSE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "cuda-course")
    return Path(root)


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc
        nvrtc.getVersion()
    except Exception as exc:
        raise CompileError(
            "NVRTC, the CUDA runtime compiler, could not be loaded "
            f"({type(exc).__name__}: {exc}). Install the course with the README's command, which adds "
            "CuPy and the NVRTC wheel (pip: nvidia-cuda-nvrtc) for your driver.") from exc
    return nvrtc


def _fix_cubin(cubin: bytes) -> bytes:
    """CuPy's getCUBIN treats the cubin like a C string and drops its last byte; put it back.

    The ELF headers say how long the file must be, so we pad up to that (cuobjdump refuses the
    truncated file; the driver happens not to care).
    """
    if len(cubin) < 64 or cubin[:4] != b"\x7fELF":
        return cubin
    phoff, shoff = struct.unpack_from("<QQ", cubin, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", cubin, 0x36)
    end = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
    for i in range(shnum):
        base = shoff + i * shentsize
        if base + 0x28 > len(cubin):
            break
        sh_type = struct.unpack_from("<I", cubin, base + 4)[0]
        off, size = struct.unpack_from("<QQ", cubin, base + 0x18)
        if sh_type != 8:  # SHT_NOBITS occupies no file space
            end = max(end, off + size)
    for i in range(phnum):
        base = phoff + i * phentsize
        if base + 0x28 > len(cubin):
            break
        off = struct.unpack_from("<Q", cubin, base + 8)[0]
        filesz = struct.unpack_from("<Q", cubin, base + 0x20)[0]
        end = max(end, off + filesz)
    return cubin + b"\0" * (end - len(cubin)) if end > len(cubin) else cubin


_RE_ENTRY = re.compile(r"Compiling entry function '([^']+)' for")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers(.*)")


def parse_ptxas_log(log: str) -> dict:
    """Map each kernel symbol to its `Resources` from a `ptxas -v` log."""
    out, current, fields = {}, None, {}
    for line in log.splitlines():
        m = _RE_ENTRY.search(line)
        if m:
            current, fields = m.group(1), {}
            out[current] = Resources()
            continue
        if current is None:
            continue
        m = _RE_FRAME.search(line)
        if m:
            fields.update(local_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                          spill_loads=int(m.group(3)))
        m = _RE_USED.search(line)
        if m:
            fields["registers"] = int(m.group(1))
            rest = m.group(2)
            smem = re.search(r"(\d+) bytes smem", rest)
            cmem = re.search(r"(\d+) bytes cmem\[0\]", rest)
            fields["static_smem"] = int(smem.group(1)) if smem else 0
            fields["const_bytes"] = int(cmem.group(1)) if cmem else 0
            fields.setdefault("local_bytes", 0)
            out[current] = Resources(**fields)
    return out


def _numbered(source: str, lines: set, context: int = 2, first_line: int = 1) -> str:
    """The lines around each of ``lines``, numbered from ``first_line`` (the number of the source's first
    line, as the compiler was told with #line), those in ``lines`` marked with '>'."""
    src = source.splitlines()
    end = first_line + len(src) - 1
    show = set()
    for ln in lines:
        show.update(range(max(first_line, ln - context), min(end, ln + context) + 1))
    out, last = [], 0
    for ln in sorted(show):
        if last and ln != last + 1:
            out.append("     ...")
        mark = ">" if ln in lines else " "
        out.append(f"{mark}{ln:4d} | {src[ln - first_line]}")
        last = ln
    return "\n".join(out)


def _compile_error(source, name, arch, options, log, first_line: int = 1) -> CompileError:
    errs = re.findall(rf"{re.escape(name)}\((\d+)\): (?:error|catastrophic error)", log)
    lines = {int(x) for x in errs}
    n = len(re.findall(r"\): (?:error|catastrophic error)", log))
    parts = [f"NVRTC could not compile {name} for {arch}"
             + (f" ({n} error{'s' * (n != 1)})." if n else ".")]
    if lines:
        # a notebook shows the %%cuda line as the cell's line 1, so a cell's source starts at line 2
        how = f"the cell's line numbers, its %%cuda line being {first_line - 1}; " if first_line > 1 else ""
        parts += ["", f"Where ({how}> marks the line the compiler complains about):",
                  _numbered(source, lines, first_line=first_line)]
    missing = re.findall(r'cannot open source file "([^"]+)"', log)
    if missing:
        parts += ["", f"The header(s) {', '.join(sorted(set(missing)))} were not found in: "
                  + (", ".join(include_dirs()) or "(no CUDA include folder found)")
                  + ". Reinstall with the README's command (it installs the CUDA header wheels)."]
    parts += ["", "Compiler log:", log.strip() or "(empty)", "", "Options: " + " ".join(options)]
    return CompileError("\n".join(parts), source=source, options=options, log=log, name=name)


def _key(source, arch, options, name_expressions, nvrtc_version) -> str:
    h = hashlib.sha256()
    for part in (source, arch, "\0".join(options), "\0".join(name_expressions), str(nvrtc_version),
                 "\0".join(include_dirs()), "v2"):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()[:32]


def _load_cached(path: Path):
    try:
        meta = json.loads((path / "meta.json").read_text())
        cubin = (path / "kernel.cubin").read_bytes()
    except (OSError, ValueError):
        return None
    return meta, cubin


def _store_cached(path: Path, meta: dict, cubin: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=".tmp-"))
        (tmp / "kernel.cubin").write_bytes(cubin)
        (tmp / "meta.json").write_text(json.dumps(meta))
        try:
            os.replace(tmp, path)  # atomic: concurrent grader children may compile the same source
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass  # a read-only home must not break compiling


def compile_for_arch(source: str, arch, *, options=(), name: str = "kernel.cu",
                     name_expressions=(), use_cache: bool = True, first_line: int = 1, prelude: str = "",
                     prelude_name: str = "prelude") -> Program:
    """Compile ``source`` to a cubin for ``arch`` with NVRTC; no GPU needed.

    Parameters
    ----------
    source : str
        CUDA C++ source. Kernels are easiest to use declared ``extern "C" __global__``.
    arch : str or tuple
        Target such as ``"sm_80"``, ``"sm_90a"`` or ``(7, 5)``.
    options : sequence of str
        Extra NVRTC options (``-DTILE=32``, ``-use_fast_math``...). ``-arch``, the include folders
        and the resource report are added for you.
    name_expressions : sequence of str
        Template instantiations to keep, e.g. ``"gemm<128, 8>"``; their mangled names are in
        `Program.lowered_names`.
    first_line : int
        The line number of the source's first line in what the student sees: 2 for the body of a
        ``%%cuda`` cell, whose line 1 is the magic line. Compile errors (the log and the numbered
        excerpt) and the line table use these numbers.
    prelude : str
        Source compiled ahead of ``source`` (a chapter's shared device functions: ``%%cuda --include``); its
        lines are numbered in its own file ``prelude_name``, so messages about ``source`` keep their numbers.

    Raises
    ------
    CompileError
        With numbered source around each error, the full log and the options.
    """
    if not isinstance(source, str) or not source.strip():
        raise ValueError("`source` should be a non-empty string of CUDA C++")
    arch = normalize_arch(arch)
    options = tuple(options)
    name_expressions = tuple(name_expressions)
    if isinstance(first_line, bool) or not isinstance(first_line, int) or first_line < 1:
        raise ValueError(f"`first_line` should be a line number (an int >= 1); got {first_line!r}")
    # #line makes NVRTC itself (its log, the -lineinfo table) count lines as the student's cell does
    text = source if first_line == 1 else f"#line {first_line}\n{source}"
    if prelude:
        text = f'#line 1 "{prelude_name}"\n{prelude}\n#line {first_line} "{name}"\n{source}'
    nvrtc = _nvrtc()
    version = nvrtc.getVersion()
    full = (f"-arch={arch}",) + DEFAULT_OPTIONS + tuple(f"-I{d}" for d in include_dirs()) + options
    key = _key(text, arch, full, name_expressions, version)
    path = cache_dir() / "nvrtc" / key
    if use_cache:
        hit = _load_cached(path)
        if hit:
            meta, cubin = hit
            res = {k: Resources(**v) for k, v in meta["resources"].items()}
            return Program(source, arch, options, cubin, meta["ptx"], meta["log"],
                           meta["lowered"], res, name)
    log = ""
    for extra in (("-Xptxas=-v", "--no-cache"), ("-Xptxas=-v",)):
        prog = nvrtc.createProgram(text, name, [], [])
        try:
            for expr in name_expressions:
                nvrtc.addNameExpression(prog, expr)
            try:
                nvrtc.compileProgram(prog, list(full + extra))
            except nvrtc.NVRTCError as exc:
                log = nvrtc.getProgramLog(prog)
                if "--no-cache" in extra and ("no-cache" in log or "INVALID_OPTION" in str(exc)):
                    continue  # older NVRTC without a cache flag: retry without it
                raise _compile_error(source, name, arch, full, log, first_line) from None
            log = nvrtc.getProgramLog(prog)
            ptx = nvrtc.getPTX(prog)
            ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
            cubin = _fix_cubin(bytes(nvrtc.getCUBIN(prog)))
            lowered = {e: nvrtc.getLoweredName(prog, e) for e in name_expressions}
            break
        finally:
            nvrtc.destroyProgram(prog)
    ptx = ptx.rstrip("\0")
    resources = parse_ptxas_log(log)
    for expr, sym in lowered.items():
        if sym in resources:
            resources[expr] = resources[sym]
    meta = {"ptx": ptx, "log": log, "lowered": lowered,
            "resources": {k: dataclasses.asdict(v) for k, v in resources.items()}}
    if use_cache:
        _store_cached(path, meta, cubin)
    return Program(source, arch, options, cubin, ptx, log, lowered, resources, name)


def _tool_dirs() -> list:
    """Folders that may hold the CUDA toolkit's programs, the course's own install first.

    pip's CUDA wheels put theirs in ``nvidia/cu13/bin`` (CUDA 13: one tree for every component) or
    ``nvidia/<component>/bin`` (CUDA 12). They come before PATH because a system toolkit found there
    can be older than the NVRTC that made the cubin, and an old disassembler rejects a newer arch.
    """
    import sys
    dirs = []
    for p in sys.path:
        nv = Path(p or ".", "nvidia")
        if nv.is_dir():
            dirs += sorted(nv.glob("*/bin"), reverse=True)
    dirs += [Path(d) for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    dirs += [Path(os.environ[v], "bin") for v in ("CUDA_PATH", "CUDA_HOME", "CONDA_PREFIX") if os.environ.get(v)]
    return dirs + [Path(sys.prefix, "bin"), Path("/usr/local/cuda/bin")]


def _find_tool(tool: str):
    """The path of the CUDA program ``tool`` (``nvdisasm``, ``cuobjdump``), or None."""
    names = (tool + ".exe", tool) if os.name == "nt" else (tool,)
    for d in _tool_dirs():
        for name in names:
            cand = Path(d, name)
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return None


_NO_DISASSEMBLER = (
    "SASS needs nvdisasm, the CUDA disassembler, and none was found (searched: the pip wheels' "
    "nvidia/*/bin folders, PATH, the bin folders of CUDA_PATH, CUDA_HOME and CONDA_PREFIX, and "
    "/usr/local/cuda/bin). The README's install command brings it (pip: nvidia-cuda-nvdisasm; conda: "
    "cuda-nvdisasm): run it again, or install that package into this Python. Compiling and the PTX "
    "view (`.ptx`) work without it.")


def sass_of(cubin: bytes) -> str:
    """Disassemble a cubin into SASS, the machine code the GPU runs; no GPU needed.

    nvdisasm does the work (``-c``: code sections only). cuobjdump is tried only where nvdisasm is not
    found, since it disassembles by calling nvdisasm itself: the cuobjdump wheel alone cannot show SASS.

    Raises
    ------
    FileNotFoundError
        When no disassembler is installed, saying which package brings one.
    RuntimeError
        When the disassembler rejects the cubin, with its message.
    """
    nvdisasm = _find_tool("nvdisasm")
    cuobjdump = None if nvdisasm else _find_tool("cuobjdump")
    if not (nvdisasm or cuobjdump):
        raise FileNotFoundError(_NO_DISASSEMBLER)
    tool, args = (nvdisasm, ["-c"]) if nvdisasm else (cuobjdump, ["-sass"])
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(cubin)
        r = subprocess.run([tool, *args, str(f)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        if cuobjdump and "nvdisasm" in r.stderr:
            raise FileNotFoundError(f"{cuobjdump} was found, but it needs nvdisasm to show SASS. "
                                    + _NO_DISASSEMBLER)
        raise RuntimeError(f"{Path(tool).name} failed on this cubin: {r.stderr.strip()}")
    return r.stdout


# One instruction line of nvdisasm (or cuobjdump): its address, an optional guard predicate
# (@P0, @!UP1, @PT), then the mnemonic with its modifiers (LDG.E.CONSTANT).
_SASS_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)((?:\.[A-Z0-9_]+)*)")
_SASS_KERNEL = re.compile(r"\.text\.(\w+)")


def sass_opcodes(sass: str, *, modifiers: bool = False) -> dict:
    """Count the instructions of a disassembly (the text `sass_of` returns), kernel by kernel.

    Returns ``{kernel: collections.Counter}`` keyed by opcode: ``"LDG"`` for ``LDG.E.CONSTANT``, or the
    whole mnemonic with ``modifiers=True``. A kernel is a `.text.<name>` section of the disassembly;
    instructions before the first one are not counted.
    """
    ops, kernel = {}, None
    for line in sass.splitlines():
        if (m := _SASS_INSTRUCTION.search(line)) and kernel is not None:
            kernel[m.group(1) + (m.group(2) if modifiers else "")] += 1
        elif m is None and (k := _SASS_KERNEL.search(line)):
            kernel = ops.setdefault(k.group(1), collections.Counter())
    return ops
