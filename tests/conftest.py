"""Shared fixtures and the two test tiers.

CPU tier: everything not marked `gpu`; runs everywhere, CI included.
GPU tier: `pytest -m gpu`; tests marked `gpu` skip with "no CUDA GPU: ..." where there is none.
A test marked `both_tiers` runs in the CPU tier and is selected by `-m gpu` as well.
Helpers for test modules live in repo_helpers.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

# Re-exported, so `from conftest import REPO` works in test modules (see pytest_collectstart).
from repo_helpers import (REPO, all_notebooks, chapter_notebooks, exercise_notebooks,  # noqa: F401
                          fail_on, gpu_status, import_course, load_tool, read_json_notebook, rel)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # Runs before pytest's own -m filtering, so `-m gpu` selects the both_tiers tests too.
    for item in items:
        if item.get_closest_marker("both_tiers") and not item.get_closest_marker("gpu"):
            item.add_marker(pytest.mark.gpu)
    needs_gpu = [i for i in items
                 if i.get_closest_marker("gpu") and not i.get_closest_marker("both_tiers")]
    if needs_gpu:
        ok, why = gpu_status()
        if not ok:
            for item in needs_gpu:
                item.add_marker(pytest.mark.skip(reason=why))


@pytest.hookimpl(tryfirst=True)
def pytest_collectstart(collector):
    # pytest imports every conftest.py under the one name `conftest`, so `from conftest import X` in
    # a test module would get whichever folder's conftest was imported last. Just before a test
    # module is imported, point that name at the conftest nearest to it, which is what it means.
    if not isinstance(collector, pytest.Module):
        return
    conftests = {Path(m.__file__).parent: m
                 for m in collector.config.pluginmanager.get_plugins()
                 if getattr(m, "__file__", None) and Path(m.__file__).name == "conftest.py"}
    for folder in collector.path.parents:
        if folder in conftests:
            sys.modules["conftest"] = conftests[folder]
            return


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def course_module():
    return import_course()


@pytest.fixture(scope="session")
def bootstrap():
    return load_tool("bootstrap")


@pytest.fixture(scope="session")
def wheelhouse():
    return load_tool("wheelhouse")


@pytest.fixture(scope="session")
def nbclean():
    return load_tool("nbclean")
