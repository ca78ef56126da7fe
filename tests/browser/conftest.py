"""What the browser test needs, installed when missing: Debian's Chromium, playwright-core, and a
JupyterLab started by the README's lab command. Skips with the reason when it cannot install."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from repo_helpers import REPO

BROWSER_DIR = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"  # Debian's; COURSE_CHROMIUM=PATH uses another Chromium or Chrome
INSTALL_TIMEOUT_S = 900
LAB_START_TIMEOUT_S = 240

# JupyterLab settings for the test's browser: autosave off, so running a chapter never writes its
# outputs into the committed notebook; no news or update pop-ups over the screenshots.
LAB_SETTINGS = {
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
}


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab in headless Chromium "
                                       "(installs Debian's chromium and playwright-core if missing)")


def _tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium; apt-get installs it when missing (root only)."""
    other = os.environ.get("COURSE_CHROMIUM")
    if other:
        if not os.access(other, os.X_OK):
            pytest.fail(f"COURSE_CHROMIUM={other} is not an executable", pytrace=False)
        return other
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if not shutil.which("apt-get"):
        pytest.skip(f"browser test: {CHROMIUM} is missing and there is no apt-get to install it")
    if os.geteuid() != 0:
        pytest.skip(f"browser test: {CHROMIUM} is missing; install it as root: "
                    "apt-get update && apt-get install -y chromium")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            r = _run(cmd, env=env, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.skip(f"browser test: `{' '.join(cmd)}` took over {INSTALL_TIMEOUT_S} s (no network?)")
        if r.returncode:
            pytest.skip(f"browser test: `{' '.join(cmd)}` failed, so Chromium cannot be installed "
                        f"here:\n{_tail(r.stdout + r.stderr)}")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"browser test: apt-get installed chromium but {CHROMIUM} is not there")
    return CHROMIUM


@pytest.fixture(scope="session")
def node_driver() -> list[str]:
    """`node drive_lab.mjs` with the playwright-core that package.json pins, npm-installed if missing
    (npm is needed only then: an offline machine can bring node_modules, see tools/stage.py)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node:
        pytest.skip("browser test: Node.js is needed (apt-get install nodejs npm)")
    pinned = json.loads((BROWSER_DIR / "package.json").read_text())["dependencies"]["playwright-core"]
    installed = BROWSER_DIR / "node_modules" / "playwright-core" / "package.json"
    if not installed.exists() or json.loads(installed.read_text())["version"] != pinned:
        if not npm:
            pytest.skip(f"browser test: playwright-core {pinned} is not in tests/browser/node_modules "
                        "and there is no npm to install it (apt-get install npm)")
        cmd = [npm, "install", "--no-audit", "--no-fund", "--no-package-lock"]
        try:
            r = _run(cmd, cwd=BROWSER_DIR, timeout=INSTALL_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.skip(f"browser test: npm install took over {INSTALL_TIMEOUT_S} s (no network?)")
        if r.returncode:
            pytest.skip(f"browser test: npm install of playwright-core {pinned} failed:\n"
                        f"{_tail(r.stdout + r.stderr)}")
    return [node, str(BROWSER_DIR / "drive_lab.mjs")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """Stop the process group this fixture started: JupyterLab shuts its kernels down on SIGTERM."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def lab(tmp_path):
    """JupyterLab from `python3 tools/bootstrap.py lab`, on 127.0.0.1 with a token; yields its URL,
    token and log file. Its nbgrader exchange and gradebook live in tmp_path, not in the checkout."""
    settings = tmp_path / "lab-settings"
    for rel, value in LAB_SETTINGS.items():
        (settings / rel).parent.mkdir(parents=True, exist_ok=True)
        (settings / rel).write_text(json.dumps(value))
    (tmp_path / "exchange").mkdir()
    port, token = free_port(), os.urandom(16).hex()
    cmd = ["python3", "tools/bootstrap.py", "lab", "--no-browser", f"--port={port}",
           "--ServerApp.ip=127.0.0.1", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}",
           f"--Exchange.root={tmp_path / 'exchange'}",
           f"--CourseDirectory.db_url=sqlite:///{tmp_path / 'gradebook.db'}"]
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "lab-workspaces"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"))
    log_path = tmp_path / "lab.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + LAB_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"`{' '.join(cmd[:3])}` exited with {proc.returncode}:\n"
                            f"{_tail(log_path.read_text(), 30)}", pytrace=False)
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer in {LAB_START_TIMEOUT_S} s:\n"
                            f"{_tail(log_path.read_text(), 30)}", pytrace=False)
            time.sleep(1)
        yield {"base": base, "token": token, "log": log_path}
    finally:
        _stop(proc)
