"""The OS-level confinement (autograder/sandbox.py) and nbgrader's sandboxed kernels (kernel_sandbox.py).

Landlock is applied only in child processes: confining pytest itself could not be undone.
"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from repo_helpers import REPO

from autograder import sandbox

needs_landlock = pytest.mark.skipif(sandbox.landlock_abi() == 0,
                                    reason=f"no Landlock here: {sandbox.describe()}")
SOLUTION = REPO / "solutions" / "01_first_kernel" / "saxpy.cu"
PRETEND = {sandbox.PRETEND_UNAVAILABLE_ENV: "1"}


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def attempts(code_by_name: dict) -> str:
    """Python source that tries each snippet and prints {name: "ok" | exception class name} as JSON."""
    lines = ["import json, os, subprocess, sys", "out = {}"]
    for name, snippet in code_by_name.items():
        lines += ["try:", f"    {snippet}", f"    out[{name!r}] = 'ok'",
                  "except Exception as e:", f"    out[{name!r}] = type(e).__name__"]
    return "\n".join(lines + ["print(json.dumps(out))"])


@needs_landlock
def test_confine_allows_only_the_rules_and_children_inherit(tmp_path):
    """After confine(read=[a dir], write=[tmp]): are reads outside and writes into the repository
    refused, do the allowed reads and writes work, and is a child process confined the same way?
    Does confine() refuse while other threads run (they would stay unconfined) unless told to?"""
    allowed, scratch, outside = tmp_path / "allowed", tmp_path / "scratch", tmp_path / "outside"
    for d in (allowed, scratch, outside):
        d.mkdir()
    (allowed / "in.txt").write_text("readable")
    (outside / "secret.txt").write_text("secret")
    child = f"open({str(REPO / 'autograder' / 'pwned.py')!r}, 'w')"
    checks = attempts({
        "read_allowed": f"assert open({str(allowed / 'in.txt')!r}).read() == 'readable'",
        "write_scratch": f"open({str(scratch / 'new.txt')!r}, 'w').write('x')",
        "read_outside": f"open({str(outside / 'secret.txt')!r}).read()",
        "read_solution": f"open({str(SOLUTION)!r}).read()",
        "list_repo": f"os.listdir({str(REPO)!r})",
        "write_repo": f"open({str(REPO / 'autograder' / 'pwned.py')!r}, 'w')",
        "write_allowed_dir": f"open({str(allowed / 'new.txt')!r}, 'w')",
        "child": f"assert subprocess.run([sys.executable, '-c', {child!r}]).returncode == 1",
        "signal_parent": "os.kill(os.getppid(), 0)",
    })
    code = f"""
        import threading, time
        from autograder import sandbox  # this imports NumPy, whose OpenBLAS may start threads
        reads = sandbox.system_read_paths() + sandbox.python_read_paths() + [{str(allowed)!r}]
        threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
        try:
            sandbox.confine(read=reads)
        except RuntimeError as e:
            assert "before any other thread" in str(e)
        print(sandbox.confine(read=reads, write=[{str(scratch)!r}], allow_threads=True))
        {checks.replace(chr(10), chr(10) + " " * 8)}
    """
    proc = run_python(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    said, result = proc.stdout.splitlines()[0], json.loads(proc.stdout.splitlines()[-1])
    assert said.startswith(f"Landlock ABI {sandbox.landlock_abi()}")
    assert result["read_allowed"] == result["write_scratch"] == result["child"] == "ok", result
    for name in ("read_outside", "read_solution", "list_repo", "write_repo", "write_allowed_dir"):
        assert result[name] == "PermissionError", (name, result)
    assert result["signal_parent"] == ("PermissionError" if sandbox.landlock_abi() >= 6 else "ok")
    assert (scratch / "new.txt").read_text() == "x"
    assert not (REPO / "autograder" / "pwned.py").exists()


@needs_landlock
def test_launcher_runs_the_command_confined(tmp_path):
    """Does `python -m autograder.sandbox --write DIR -- python -c ...` run the command with the
    Python installation readable, DIR writable, and the repository out of reach?"""
    code = attempts({"write": "open('out.txt', 'w').write('hi')",
                     "solution": f"open({str(SOLUTION)!r}).read()",
                     "numpy": "import numpy"})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "autograder.sandbox", "--write", str(tmp_path), "--",
                           sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"write": "ok", "solution": "PermissionError", "numpy": "ok"}
    by_path = subprocess.run(sandbox.launcher_command(
        [sys.executable, "-c", "open('/etc/hostname')"], read=sandbox.python_read_paths()
        + sandbox.system_read_paths()), capture_output=True, text=True, timeout=60)
    assert by_path.returncode == 1 and "PermissionError" in by_path.stderr


def test_launcher_refuses_without_landlock(tmp_path):
    """Without Landlock, does the launcher exit with 3 and say why and how to opt in, and does
    --best-effort run the command unconfined, saying so in one line?"""
    cmd = [sys.executable, "-m", "autograder.sandbox", "--", sys.executable, "-c", "print('ran')"]
    env = {**os.environ, "PYTHONPATH": str(REPO), **PRETEND}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == sandbox.EXIT_UNAVAILABLE == 3
    assert proc.stdout == "" and "Landlock" in proc.stderr and "--best-effort" in proc.stderr
    cmd.insert(3, "--best-effort")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert len(proc.stderr.splitlines()) == 1 and "UNCONFINED" in proc.stderr


def test_unavailable_is_reported_never_raised(monkeypatch):
    """With Landlock missing, is the ABI 0, describe() one line with the reason, and confine() a
    SandboxUnavailable that carries it?"""
    monkeypatch.setenv(sandbox.PRETEND_UNAVAILABLE_ENV, "1")
    assert sandbox.landlock_abi() == 0
    line = sandbox.describe()
    assert "\n" not in line and "no Landlock" in line and "off" in line
    with pytest.raises(sandbox.SandboxUnavailable, match="Landlock"):
        sandbox.confine(read=["/usr"])


def test_read_paths_never_open_the_repository(monkeypatch, tmp_path):
    """Do the Python read paths leave out the repository root (solutions/ lives there), its ancestors
    and the current directory, listing course/ and autograder/ only when asked?"""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(REPO), "/", str(tmp_path), str(REPO / "tests"), *sys.path])
    plain, with_packages = sandbox.python_read_paths(), sandbox.python_read_paths(packages=True)
    for paths in (plain, with_packages, sandbox.system_read_paths()):
        for p in map(Path, paths):
            assert p.exists() and p != tmp_path
            assert not (REPO == p or p in REPO.parents), p
            assert not (REPO in p.parents) or p.relative_to(REPO).parts[0] in (".venv", "course", "autograder")
    assert str(Path(sys.base_prefix).resolve()) in plain
    assert str(REPO / "course") not in plain and str(REPO / "solutions") not in with_packages
    assert {str(REPO / "course"), str(REPO / "autograder")} <= set(with_packages)
    assert "/proc" not in sandbox.system_read_paths(procfs=False)


def test_limits_stop_big_allocations_and_files(tmp_path):
    """Does limit(memory_bytes=...) make a large allocation fail, limit(file_bytes=...) a large write,
    and is a limit above the hard one capped rather than raised?"""
    code = f"""
        import resource
        from autograder import sandbox
        sandbox.limit(open_files=10**12)  # above any hard limit: capped, never raised
        sandbox.limit(memory_bytes=768 << 20, file_bytes=1 << 20, cpu_seconds=100)
        soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
        assert (soft, hard) == (100, 101), (soft, hard)
        try:
            bytearray(1 << 30)
            print("allocated")
        except MemoryError:
            print("MemoryError")
        try:
            open({str(tmp_path / 'big')!r}, 'wb').write(bytes(2 << 20))
            print("wrote")
        except OSError as e:
            print(type(e).__name__, e.errno)
    """
    proc = run_python(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["MemoryError", "OSError 27"]  # EFBIG


# ---- the kernels nbgrader runs ----

def execute_notebook(cells: list[str], cwd: Path) -> list[str]:
    """Run the cells with SandboxedKernelManager; each cell's stdout, or its exception's class name."""
    import nbformat
    from nbclient import NotebookClient

    from autograder.kernel_sandbox import SandboxedKernelManager
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, kernel_name="python3", kernel_manager_class=SandboxedKernelManager, timeout=60,
                   allow_errors=True, resources={"metadata": {"path": str(cwd)}}).execute()
    out = []
    for cell in nb.cells:
        errors = [o.ename for o in cell.outputs if o.output_type == "error"]
        stderr = [o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
        assert not stderr, stderr  # nbgrader gives 0 points to a test cell that writes to stderr
        out.append(errors[0] if errors else "".join(o.get("text", "") for o in cell.outputs).strip())
    return out


@needs_landlock
def test_sandboxed_kernel_writes_only_its_folder(tmp_path):
    """In a kernel started by SandboxedKernelManager: does writing in its working directory work, do
    writing the repository, the user's cache, another student's folder and reading that folder or
    solutions/ fail with PermissionError, do `import course` and `import autograder` work, and is its
    private folder gone afterwards?"""
    alice, bob = tmp_path / "autograded" / "alice" / "01", tmp_path / "autograded" / "bob" / "01"
    for d in (alice, bob):
        d.mkdir(parents=True)
    (bob / "bob.ipynb").write_text("{}")
    cache = Path.home() / ".cache" / "cuda-course" / "sandbox-test"
    out = execute_notebook([
        "open('result.txt', 'w').write('mine'); import os; print(os.environ['COURSE_CACHE_DIR'])",
        f"open({str(REPO / 'autograder' / 'x.py')!r}, 'w')",
        f"import os; os.makedirs({str(cache)!r}, exist_ok=True)",
        f"open({str(bob / 'forged.ipynb')!r}, 'w')",
        f"open({str(bob / 'bob.ipynb')!r}).read()",
        f"open({str(SOLUTION)!r}).read()",
        "import course, autograder; print(autograder.nb.__name__, course.include_dirs.__name__)",
    ], alice)
    private = Path(out[0]).parent.parent
    assert (alice / "result.txt").read_text() == "mine" and private.name.startswith("course-kernel-")
    assert out[1:6] == ["PermissionError"] * 5, out
    assert out[6] == "autograder.nb include_dirs"
    assert not (REPO / "autograder" / "x.py").exists() and not (bob / "forged.ipynb").exists()
    assert not cache.exists()
    assert not private.exists(), "the private folder is removed at shutdown"


async def pre_start(km, cwd):
    """The kernel command and Popen arguments the manager would launch (nothing is launched)."""
    try:
        return await km.pre_start_kernel(cwd=str(cwd))
    finally:
        await km.cleanup_resources()


def test_kernel_manager_refuses_unconfined_unless_allowed(monkeypatch, tmp_path):
    """Without Landlock, does the kernel refuse to start, naming both ways to opt in, and with
    COURSE_ALLOW_UNCONFINED=1 start unwrapped but with its own temporary folder, removed afterwards?"""
    from autograder.kernel_sandbox import ALLOW_UNCONFINED_ENV, SandboxedKernelManager
    monkeypatch.setenv(sandbox.PRETEND_UNAVAILABLE_ENV, "1")
    monkeypatch.delenv(ALLOW_UNCONFINED_ENV, raising=False)
    with pytest.raises(sandbox.SandboxUnavailable) as err:
        asyncio.run(pre_start(SandboxedKernelManager(kernel_name="python3"), tmp_path))
    assert "allow_unconfined = True" in str(err.value) and ALLOW_UNCONFINED_ENV in str(err.value)
    monkeypatch.setenv(ALLOW_UNCONFINED_ENV, "1")
    km = SandboxedKernelManager(kernel_name="python3")
    cmd, kw = asyncio.run(pre_start(km, tmp_path))
    assert "sandbox.py" not in " ".join(cmd) and Path(kw["env"]["TMPDIR"]).name == "tmp"
    assert km.private_dir is None and not Path(kw["env"]["TMPDIR"]).exists()


@needs_landlock
def test_kernel_command_is_wrapped_and_scrubbed(monkeypatch, tmp_path):
    """Is the kernel command wrapped by the launcher with its folder and private folder writable, are
    secret-looking variables kept from it, and is a folder holding the repository refused as cwd?"""
    from autograder.kernel_sandbox import SandboxedKernelManager
    monkeypatch.setenv("GITHUB_TOKEN", "s3cret")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent")
    cmd, kw = asyncio.run(pre_start(SandboxedKernelManager(kernel_name="python3"), tmp_path))
    assert cmd[1] == str(REPO / "autograder" / "sandbox.py") and "--" in cmd and "ipykernel_launcher" in cmd
    writes = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--write"]
    assert writes == [str(tmp_path.resolve()), str(Path(kw["env"]["TMPDIR"]).parent)]
    assert "GITHUB_TOKEN" not in kw["env"] and "SSH_AUTH_SOCK" not in kw["env"]
    for bad in (REPO, REPO.parent, Path.home()):
        with pytest.raises(sandbox.SandboxUnavailable, match="student's own folder"):
            asyncio.run(pre_start(SandboxedKernelManager(kernel_name="python3"), bad))


def test_nbgrader_execute_uses_the_sandboxed_manager():
    """Does SandboxedExecute hand nbclient SandboxedKernelManager (nbgrader's Execute passes
    AsyncKernelManager as a keyword, so c.Execute.kernel_manager_class alone is ignored)?"""
    from autograder import kernel_sandbox
    assert kernel_sandbox.SandboxedExecute().kernel_manager_class is kernel_sandbox.SandboxedKernelManager
