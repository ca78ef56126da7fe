"""Fixtures for the grader's tests: sample sources and a fake grading harness (helpers: ag_helpers.py)."""
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# grading children inherit sys.path; the fake harness must import there whatever pytest's import mode
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

SAXPY = (ROOT / "solutions" / "01_first_kernel" / "saxpy.cu").read_text()
GRAY = (ROOT / "solutions" / "01_first_kernel" / "rgb_to_gray.cu").read_text()


@pytest.fixture
def saxpy_source():
    return SAXPY


@pytest.fixture
def gray_source():
    return GRAY


@pytest.fixture
def fake_harness(monkeypatch):
    """Children use tests/autograder/fake_harness.py instead of the GPU harness."""
    from autograder import runner
    monkeypatch.setattr(runner, "HARNESS_MODULE", "fake_harness")
    monkeypatch.setenv("FAKE_GPU", "h100")
    return runner
