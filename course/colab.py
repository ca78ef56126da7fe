"""Google Colab: install the course into Colab's own Python, with the CuPy build for its driver.

Every chapter and every exercise notebook starts with the cell that `cell_source()` returns. On Colab it
clones the repository and runs `setup()` from this file *by path*: `import course` cannot work before the
course is installed, so this module uses the standard library only and never imports the rest of the
package. Elsewhere the cell, and `setup()`, do nothing.

Where Colab clones from is one setting, ``repo_url`` under ``[tool.course]`` in pyproject.toml (`repo_url()`).
The cell cannot read it (nothing of the course is there yet), so tools/add_colab_cell.py writes it into
every notebook's cell, and into the exercises' note on how to open them in Colab (`exercise_note()`);
the tests and `python -m autograder check-specs` fail while a notebook holds another address.

`setup()` picks the CuPy extra the way tools/bootstrap.py does (it loads that file, so the two never
disagree): the driver's CUDA version from nvidia-smi, then the course (editable) and pyproject's
requirements with the cuda12 or cuda13 extra, which bring NVRTC and the header wheels that let
`mma.h` find `crt/mma.h`. A second run installs nothing. COURSE_WHEELHOUSE=DIR installs from a folder of wheels only (tests simulate Colab that way).
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

__all__ = ["DEFAULT_DIR", "NOTE_BEGIN", "NOTE_END", "repo_url", "on_colab", "setup", "cell_source",
           "exercise_note"]

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
DEFAULT_DIR = "/content/cuda-course"
# The exercises' Colab note sits between these in the notebook's title cell (invisible when rendered),
# so tools/add_colab_cell.py can rewrite it without touching the author's prose around it.
NOTE_BEGIN, NOTE_END = "<!-- colab -->", "<!-- /colab -->"
STAMP = Path(".cache", "colab-install.json")  # in the checkout, under a git-ignored folder
# Colab ships cupy-cuda12x; two CuPy builds in one environment shadow each other.
OTHER_CUPY = {"cuda13": "cupy-cuda12x", "cuda12": "cupy-cuda13x"}
# Colab brings its own front end. JupyterLab and nbgrader serve local and instructor use; installed
# into Colab's environment they would upgrade the Jupyter server that Colab itself runs on.
COLAB_SKIP = {"jupyterlab", "nbgrader"}

# Run in a fresh interpreter after installing, so it sees the new packages whatever this kernel
# imported before.
_VERSIONS = """
import cupy, course
from cupy.cuda import nvrtc, runtime
v = runtime.driverGetVersion() if course.gpu_available() else None
missing = course.missing_headers()
print("CuPy", cupy.__version__, "| NVRTC", ".".join(map(str, nvrtc.getVersion())),
      "| driver CUDA", f"{v // 1000}.{v % 1000 // 10}" if v else "none (no GPU in this runtime)")
print("CUDA headers: all found (mma.h -> crt/mma.h resolves)" if not missing
      else "CUDA headers missing: " + ", ".join(f"{h} ({src})" for h, src in missing.items()))
"""


def repo_url(pyproject: str | os.PathLike | None = None) -> str:
    """The repository Colab clones, ``[tool.course] repo_url`` of pyproject.toml; "" while unset."""
    text = Path(pyproject or PYPROJECT).read_text(encoding="utf-8")
    try:
        import tomllib
    except ImportError:  # Python 3.10: the one key, read by hand
        m = re.search(r'^\[tool\.course\][^\[]*?^repo_url\s*=\s*"([^"]*)"', text, re.M | re.S)
        return m.group(1).strip() if m else ""
    return str(tomllib.loads(text).get("tool", {}).get("course", {}).get("repo_url", "")).strip()


def on_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def _bootstrap(repo: Path) -> dict:
    return runpy.run_path(str(repo / "tools" / "bootstrap.py"))


def requirements(pyproject: str, extra: str) -> list[str]:
    """What the course needs on Colab: pyproject's dependencies and ``extra``, less COLAB_SKIP."""
    import tomllib  # Python 3.11+, as on Colab
    project = tomllib.loads(pyproject)["project"]
    reqs = project["dependencies"] + project["optional-dependencies"][extra]
    return [r for r in reqs if re.match(r"[A-Za-z0-9_.\-]+", r).group().lower() not in COLAB_SKIP]


def install_commands(repo: Path, extra: str, python: str, wheelhouse: str | None) -> list[list[str]]:
    """pip commands: the course itself (editable, so solutions/ and the specs stay beside it), then
    its requirements for Colab."""
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if wheelhouse:
        pip += ["--no-index", "--find-links", wheelhouse]
    reqs = requirements((repo / "pyproject.toml").read_text(), extra)
    return [pip + ["--no-deps", "--config-settings", "editable_mode=compat", "-e", str(repo)], pip + reqs]


def _pip(cmd: list[str], check: bool = True) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"installing the course failed ({' '.join(cmd)}):\n{tail}")


def _versions(repo: Path) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", _VERSIONS], capture_output=True, text=True, env=env)
    return (out.stdout if out.returncode == 0 else out.stdout + out.stderr).strip()


