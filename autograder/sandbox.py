"""OS-level confinement for the grader's children and for the student kernels nbgrader runs.

Two mechanisms, both inherited by every child and kept across exec:

* Landlock (Linux 5.13+, the PyPI package ``landlock``) limits which files a process may read, write
  or execute. `confine` handles every file-system access right the running kernel knows, so whatever
  the rules do not name is refused; on ABI 6+ it also stops signals to, and abstract UNIX sockets
  of, processes outside the sandbox.
* rlimits (`limit`): address space, CPU time, file size, open files.

Neither restricts the network, pathname UNIX sockets, nor what an already open file descriptor
allows. This module imports neither CuPy nor nbgrader, and runs as a launcher::

    python autograder/sandbox.py [--read P]... [--write P]... [--no-devices] [--memory BYTES]
                                 [--cpu SECONDS] [--best-effort] -- CMD ARGS...

(or ``python -m autograder.sandbox``): it confines itself, then execs CMD. Exit code 3 when Landlock
is unavailable (``--best-effort``: run CMD unconfined and say so on stderr), 126/127 when CMD cannot
be executed or found.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # run by path: autograder/ itself must not shadow the stdlib's module names
    sys.path[:] = [p for p in sys.path
                   if os.path.realpath(p or ".") != os.path.dirname(os.path.realpath(__file__))]

import argparse
import ctypes
import functools
import importlib.util
import stat
import sysconfig
from pathlib import Path

try:
    import resource
except ImportError:  # not POSIX
    resource = None

__all__ = ["SandboxUnavailable", "landlock_abi", "describe", "python_read_paths", "system_read_paths",
           "confine", "limit", "launcher_command", "main", "ROOT", "EXIT_UNAVAILABLE"]

ROOT = Path(__file__).resolve().parent.parent
# Kept out of every read rule when it is the course's checkout (solutions/, exercises/ with the
# gradebook). Installed as a plain package, ROOT is site-packages itself, which must stay readable.
_GUARDED = ROOT if (ROOT / "pyproject.toml").is_file() or (ROOT / "solutions").is_dir() else None
EXIT_UNAVAILABLE = 3
# Test hook, documented: "1" makes this module behave as on a machine without Landlock. It can only
# take confinement away, and then confine() refuses (fails closed) unless the caller opted in.
PRETEND_UNAVAILABLE_ENV = "COURSE_SANDBOX_PRETEND_NO_LANDLOCK"

# Landlock's access bits (include/uapi/linux/landlock.h), and the ABI that introduced each.
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REFER, _TRUNCATE, _IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
_ABI1_ALL = (1 << 13) - 1  # EXECUTE .. MAKE_SYM
_FILE_ONLY = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE | _IOCTL_DEV  # all a non-directory may get
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_DEV_NODES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


class SandboxUnavailable(RuntimeError):
    """Landlock cannot be applied here; the message says why."""


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[int, str]:
    """(ABI version, reason it is 0). The ``landlock`` package is imported only here."""
    if not sys.platform.startswith("linux"):
        return 0, f"Landlock exists only on Linux (this is {sys.platform})"
    try:
        from landlock import landlock_abi_version
    except ImportError:
        return 0, "the Python package 'landlock' is not installed (pip install 'landlock>=1.0.0.dev5,<2')"
    try:
        ctypes.set_errno(0)  # the package reads errno, not the return value, to detect failure
        return int(landlock_abi_version()), ""
    except Exception as exc:  # noqa: BLE001 - any failure means "not available", with its reason
        why = getattr(exc, "reason", None) or str(exc).splitlines()[0]
        return 0, f"the kernel ({os.uname().release}) offers no Landlock: {why}"


def landlock_abi() -> int:
    """The running kernel's Landlock ABI version; 0 when unavailable (never raises)."""
    if os.environ.get(PRETEND_UNAVAILABLE_ENV) == "1":
        return 0
    return _probe()[0]


def _unavailable_reason() -> str:
    if os.environ.get(PRETEND_UNAVAILABLE_ENV) == "1":
        return f"Landlock switched off by {PRETEND_UNAVAILABLE_ENV}=1"
    return _probe()[1]


