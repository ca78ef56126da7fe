"""Unit tests of tools/: the bootstrap's choices, the wheelhouse's pip commands, notebook cleaning."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import pytest

from repo_helpers import REPO

SMI_13 = """
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.65.06              Driver Version: 580.65.06      CUDA Version: 13.0     |
|-----------------------------------------+------------------------+----------------------+
"""
SMI_12 = "| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4     |"


# ---- bootstrap ----

def test_parse_nvidia_smi(bootstrap):
    """Is the driver's CUDA version read from nvidia-smi's banner, and None when it has none?"""
    assert bootstrap.parse_nvidia_smi(SMI_13) == (13, 0)
    assert bootstrap.parse_nvidia_smi(SMI_12) == (12, 4)
    assert bootstrap.parse_nvidia_smi("NVIDIA-SMI has failed because it couldn't communicate "
                                      "with the NVIDIA driver.") is None


def test_decode_driver_version(bootstrap):
    """Is cuDriverGetVersion's integer decoded as CUDA does (major*1000 + minor*10)?"""
    assert bootstrap.decode_driver_version(13000) == (13, 0)
    assert bootstrap.decode_driver_version(12040) == (12, 4)
    assert bootstrap.decode_driver_version(12090) == (12, 9)


@pytest.mark.parametrize("version,extra", [
    ((13, 0), "cuda13"), ((13, 2), "cuda13"), ((14, 0), "cuda13"),
    ((12, 0), "cuda12"), ((12, 9), "cuda12"),
])
def test_driver_picks_cupy_build(bootstrap, version, extra):
    """Does a driver for CUDA 13+ get the CUDA 13 CuPy, and one for 12.x the CUDA 12 CuPy, silently?"""
    assert bootstrap.choose_cuda_extra(version) == (extra, None)


def test_no_driver_installs_cuda13_and_says_why(bootstrap):
    """Without a driver, is CUDA 13 installed (NVRTC compiles without a GPU) with one clear sentence?"""
    extra, note = bootstrap.choose_cuda_extra(None)
    assert extra == "cuda13"
    assert "No NVIDIA driver" in note and "compiles" in note and "GPU" in note
    assert note.count(". ") == 0, "one sentence"


def test_old_driver_is_named(bootstrap):
    """Is a driver older than CUDA 12 reported with its version rather than failing later?"""
    extra, note = bootstrap.choose_cuda_extra((11, 8))
    assert extra == "cuda13" and "11.8" in note


def test_extras_for_commands(bootstrap):
    """Does `test` add the test extra, is cuBLASLt only tried where there is a GPU, and are Triton and CuTe's headers
    (both compile without a GPU) tried by the test command everywhere, as optional extras?"""
    assert bootstrap.extras_for("lab", "cuda13", gpu=False) == ["cuda13"]
    assert bootstrap.extras_for("test", "cuda12", gpu=False) == ["cuda12", "test", "triton", "cute"]
    assert bootstrap.extras_for("test", "cuda13", gpu=True) == ["cuda13", "test", "cublaslt", "cuda-python",
                                                                "triton", "cute"]
    assert bootstrap.is_optional("cute") and "cute" in bootstrap.OPTIONAL_NOTES
    # NCCL only where there are GPUs to all-reduce across, for the CuPy build's CUDA major, and never required
    assert bootstrap.extras_for("lab", "cuda12", gpu=True, gpus=2)[-1] == "nccl12"
    assert "nccl13" not in bootstrap.extras_for("lab", "cuda13", gpu=True, gpus=1)
    assert bootstrap.is_optional("nccl13") and not bootstrap.is_optional("cuda13")


def test_second_run_installs_nothing(bootstrap):
    """Is nothing installed again when pyproject.toml is unchanged and the extras are there?"""
    digest = bootstrap.install_digest(b"[project]", "/venv/bin/python", None)
    stamp = {"digest": digest, "extras": ["cuda13", "test"], "failed_optional": []}
    assert bootstrap.missing_extras(stamp, digest, ["cuda13", "test"]) == []
    assert bootstrap.missing_extras(stamp, digest, ["cuda13"]) == []


def test_changes_that_reinstall(bootstrap):
    """Does a new pyproject, a new extra or a new CUDA major each trigger an install?"""
    digest = bootstrap.install_digest(b"[project]", "/venv/bin/python", None)
    stamp = {"digest": digest, "extras": ["cuda13"], "failed_optional": []}
    changed = bootstrap.install_digest(b"[project]\n# edited", "/venv/bin/python", None)
    assert changed != digest
    assert bootstrap.missing_extras(stamp, changed, ["cuda13"]) == ["cuda13"]
    assert bootstrap.missing_extras(stamp, digest, ["cuda13", "test"]) == ["test"]
    assert bootstrap.missing_extras(stamp, digest, ["cuda12"]) == ["cuda12"]
    assert bootstrap.missing_extras(None, digest, ["cuda13"]) == ["cuda13"]
    offline = bootstrap.install_digest(b"[project]", "/venv/bin/python", "/whl")
    assert offline != digest