def _enable_widgets() -> None:
    # Colab renders ipywidgets 8 (the sweeps' sliders) only through its custom widget manager.
    try:
        from google.colab import output
        output.enable_custom_widget_manager()
    except Exception:
        pass


def setup(repo_dir: str | os.PathLike | None = None) -> dict | None:
    """On Colab: install the course from ``repo_dir`` (default: the checkout holding this file) with
    the CuPy build for the driver, put it on sys.path, print the versions. Elsewhere: None."""
    if not on_colab():
        return None
    repo = Path(repo_dir or Path(__file__).resolve().parent.parent).resolve()
    boot = _bootstrap(repo)
    version = boot["driver_cuda_version"]()
    extra, note = boot["choose_cuda_extra"](version)
    wheelhouse = os.environ.get("COURSE_WHEELHOUSE") or None
    stamp_path = repo / STAMP
    pyproject = (repo / "pyproject.toml").read_bytes()
    wanted = {"extra": extra, "python": sys.executable, "pyproject": hashlib.sha256(pyproject).hexdigest()}
    try:
        done = json.loads(stamp_path.read_text()) == wanted
    except (OSError, ValueError):
        done = False
    if note:
        print(note)
    if done:
        print(f"course: already installed from {repo} with the {extra} extra.")
    else:
        print(f"course: installing from {repo} with CuPy for {extra.replace('cuda', 'CUDA ')} "
              "(about a minute) ...", flush=True)
        _pip([sys.executable, "-m", "pip", "uninstall", "-y", "-q", OTHER_CUPY[extra]], check=False)
        for cmd in install_commands(repo, extra, sys.executable, wheelhouse):
            _pip(cmd)
        stamp_path.parent.mkdir(exist_ok=True)
        stamp_path.write_text(json.dumps(wanted))
    # An editable install's .pth file is read at interpreter start, not by this running kernel.
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    importlib.invalidate_caches()
    _enable_widgets()
    print(_versions(repo))
    return {"repo": str(repo), "extra": extra, "driver_cuda": version, "installed_now": not done}


def cell_source(url: str | None = None, kind: str = "chapter") -> str:
    """The first code cell of every chapter (``kind="chapter"``: then the preflight) or exercise notebook
    (``"exercise"``: no preflight, which would measure the GPU's ceilings in every graded notebook): the
    Colab set-up, self-contained, then ``%load_ext course``. ``url`` defaults to `repo_url()`; when it is
    empty, the cell on Colab stops with what to do instead of a failed git clone."""
    if kind not in ("chapter", "exercise"):
        raise ValueError(f"kind must be 'chapter' or 'exercise', not {kind!r}")
    url = repo_url() if url is None else url
    last = "import course; course.preflight()\n%load_ext course" if kind == "chapter" else "%load_ext course"
    return f'''# On Colab, first install the course and the CuPy build for this GPU (elsewhere this does nothing).
import os, sys
if "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ:
    import runpy, subprocess
    COURSE_DIR = os.environ.get("COURSE_DIR", "{DEFAULT_DIR}")
    if not os.path.isdir(COURSE_DIR):
        url = os.environ.get("COURSE_REPO_URL", {json.dumps(url)})
        if not url:
            raise SystemExit("Colab cannot fetch the course: its address is not set in this notebook. Ask your "
                             "instructor for it, run  os.environ['COURSE_REPO_URL'] = 'ADDRESS'  in a new cell "
                             "above this one, then run this cell again. (Instructors: set repo_url under "
                             "[tool.course] in pyproject.toml, then run python3 tools/add_colab_cell.py.)")
        git = subprocess.run(["git", "clone", "-q", "--depth=1", url, COURSE_DIR], capture_output=True,
                             text=True, env=dict(os.environ, GIT_TERMINAL_PROMPT="0"))
        if git.returncode:
            raise SystemExit(f"git could not fetch the course from {{url}}: {{git.stderr.strip()}}. Check the "
                             "address (os.environ['COURSE_REPO_URL'] = 'ADDRESS' in a new cell above this one "
                             "sets another), then run this cell again.")
    runpy.run_path(os.path.join(COURSE_DIR, "course", "colab.py"))["setup"](COURSE_DIR)
{last}'''


def exercise_note(url: str | None = None) -> str:
    """The exercises' note on working in Colab (markdown, between NOTE_BEGIN and NOTE_END).

    Its link is Colab's start page, whose Upload tab opens a file, not a GitHub address: the notebook to
    open is the student's own copy, with their work in it, while the repository holds the instructor's
    version with the solutions filled in."""
    url = repo_url() if url is None else url
    source = (f"It fetches the course from `{url}`." if url else
              "The course's address is not set in this copy yet: the cell says what to do.")
    return (f"{NOTE_BEGIN}\n"
            "**No NVIDIA GPU here? Open this notebook in Colab.** Go to\n"
            "[colab.research.google.com](https://colab.research.google.com/), choose *Upload* and pick this file\n"
            "(your work comes with it), then *Runtime > Change runtime type >* a GPU (T4 is enough). Run the code\n"
            "cell at the top first: on Colab it installs the course (about a minute), anywhere else it does\n"
            f"nothing. {source}\n"
            "Colab keeps your work in its own copy: *File > Download > Download .ipynb* before you hand it in.\n"
            f"{NOTE_END}")