def describe() -> str:
    """One line for humans: the confinement this machine gives, or why it gives none."""
    rl = "rlimits on" if resource is not None else "rlimits off (no resource module)"
    abi = landlock_abi()
    if not abi:
        return f"no Landlock ({_unavailable_reason()}): file-system confinement off; {rl}"
    extra = "; signals and abstract sockets scoped" if abi >= 6 else ""
    return f"Landlock ABI {abi}: file-system confinement on{extra}; {rl}; network not restricted"


def _real(p) -> Path | None:
    try:
        return Path(os.path.realpath(os.fspath(p)))
    except (TypeError, ValueError, OSError):
        return None


def _within(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def _guarded(p: Path) -> bool:
    """True for the checkout, its ancestors, and anything in it but .venv (and the packages, which
    callers add on purpose)."""
    if _GUARDED is None:
        return False
    return _within(_GUARDED, p) or (_within(p, _GUARDED) and not _within(p, _GUARDED / ".venv"))


def python_read_paths(*, packages: bool = False) -> list[str]:
    """Folders the running Python needs to start and import: prefixes, stdlib, site-packages.

    Never the repository root (it holds solutions/) nor an ancestor of it, nor the current directory;
    of the repository only ``.venv`` and, with ``packages=True``, ``course/`` and ``autograder/``.
    """
    cwd = _real(os.getcwd())
    venv = ROOT / ".venv"
    names = ("stdlib", "platstdlib", "purelib", "platlib")
    cands = [sys.prefix, sys.base_prefix, sys.exec_prefix, getattr(sys, "base_exec_prefix", sys.prefix),
             *(sysconfig.get_paths().get(n) for n in names), *sys.path]
    out: list[str] = []
    for c in cands:
        p = _real(c) if c else None
        if p is None or not p.exists() or p == cwd or _guarded(p):  # tests/ is on sys.path in pytest
            continue
        if str(p) not in out:
            out.append(str(p))
    extra = [venv] + ([ROOT / "course", ROOT / "autograder"] if packages else [])
    out += [str(p) for p in extra if p.is_dir() and str(p) not in out]
    return out


def _cuda_include_dirs() -> list[str]:
    # course/_headers.py is stdlib-only; load it by path so that `course` (and CuPy) stay unimported.
    path = ROOT / "course" / "_headers.py"
    try:
        spec = importlib.util.spec_from_file_location("_course_headers_for_sandbox", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return list(mod.include_dirs())
    except Exception:  # noqa: BLE001 - no headers found is fine: NVRTC then reports what is missing
        return []


def system_read_paths(*, procfs: bool = True) -> list[str]:
    """System folders that dynamic linking, CUDA and NVRTC need, existing ones only.

    /usr (which holds /usr/local/cuda and the driver's /usr/local/nvidia), /lib*, /bin, /sbin; the
    loader's /etc/ld.so.* files, /etc/localtime and /etc/fonts (Matplotlib runs fc-list), not the
    rest of /etc; CUDA_PATH/CUDA_HOME and /opt/cuda (Arch's toolkit) but not the rest of /opt, which
    can hold anything; the CUDA header folders `course.include_dirs()` finds. With ``procfs``
    (default) /proc and /sys, which the CUDA driver reads; leave them out where untrusted source is
    compiled, since ``#include "/proc/self/environ"`` would put the environment into the compile log.
    """
    cands = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
             "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/ld.so.preload",
             "/etc/localtime", "/etc/fonts", "/opt/cuda"]
    cands += [os.environ[v] for v in ("CUDA_PATH", "CUDA_HOME") if os.environ.get(v)]
    cands += _cuda_include_dirs()
    if procfs:
        cands += ["/proc", "/sys"]
    out: list[str] = []
    for c in cands:
        p = _real(c)
        if p is None or not p.exists() or _guarded(p) or p == Path("/"):
            continue
        if str(p) not in out:
            out.append(str(p))
    return out


def _handled(abi: int) -> int:
    # File-system rights of ABIs after 7, unknown here, are not handled and so stay allowed.
    bits = _ABI1_ALL
    if abi >= 2:
        bits |= _REFER
    if abi >= 3:
        bits |= _TRUNCATE
    if abi >= 5:
        bits |= _IOCTL_DEV
    return bits


def confine(*, read=(), write=(), devices: bool = True, scope: bool = True,
            allow_threads: bool = False, network: bool = True) -> str:
    """Apply Landlock to this process and its future children; irreversible.

    ``read``: read files, list folders and execute beneath these paths. ``write``: every access
    beneath them. ``devices``: read, write and ioctl on /dev (CUDA opens /dev/nvidia* read-write and
    ioctls them) and writes to this process's /proc/PID/task (CUDA names its threads there); without
    it only /dev/null, /dev/zero, /dev/full and /dev/*random. ``scope`` (ABI 6+):
    no signals to, and no abstract UNIX sockets of, processes outside this sandbox. ``network=False`` (ABI
    4+): no TCP connection out and no TCP port bound (where student Python runs; UDP is not covered). Paths that do not
    exist are skipped. Raises `SandboxUnavailable` with the reason when Landlock is not there; returns
    a one-line description of what was applied.

    Landlock confines the calling thread and what it starts later, not threads already running
    (importing NumPy starts OpenBLAS's): RuntimeError when other threads exist, unless
    ``allow_threads``, for callers whose earlier threads never run untrusted code.
    """
    abi = landlock_abi()
    if not abi:
        raise SandboxUnavailable(f"cannot confine: {_unavailable_reason()}")
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = 1
    if threads > 1 and not allow_threads:
        raise RuntimeError(f"confine() must run before any other thread starts ({threads} threads "
                           "here): the running ones would stay unconfined (allow_threads=True accepts that)")
    from landlock.plumbing import (PR_SET_NO_NEW_PRIVS, PathBeneathAttr, RulesetAttr, get_add_rule,
                                   get_create_ruleset, get_prctl, get_restrict_self)

    handled = _handled(abi)
    reading = _EXECUTE | _READ_FILE | _READ_DIR
    rules: list[tuple[str, int]] = [(p, reading) for p in read] + [(p, handled) for p in write]
    if devices:
        rules.append(("/dev", _READ_FILE | _WRITE_FILE | _READ_DIR | _IOCTL_DEV))
        # The CUDA driver names its threads through /proc/self/task/TID/comm and fails to create a
        # context (cudaErrorOperatingSystem) when it cannot. This process's own task folder only:
        # children have other pids, so a child that needs CUDA must confine itself.
        rules.append((f"/proc/{os.getpid()}/task", _READ_FILE | _WRITE_FILE | _TRUNCATE | _READ_DIR))
    else:
        rules += [(p, _READ_FILE | _WRITE_FILE) for p in _DEV_NODES]

    net = _NET_BIND_TCP | _NET_CONNECT_TCP if not network and abi >= 4 else 0  # handled, no rule: refused
    if abi >= 6:
        # the package's attribute stops at handled_access_fs; extend it to reach `scoped`
        class _Attr(RulesetAttr):
            _fields_ = [("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]
        attr = _Attr(handled, net, (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if scope else 0)
    elif net:
        class _NetAttr(RulesetAttr):
            _fields_ = [("handled_access_net", ctypes.c_uint64)]
        attr = _NetAttr(handled, net)
    else:
        attr = RulesetAttr(handled)
    ctypes.set_errno(0)  # the package reads errno, not the return value, to detect failure
    ruleset = get_create_ruleset()(ctypes.byref(attr), ctypes.sizeof(attr), 0)
    try:
        for path, access in rules:
            try:
                fd = os.open(os.fspath(path), os.O_PATH | os.O_CLOEXEC)
            except OSError:  # missing (or unreachable) paths are skipped, as documented
                continue
            try:
                is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
                access &= handled if is_dir else (handled & _FILE_ONLY)
                if access:
                    ctypes.set_errno(0)
                    get_add_rule()(ruleset, 1, ctypes.byref(PathBeneathAttr(access, fd)), 0)
            finally:
                os.close(fd)
        ctypes.set_errno(0)
        get_prctl()(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # Landlock requires it; also stops setuid gains
        ctypes.set_errno(0)
        get_restrict_self()(ruleset, 0)
    finally:
        os.close(ruleset)
    return describe() + (f"; {threads - 1} earlier thread(s) unconfined" if threads > 1 else "")


def limit(*, memory_bytes=None, cpu_seconds=None, file_bytes=None, open_files=None) -> None:
    """Lower rlimits (address space, CPU seconds, bytes per file, open files) for this process and its
    children. Only ever lowers: a value above the hard limit is capped to it, and a limit the OS
    refuses is left as it was (never raises). The hard limit is lowered too, so the limited code
    cannot raise the soft one back; CPU gets one second of grace, SIGXCPU before SIGKILL."""
    if resource is None:
        return
    wanted = [(getattr(resource, "RLIMIT_AS", None), memory_bytes, 0),
              (resource.RLIMIT_CPU, cpu_seconds, 1),
              (resource.RLIMIT_FSIZE, file_bytes, 0),
              (resource.RLIMIT_NOFILE, open_files, 0)]
    for res, value, grace in wanted:
        if res is None or value is None:
            continue
        try:
            soft, hard = resource.getrlimit(res)
            new, new_hard = max(0, int(value)), max(0, int(value)) + grace
            if hard != resource.RLIM_INFINITY:
                new, new_hard = min(new, hard), min(new_hard, hard)
            resource.setrlimit(res, (new, new_hard))
        except (ValueError, OSError):
            continue


def launcher_command(cmd, *, read=(), write=(), devices: bool = True, memory_bytes=None,
                     cpu_seconds=None, best_effort: bool = False, python: str | None = None) -> list[str]:
    """argv that runs ``cmd`` confined through this file's launcher (only the given paths apply).

    The launcher runs by file path, so that the package `autograder` is not imported before exec.
    """
    argv = [python or sys.executable, str(Path(__file__).resolve()), "--no-defaults"]
    argv += [a for p in read for a in ("--read", os.fspath(p))]
    argv += [a for p in write for a in ("--write", os.fspath(p))]
    if not devices:
        argv.append("--no-devices")
    if memory_bytes is not None:
        argv += ["--memory", str(int(memory_bytes))]
    if cpu_seconds is not None:
        argv += ["--cpu", str(int(cpu_seconds))]
    if best_effort:
        argv.append("--best-effort")
    return argv + ["--", *map(os.fspath, cmd)]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m autograder.sandbox",
        description="Run a command under Landlock and rlimits. By default the system folders and this "
                    "Python installation are readable; the rest of the file system is not.",
        usage="%(prog)s [options] -- CMD [ARGS...]")
    p.add_argument("--read", action="append", default=[], metavar="PATH", help="readable folder or file")
    p.add_argument("--write", action="append", default=[], metavar="PATH", help="writable folder or file")
    p.add_argument("--no-devices", action="store_true", help="no /dev beyond /dev/null and friends")
    p.add_argument("--no-defaults", action="store_true", help="only the --read paths are readable")
    p.add_argument("--packages", action="store_true", help="also the repository's course/ and autograder/")
    p.add_argument("--memory", type=int, metavar="BYTES", help="address-space limit")
    p.add_argument("--cpu", type=int, metavar="SECONDS", help="CPU-time limit")
    p.add_argument("--file-size", type=int, metavar="BYTES", help="largest file it may write")
    p.add_argument("--open-files", type=int, metavar="N", help="most open file descriptors")
    p.add_argument("--best-effort", action="store_true",
                   help="run the command unconfined (saying so on stderr) where Landlock is unavailable")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        parser.print_usage(sys.stderr)
        print("sandbox: give the command after '--'", file=sys.stderr)
        return 2
    split = argv.index("--")
    args, cmd = parser.parse_args(argv[:split]), argv[split + 1:]
    read = list(args.read)
    if not args.no_defaults:
        read += system_read_paths() + python_read_paths(packages=args.packages)
    limit(memory_bytes=args.memory, cpu_seconds=args.cpu, file_bytes=args.file_size,
          open_files=args.open_files)
    try:
        # execvp ends every other thread (`-m autograder.sandbox` imports NumPy, which starts some)
        confine(read=read, write=args.write, devices=not args.no_devices, allow_threads=True)
    except SandboxUnavailable as exc:
        if not args.best_effort:
            print(f"sandbox: {exc}. Refusing to run {cmd[0]!r} unconfined (pass --best-effort to allow "
                  "it, or use a Linux 5.13+ kernel with Landlock enabled).", file=sys.stderr)
            return EXIT_UNAVAILABLE
        print(f"sandbox: running {cmd[0]!r} UNCONFINED: {exc}", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(cmd[0], cmd)
    except FileNotFoundError:
        print(f"sandbox: command not found: {cmd[0]}", file=sys.stderr)
        return 127
    except OSError as exc:
        print(f"sandbox: cannot execute {cmd[0]}: {exc}", file=sys.stderr)
        return 126


if __name__ == "__main__":
    sys.exit(main())
