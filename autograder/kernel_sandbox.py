"""Student notebooks under `nbgrader autograde`, run in a Landlock sandbox.

`SandboxedKernelManager` starts the kernel through `autograder.sandbox`'s launcher. The kernel may read
the system, the Python installation, the repository's ``course/`` and ``autograder/`` and its
connection file; it may write only its working directory (the student's autograded folder) and a
private temporary folder, removed at shutdown, where HOME-like state (TMPDIR, IPython, Matplotlib,
XDG and Jupyter folders, the course's, CuPy's and CUDA's caches) is pointed. Everything else, other
students' folders, gradebook.db, the repository, the venv (read-only) and the user's home included,
is out of its reach. Variables that look like secrets (tokens, passwords, agent sockets) are not
passed to it.

nbgrader 0.9's Execute passes ``kernel_manager_class`` to nbclient as a keyword argument, which wins
over ``c.Execute.kernel_manager_class``; so name `SandboxedExecute` in place of nbgrader's Execute in
``c.Autograde.autograde_preprocessors``. Nothing that needs solutions/ may run in the kernel (the
kernel cannot read it): kernels are graded outside it (`autograder.nbgrader_plugin`).

Where Landlock is unavailable the kernel does not start, unless the instructor opts in with
``c.SandboxedKernelManager.allow_unconfined = True`` or COURSE_ALLOW_UNCONFINED=1.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import Bool

from . import sandbox

__all__ = ["SandboxedKernelManager", "SandboxedExecute", "kernel_read_paths", "ALLOW_UNCONFINED_ENV"]

ALLOW_UNCONFINED_ENV = "COURSE_ALLOW_UNCONFINED"
# Not for student code: credentials, and agents or buses that act for the instructor.
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH_SOCK|"
                     r"^DBUS_SESSION_BUS_ADDRESS$|^GPG_AGENT_INFO$", re.IGNORECASE)


def kernel_read_paths() -> list[str]:
    """What a sandboxed kernel may read besides its folders and connection file."""
    return sandbox.system_read_paths() + sandbox.python_read_paths(packages=True)


def _private_env(env: dict, private: Path) -> dict:
    env = {k: v for k, v in env.items() if not _SECRET.search(k)}
    dirs = {"tmp": ("TMPDIR", "TEMP", "TMP"), "ipython": ("IPYTHONDIR",), "mpl": ("MPLCONFIGDIR",),
            "cache": ("XDG_CACHE_HOME",), "config": ("XDG_CONFIG_HOME",), "data": ("XDG_DATA_HOME",),
            "state": ("XDG_STATE_HOME",), "runtime": ("XDG_RUNTIME_DIR", "JUPYTER_RUNTIME_DIR"),
            "jupyter-config": ("JUPYTER_CONFIG_DIR",), "jupyter-data": ("JUPYTER_DATA_DIR",),
            "cache/cuda-course": ("COURSE_CACHE_DIR",), "cache/cupy": ("CUPY_CACHE_DIR",),
            "cache/nv": ("CUDA_CACHE_PATH",), "cache/triton": ("TRITON_CACHE_DIR",), "triton": ("TRITON_HOME",)}
    for sub, names in dirs.items():
        (private / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        env.update({n: str(private / sub) for n in names})
    # The repository root cannot be listed, so `import course` could not find the package there:
    # links in a folder of our own, first on PYTHONPATH, lead to the two readable packages.
    shim = private / "path"
    shim.mkdir(mode=0o700, exist_ok=True)
    for pkg in ("course", "autograder"):
        if (sandbox.ROOT / pkg).is_dir():
            (shim / pkg).symlink_to(sandbox.ROOT / pkg, target_is_directory=True)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH", "")]))
    return env


class SandboxedKernelManager(AsyncKernelManager):
    """An AsyncKernelManager whose kernels run under `autograder.sandbox` (see the module's doc)."""

    allow_unconfined = Bool(False, config=True, help=(
        "Start kernels unconfined where Landlock is unavailable (old kernel, not Linux, no 'landlock' "
        "package). Off by default: student code could then write anything the instructor can. The "
        f"environment variable {ALLOW_UNCONFINED_ENV}=1 does the same (for CI machines)."))

    _private: Path | None = None
    _cleanup = None

    @property
    def private_dir(self) -> Path | None:
        """The kernel's private temporary folder while it runs (None before start and after shutdown)."""
        return self._private

    def _unconfined_allowed(self) -> bool:
        return self.allow_unconfined or os.environ.get(ALLOW_UNCONFINED_ENV) == "1"

    async def _async_pre_start_kernel(self, **kw):
        cmd, kw = await super()._async_pre_start_kernel(**kw)
        self._remove_private()  # a restart: the previous kernel's folder goes
        confined = sandbox.landlock_abi() > 0
        if not confined and not self._unconfined_allowed():
            raise sandbox.SandboxUnavailable(
                f"not starting the student's kernel unconfined: {sandbox.describe()}. Autograde on "
                "Linux 5.13+ with Landlock (and `pip install landlock`), or inside a container or VM "
                "per student; to run it unconfined anyway, set "
                "c.SandboxedKernelManager.allow_unconfined = True in nbgrader_config.py or "
                f"{ALLOW_UNCONFINED_ENV}=1 in the environment.")
        cwd = Path(kw.get("cwd") or os.getcwd()).resolve()
        home = Path.home().resolve()
        if cwd == sandbox.ROOT or cwd in sandbox.ROOT.parents or cwd == home or cwd in home.parents:
            raise sandbox.SandboxUnavailable(
                f"not starting the student's kernel in {cwd}: it could write there, and that folder "
                "holds the course repository or the home folder; run it in the student's own folder")
        private = Path(tempfile.mkdtemp(prefix="course-kernel-"))
        self._private = private
        # also runs at exit, should nbclient never shut the kernel down
        self._cleanup = weakref.finalize(self, shutil.rmtree, private, True)
        kw["env"] = _private_env(dict(kw.get("env") or os.environ), private)
        kw["cwd"] = str(cwd)
        if confined:
            reads = kernel_read_paths() + [str(Path(self.connection_file).resolve())]
            cmd = sandbox.launcher_command(cmd, read=reads, write=[cwd, private])
            self.log.info("Student kernel confined (%s): writes only %s and %s",
                          sandbox.describe(), cwd, private)
        else:
            self.log.warning("Student kernel runs UNCONFINED (%s); it can write anything this user "
                             "can. Temporary state goes to %s.", sandbox.describe(), private)
        return cmd, kw

    pre_start_kernel = _async_pre_start_kernel

    async def _async_start_kernel(self, **kw):
        try:
            await super()._async_start_kernel(**kw)
        except BaseException:
            self._remove_private()
            raise

    start_kernel = _async_start_kernel

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        try:
            await super()._async_cleanup_resources(restart=restart)
        finally:
            self._remove_private()

    cleanup_resources = _async_cleanup_resources

    def _remove_private(self) -> None:
        if self._cleanup is not None:
            self._cleanup()
        self._cleanup, self._private = None, None


# ---- nbgrader ----

def _make_sandboxed_execute():
    from nbgrader.preprocessors import Execute

    class SandboxedExecute(Execute):
        """nbgrader's Execute with `SandboxedKernelManager` (Execute hard-wires AsyncKernelManager)."""

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("kernel_manager_class", SandboxedKernelManager)
            super().__init__(*args, **kwargs)

    SandboxedExecute.__module__ = __name__
    return SandboxedExecute


def __getattr__(name: str):
    # Importing nbgrader takes seconds: only configs that name SandboxedExecute pay for it.
    if name == "SandboxedExecute":
        cls = _make_sandboxed_execute()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

