"""The course as a student and an instructor see it: JupyterLab in a real (headless) Chromium.

Started by the README's lab command; drives a chapter (Run All, no error output), a sweep widget
(a slider moved with the keyboard changes the plot) and nbgrader's formgrader. Screenshots land in
tests/browser/screenshots/ (or $COURSE_SCREENSHOTS): look at them.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess

import pytest

from repo_helpers import REPO, chapter_notebooks, exercise_notebooks, fail_on, gpu_status

BROWSER_DIR = REPO / "tests" / "browser"
DRIVER_TIMEOUT_S = 1500
RUN_ALL_TIMEOUT_MS = 900_000
ERROR_LINE = re.compile(r"^\w*(Error|Exception)\b.*:", re.MULTILINE)

# A sweep with a recording, so its sliders exist with or without a GPU: the chapter's own sweep
# has sliders only on a GPU or once a recording of it is committed under benchmarks/results/sweeps.
DEMO_PARAMS = {"n": [1, 2, 4, 8], "block": [64, 128, 256]}
DEMO_SOURCE = """import course.widgets

def run(n, block):
    return n * 1000 / block   # stands in for a measured time: on a GPU the sweep calls it live

course.widgets.sweep(run, {params!r}, metric="us", recorded={recorded!r},
                     title="browser test: a sweep replayed from a recording")
"""


def screenshots_dir():
    return os.environ.get("COURSE_SCREENSHOTS") or str(BROWSER_DIR / "screenshots")


def first_chapter():
    chapters = chapter_notebooks()
    if not chapters:
        pytest.skip("no chapter notebook yet")
    preferred = REPO / "chapters" / "01_first_kernel.ipynb"
    return preferred if preferred in chapters else chapters[0]


def write_demo_sweep(folder):
    folder.mkdir(parents=True, exist_ok=True)
    recorded = folder / "sweep_demo.json"
    points = [{"values": {"n": n, "block": b}, "value": n * 1000 / b, "note": ""}
              for n in DEMO_PARAMS["n"] for b in DEMO_PARAMS["block"]]
    recorded.write_text(json.dumps({"name": "sweep_demo", "gpu": "a recorded GPU", "metric": "us",
                                    "params": DEMO_PARAMS, "points": points}))
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": DEMO_SOURCE.format(params=DEMO_PARAMS, recorded=str(recorded))}
    nb = {"nbformat": 4, "nbformat_minor": 5, "cells": [cell],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}}
    path = folder / "sweep_demo.ipynb"
    path.write_text(json.dumps(nb))
    return path


def notebook_problems(result: dict) -> list[str]:
    """What went wrong in one notebook's run, as the driver reported it."""
    name = result["notebook"]
    if result.get("failure"):
        return [f"{name}: {result['failure']}"]
    problems = []
    state = result["state"]
    if state["executed"] != state["codeCells"]:
        problems.append(f"{name}: Run All executed {state['executed']} of {state['codeCells']} code "
                        "cells (it stops at the first error)")
    for text in result["stderr"]:
        if "Traceback" in text or ERROR_LINE.search(text):
            problems.append(f"{name}: error output:\n{text[-1500:]}")
    problems += [f"{name}: widget failed to render: {t}" for t in result["widgetErrors"]]
    return problems


def slider_problems(result: dict, must_have_slider: bool) -> list[str]:
    name, slider = result["notebook"], result.get("slider") or {}
    if not slider.get("found"):
        return [f"{name}: no sweep slider with a plot found"] if must_have_slider else []
    if not slider["imageChanged"] or slider["valueBefore"] == slider["valueAfter"]:
        return [f"{name}: moving the slider ({slider['valueBefore']} -> {slider['valueAfter']}) did "
                "not change the plot image"]
    before, after = slider["imageBytes"]
    if after < before / 4:  # a blank figure of the same size is a few kB, a plot tens of kB
        return [f"{name}: after moving the slider the plot image is nearly empty ({after} bytes of "
                f"data URL, {before} before)"]
    return []


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.browser
@pytest.mark.both_tiers
@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_student_and_instructor_in_jupyterlab(chromium, node_driver, lab):
    """In Chromium: does a chapter Run All without error output, does a sweep slider change the
    plot, and does the formgrader list the course's assignments?"""
    chapter = first_chapter()
    before = digest(chapter)
    work = BROWSER_DIR / "work" / f"run-{os.getpid()}"  # under the lab's root, git-ignored
    try:
        demo = write_demo_sweep(work)
        cfg = {"base": lab["base"], "token": lab["token"], "chromium": chromium,
               "screenshots": screenshots_dir(), "formgrader": True,
               "notebooks": [chapter.relative_to(REPO).as_posix(), demo.relative_to(REPO).as_posix()],
               "timeouts": {"run": RUN_ALL_TIMEOUT_MS}}
        proc = subprocess.run([*node_driver, json.dumps(cfg)], cwd=BROWSER_DIR, capture_output=True,
                              text=True, timeout=DRIVER_TIMEOUT_S)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(proc.stderr)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"drive_lab.mjs failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    report = json.loads(lines[-1])
    print(json.dumps(report, indent=1))
    assert not report.get("failure"), report["failure"]

    chapter_run, demo_run = report["notebooks"]
    with_gpu = gpu_status()[0]
    problems = notebook_problems(chapter_run) + notebook_problems(demo_run)
    # With a GPU the chapter's sweep measures live, so its sliders must be there.
    problems += slider_problems(chapter_run, must_have_slider=with_gpu)
    problems += slider_problems(demo_run, must_have_slider=True)
    fg = report.get("formgrader", {})
    expected = sorted(p.parent.name for p in exercise_notebooks())
    if fg.get("failure"):
        problems.append(f"formgrader: {fg['failure']}")
    elif not set(expected) <= set(fg.get("assignments", [])):
        problems.append(f"formgrader lists {fg.get('assignments')}, expected {expected}")
    if digest(chapter) != before:
        problems.append(f"{chapter.name} was modified by the browser run (autosave should be off)")
    fail_on(problems, f"screenshots in {screenshots_dir()}; JupyterLab log: {lab['log']}")