def test_failed_optional_extra_is_not_retried(bootstrap):
    """Is an optional extra that failed to install left alone until pyproject changes?"""
    stamp = {"digest": "d", "extras": ["cuda13"], "failed_optional": ["cublaslt"]}
    assert bootstrap.missing_extras(stamp, "d", ["cuda13", "cublaslt"]) == []


def test_pip_install_command(bootstrap):
    """Is the project installed editable with its extras, and only from the wheelhouse when set?"""
    cmd = bootstrap.pip_install_command("py", ["cuda13", "test"], None)
    assert cmd[:4] == ["py", "-m", "pip", "install"]
    assert cmd[-2:] == ["-e", f"{REPO}[cuda13,test]"]
    assert "--no-index" not in cmd
    offline = bootstrap.pip_install_command("py", ["cuda13"], "/whl")
    assert offline[-3:] == ["--no-index", "--find-links", "/whl"]


def test_pytest_command_under_ci(bootstrap):
    """Under CI, does pytest keep its closing summary line (no -q) and drop colour codes?"""
    assert bootstrap.pytest_command("py", ["-m", "gpu"], ci=False) == \
        ["py", "-m", "pytest", "-m", "gpu"]  # the GPU tier runs alone: its timings need the GPU to themselves
    ci = bootstrap.pytest_command("py", ["-q", "-k", "x"], ci=True)
    assert "-q" not in ci and "--color=no" in ci and ci[-2:] == ["-k", "x"]
    n = ci.index("-n")
    assert 4 <= int(ci[n + 1]) <= 8 and "--dist" in ci  # the CPU tier in parallel (pytest-xdist)
    assert "-n" not in bootstrap.pytest_command("py", ["-p", "no:xdist"], ci=True)[3:-2]
    # on a machine with a GPU driver a plain run includes the GPU-marked tests: never side by side
    assert "-n" not in bootstrap.pytest_command("py", [], ci=False, gpu=True)


def test_lab_command(bootstrap):
    """Does the lab serve the repository root, open on chapters/, and pass user flags through?"""
    cmd = bootstrap.lab_command("py", ["--no-browser", "--port", "8899"])
    assert cmd[:4] == ["py", "-m", "jupyter", "lab"]
    assert f"--ServerApp.root_dir={REPO}" in cmd
    assert "--LabApp.default_url=/lab/tree/chapters" in cmd
    assert cmd[-3:] == ["--no-browser", "--port", "8899"]
    assert "--allow-root" not in cmd
    assert "--allow-root" in bootstrap.lab_command("py", [], as_root=True)


def test_bootstrap_usage_exit_code():
    """Does an unknown command print the usage and exit 2 without touching .venv?"""
    out = subprocess.run([sys.executable, str(REPO / "tools" / "bootstrap.py"), "nonsense"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert "bootstrap.py lab" in out.stderr and "bootstrap.py test" in out.stderr


# ---- wheelhouse ----

def test_expand_platform(wheelhouse):
    """Does a manylinux tag bring every older tag pip must also accept, the legacy names included?"""
    tags = wheelhouse.expand_platform("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64"
    assert {"manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert "manylinux_2_29_x86_64" not in tags
    assert "manylinux_2_12_aarch64" in wheelhouse.expand_platform("manylinux2014_aarch64")
    assert wheelhouse.expand_platform("win_amd64") == ["win_amd64"]


def test_download_command(wheelhouse):
    """Are wheels downloaded as exact pins, binary only, for the target Python and platform?"""
    opts = wheelhouse.platform_options("3.12", "manylinux_2_28_x86_64")
    cmd = wheelhouse.download_command(["nbformat==5.10.4"], "/whl", opts)
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    assert cmd[cmd.index("--dest") + 1] == "/whl"
    assert cmd[-1] == "nbformat==5.10.4"


def test_resolve_command_is_a_dry_run(wheelhouse):
    """Does resolving only report (dry run, ignoring what this Python has installed)?"""
    cmd = wheelhouse.resolve_command(["nbgrader"], "r.json", "/t", [])
    assert "--dry-run" in cmd and "--ignore-installed" in cmd
    assert cmd[cmd.index("--report") + 1] == "r.json"


def test_install_command(wheelhouse):
    """Does install use only the given wheels (--no-index --no-deps), into --target when asked?"""
    cmd = wheelhouse.install_command(["a.whl"], None)
    assert "--no-index" in cmd and "--no-deps" in cmd and "--target" not in cmd
    cmd = wheelhouse.install_command(["a.whl"], "/site")
    assert cmd[cmd.index("--target") + 1] == "/site" and cmd[-1] == "a.whl"


def test_skip_sets(wheelhouse):
    """Does --for test drop the lab front end, and --minimal what a CUDA image already has?"""
    assert {"jupyterlab", "notebook", "babel"} <= wheelhouse.skip_set("test", False, [])
    assert "jupyterlab" not in wheelhouse.skip_set("all", False, [])
    minimal = wheelhouse.skip_set("all", True, ["Foo_Bar"])
    assert {"numpy", "cupy-cuda13x", "foo-bar"} <= minimal


def test_skipped_packages_take_only_their_own_dependencies(wheelhouse):
    """Is a dependency kept when a kept package needs it, and dropped when only a skipped one does?"""
    resolved = {
        "nbgrader": {"name": "nbgrader", "version": "1", "requires_dist": [
            "jupyterlab<5", "nbformat", "pywin32; sys_platform == 'win32'"]},
        "jupyterlab": {"name": "jupyterlab", "version": "4", "requires_dist": [
            "async-lru", "nbformat", "tests-only; extra == 'test'"]},
        "async-lru": {"name": "async-lru", "version": "2", "requires_dist": []},
        "nbformat": {"name": "nbformat", "version": "5", "requires_dist": [
            "fastjsonschema", "pytest; extra == 'test'"]},
        "fastjsonschema": {"name": "fastjsonschema", "version": "2", "requires_dist": None},
        "jsonschema": {"name": "jsonschema", "version": "4", "requires_dist": [
            "rfc3987-syntax; extra == 'format-nongpl'"]},
        "rfc3987-syntax": {"name": "rfc3987-syntax", "version": "1", "requires_dist": []},
    }
    env = wheelhouse.marker_env("3.12", "manylinux_2_28_x86_64")
    kept = wheelhouse.keep_reachable(resolved, ["nbgrader"], {"jupyterlab"}, env)
    assert kept == ["fastjsonschema", "nbformat", "nbgrader"]
    everything = wheelhouse.keep_reachable(resolved, ["nbgrader"], set(), env)
    assert "async-lru" in everything and "tests-only" not in everything
    with_extra = wheelhouse.keep_reachable(resolved, ["jsonschema[format-nongpl]"], set(), env)
    assert with_extra == ["jsonschema", "rfc3987-syntax"]


def test_requirements_follow_pyproject(wheelhouse):
    """Are the wheelhouse's roots pyproject's dependencies plus the chosen CUDA and test extras?"""
    pytest.importorskip("tomllib")
    reqs = wheelhouse.read_requirements("test", "13", [])
    assert any(r.startswith("cupy-cuda13x") for r in reqs)
    assert any(r.startswith("pytest") for r in reqs)
    assert not any(r.startswith("cupy-cuda12x") for r in reqs)
    assert not any(r.startswith("pytest") for r in wheelhouse.read_requirements("lab", "12", []))


# ---- nbclean ----

def dirty_notebook() -> dict:
    return {
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"},
                     "language_info": {"name": "python", "version": "3.11.7"},
                     "widgets": {"state": {}}, "colab": {"provenance": [], "gpuType": "T4"}},
        "cells": [
            {"cell_type": "markdown", "id": "a", "metadata": {"tags": ["goals"]},
             "source": "# Goals"},
            {"cell_type": "code", "id": "b", "execution_count": 7, "source": "x = 1",
             "metadata": {"nbgrader": {"grade": True, "grade_id": "t1", "points": 2,
                                       "schema_version": 3},
                          "ExecuteTime": {"end_time": "2026"}, "scrolled": True,
                          "jupyter": {"source_hidden": True, "outputs_hidden": True}},
             "outputs": [{"output_type": "stream", "name": "stdout", "text": "1\n"}]},
        ],
    }


def test_nbclean_strips_and_keeps(nbclean):
    """Are outputs, counts and session metadata stripped while nbgrader data and tags stay?"""
    clean = nbclean.clean_notebook(dirty_notebook())
    code = clean["cells"][1]
    assert code["outputs"] == [] and code["execution_count"] is None
    assert code["metadata"] == {
        "nbgrader": {"grade": True, "grade_id": "t1", "points": 2, "schema_version": 3},
        "jupyter": {"source_hidden": True}}
    assert clean["cells"][0]["metadata"] == {"tags": ["goals"]}
    assert clean["metadata"] == {"kernelspec": dirty_notebook()["metadata"]["kernelspec"],
                                 "language_info": {"name": "python"}, "colab": {"gpuType": "T4"}}
    assert set(nbclean.dirt(dirty_notebook())) == {
        "outputs", "execution counts", "cell metadata", "notebook metadata"}
    assert nbclean.dirt(clean) == []


def test_nbclean_check_and_fix(nbclean, tmp_path, capsys):
    """Does --check exit 1 naming a dirty notebook, and does a plain run make it pass --check?"""
    path = tmp_path / "01_x.ipynb"
    path.write_text(json.dumps(dirty_notebook()))
    assert nbclean.main(["--check", str(tmp_path)]) == 1
    assert "01_x.ipynb: outputs" in capsys.readouterr().out
    assert nbclean.main([str(tmp_path)]) == 0
    assert nbclean.main(["--check", str(path)]) == 0
    assert json.loads(path.read_text())["cells"][1]["metadata"]["nbgrader"]["grade_id"] == "t1"


# ---- the conda environment ----

def test_environment_yml_follows_pyproject():
    """Does environment.yml carry every plain dependency of pyproject.toml, and the test tools?"""
    yaml = pytest.importorskip("yaml")
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    conda = {re.split(r"[<>=! ]", d, maxsplit=1)[0] for d in env["dependencies"] if isinstance(d, str)}
    pip = [d for e in env["dependencies"] if isinstance(e, dict) for d in e.get("pip", [])]
    conda |= {re.split(r"[<>=! ;]", d, maxsplit=1)[0] for d in pip if not d.startswith("-")}
    wanted = {re.split(r"[<>=! \[]", d, maxsplit=1)[0]
              for d in project["dependencies"] + project["optional-dependencies"]["test"]}
    assert wanted - conda == set(), f"missing from environment.yml: {sorted(wanted - conda)}"
    assert {"cupy", "cuda-nvrtc", "cuda-cccl"} <= conda


def test_optional_extras_are_declared_and_explained(bootstrap):
    """Is every extra the bootstrap tries an extra of pyproject.toml with a note for when it fails, and are the
    compile-only ones (triton, cute) in environment.yml's pip section too?"""
    yaml = pytest.importorskip("yaml")
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    tried = bootstrap.OPTIONAL + list(bootstrap.NCCL.values())
    assert set(tried) <= set(extras) and set(tried) <= set(bootstrap.OPTIONAL_NOTES)
    assert extras["cute"] == ["nvidia-cutlass>=4.2,<5"]
    env = yaml.safe_load((REPO / "environment.yml").read_text())
    pip = [d for e in env["dependencies"] if isinstance(e, dict) for d in e.get("pip", [])]
    for extra in ("triton", "cute"):
        wanted = {d.split(";")[0].strip() for d in extras[extra]}     # conda's pip lines carry no markers
        assert wanted <= set(pip), f"the {extra} extra is missing from environment.yml's pip section"


def test_bootstrap_help_exits_zero_with_the_two_commands(bootstrap, capsys):
    """Does `bootstrap.py --help` print its usage and exit 0 (it used to exit 2)?"""
    assert bootstrap.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "bootstrap.py lab" in out and "bootstrap.py test" in out
    assert bootstrap.main([]) == 2  # no command at all is still a usage error


def test_wheelhouse_help_explains_every_option(wheelhouse):
    """Does every argument of `wheelhouse.py build` and `install` have a help text, shown by --help (exit 0)?"""
    parser = wheelhouse.build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(subs) == {"build", "install"}
    for name, sub in subs.items():
        undocumented = [a.dest for a in sub._actions if not (a.help and a.help.strip())]
        assert undocumented == [], f"wheelhouse.py {name}: no help text for {undocumented}"
        r = subprocess.run([sys.executable, str(REPO / "tools" / "wheelhouse.py"), name, "--help"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        text = " ".join(r.stdout.split())
        for action in sub._actions:
            first_words = " ".join((action.help % {"default": action.default}).split()[:4])
            assert first_words in text, f"wheelhouse.py {name} --help does not show {action.dest}'s help"


def test_readme_says_what_a_minimal_image_must_have(wheelhouse):
    """The README's offline section names every package `--minimal` leaves to the image, says that the
    wheelhouse serves `bootstrap.py lab` too, and that Python and CUDA versions must match the lab."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    offline = text[text.index("## Offline labs"):]
    offline = offline[:offline.find("\n## ", 3)]
    missing = sorted(p for p in wheelhouse.PREINSTALLED if f"`{p}`" not in offline)
    assert missing == [], f"README's offline section does not name {missing}"
    assert "COURSE_WHEELHOUSE=.whl python3 tools/bootstrap.py lab" in offline
    for option in ("--python-version", "--cuda", "--platform"):
        assert option in offline
