"""`python -m autograder check-specs` catches, on a CPU, the spec mistakes that used to show only on grading day.

Each test plants one mistake in a copy of chapter 01 (its spec, reference solutions and exercise notebook, with
the loader's paths pointed at the copy) and runs the command: it must exit 2 and say what is wrong, where.
"""
from __future__ import annotations

import json
import shutil

import pytest

from ag_helpers import ROOT
from autograder import cli, loader, speclock
from autograder.loader import chapters, load_chapter
from autograder.spec_checks import _nvrtc_missing, check_chapter

CH = "01_first_kernel"
SPEC = f"autograder/specs/{CH}.py"
NOTEBOOK = f"exercises/source/{CH}/{CH}.ipynb"


class ChapterCopy:
    """Chapter 01's files under ``root``, which the loader reads instead of the repository's."""

    def __init__(self, root):
        self.root = root

    def plant(self, rel: str, old: str, new: str) -> None:
        """Replace the one occurrence of ``old`` in the file ``rel`` with ``new``."""
        path = self.root / rel
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{old!r} should occur once in {rel}"
        path.write_text(text.replace(old, new), encoding="utf-8")

    def notebook(self) -> dict:
        return json.loads((self.root / NOTEBOOK).read_text(encoding="utf-8"))

    def edit_notebook(self, edit) -> None:
        """Apply ``edit(nb)`` to the notebook's JSON and write it back in the repository's style."""
        nb = self.notebook()
        edit(nb)
        (self.root / NOTEBOOK).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    def cell(self, nb: dict, *, tag: str = "", grade_id: str = "") -> dict:
        for c in nb["cells"]:
            meta = c.get("metadata", {})
            if tag in meta.get("tags", []) or (grade_id and meta.get("nbgrader", {}).get("grade_id") == grade_id):
                return c
        raise AssertionError(f"no cell {tag or grade_id}")


def copy_chapter(tmp_path, monkeypatch):
    """Copy chapter 01 under ``tmp_path`` and point the loader there (a generator: the body of a fixture)."""
    root = tmp_path / "repo"
    (root / "autograder" / "specs").mkdir(parents=True)
    shutil.copy(ROOT / SPEC, root / SPEC)
    for folder in (f"solutions/{CH}", f"exercises/source/{CH}"):
        shutil.copytree(ROOT / folder, root / folder)
    monkeypatch.setattr(loader, "ROOT", root)
    monkeypatch.setattr(loader, "SPECS_DIR", root / "autograder" / "specs")
    monkeypatch.setattr(loader, "SOLUTIONS_DIR", root / "solutions")
    monkeypatch.setattr(speclock, "LOCK_FILE", root / "autograder" / "specs.lock.json")  # nothing frozen here
    load_chapter.cache_clear()
    yield ChapterCopy(root)
    load_chapter.cache_clear()


@pytest.fixture
def chapter_copy(tmp_path, monkeypatch):
    yield from copy_chapter(tmp_path, monkeypatch)


def run_cli(capsys, *args) -> tuple:
    """(exit code, everything printed) of `python -m autograder ARGS`."""
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def check_specs(capsys, *args) -> tuple:
    return run_cli(capsys, "check-specs", *args)


def fails_with(capsys, *expected, args=()) -> str:
    code, text = check_specs(capsys, *args)
    assert code == 2, f"check-specs passed a broken spec:\n{text}"
    for e in expected:
        assert e in text, f"expected {e!r} in:\n{text}"
    return text


needs_nvrtc = pytest.mark.skipif(bool(_nvrtc_missing()), reason="NVRTC cannot be loaded here")


def test_the_copy_passes(chapter_copy, capsys):
    """Is the untouched copy clean, so that each planted mistake below is what the command reports?"""
    assert check_chapter(CH) == []
    code, text = check_specs(capsys)
    assert code == 0 and f"{CH}: {len(load_chapter(CH))} exercise(s) ok" in text, text


def test_the_repository_passes(capsys):
    """Do every chapter's spec, reference kernels, NumPy references and notebook pass, as committed?"""
    problems = {ch: [str(p) for p in check_chapter(ch)] for ch in chapters()}
    assert not any(problems.values()), problems
    code, text = check_specs(capsys)
    assert code == 0, text


def test_in_and_out_swapped(chapter_copy, capsys):
    """saxpy's x and y declared with each other's roles: the kernel's const x cannot be an output."""
    chapter_copy.plant(SPEC, 'In("x", "float32", "n"), InOut("y", "float32", "n")',
                       'InOut("x", "float32", "n"), In("y", "float32", "n")')
    fails_with(capsys, "exercise 'saxpy'", "parameter 3 of saxpy in solutions/01_first_kernel/saxpy.cu",
               "read-only, but the spec declares it InOut('x')", "parameter 4", "a writable pointer, but the spec "
               "declares it In('y')")


def test_params_out_of_order(chapter_copy, capsys):
    """width and height swapped: both ints, so only the names show it."""
    chapter_copy.plant(SPEC, 'Scalar("width", "int", "width"), Scalar("height", "int", "height")',
                       'Scalar("height", "int", "height"), Scalar("width", "int", "width")')
    fails_with(capsys, "exercise 'rgb_to_gray'", "the spec lists 'height' as parameter 3, but in "
               "solutions/01_first_kernel/rgb_to_gray.cu it is parameter 4", "the kernel's C order")


def test_kernel_dtype_mismatch_still_fails_at_load(chapter_copy, capsys):
    chapter_copy.plant(SPEC, 'Scalar("a", "float", Uniform(0.5, 2.0))', 'Scalar("a", "double", Uniform(0.5, 2.0))')
    fails_with(capsys, f"{SPEC}: does not load: exercise 'saxpy', field 'params'",
               "do not match the reference kernel in saxpy.cu")


@pytest.mark.parametrize("old,new,says", [
    ('return {"y": v["a"] * v["x"] + v["y"]}', 'return {"z": v["a"] * v["x"] + v["y"]}',
     ["exercise 'saxpy'", "returned the keys ['z']; the grader reads ['y']", "no 'y'"]),
    ('return {"gray": g.astype(np.uint8)}', 'return {"gray": g.T.astype(np.uint8)}',
     ["exercise 'rgb_to_gray'", "at sizes width=37, height=1001", "returned shape (37, 1001) for 'gray'",
      "transposed?"]),
    ('return {"gray": g.astype(np.uint8)}', 'return {"gray": g / 1.0}',
     ["exercise 'rgb_to_gray'", "returned float64 for 'gray' (Out uint8", "truncates"]),
    ('return {"gray": g.astype(np.uint8)}', 'return {"gray": g[:-1]}',
     ["exercise 'rgb_to_gray'", "returned 0 values (shape (0, 1)) for 'gray'"]),
    ('return {"gray": g.astype(np.uint8)}', 'return {"gray": g * 300}',
     ["exercise 'rgb_to_gray'", "outside uint8's range"]),
    ('rgb = v["rgb"].astype(np.uint32)', 'rgb = v["rbg"].astype(np.uint32)',
     ["exercise 'rgb_to_gray'", "the NumPy reference raised KeyError: 'rbg'"]),
    ('return {"y": v["a"] * v["x"] + v["y"]}', 'return {"y": v["x"] / 0}',
     ["exercise 'saxpy'", "NaN or infinite value(s) for 'y'"]),
], ids=["wrong-key", "transposed", "float-for-int", "wrong-size", "out-of-range", "raises", "nan"])
def test_numpy_reference(chapter_copy, capsys, old, new, says):
    """Is the NumPy reference run on the spec's own inputs at its smallest sizes, and its output checked?"""
    chapter_copy.plant(SPEC, old, new)
    fails_with(capsys, f"{SPEC}:", *says)


@needs_nvrtc
def test_reference_kernel_that_does_not_compile(chapter_copy, capsys):
    chapter_copy.plant(f"solutions/{CH}/saxpy.cu", "y[i] = a * x[i] + y[i];", "y[i] = a * x[i] + y[i]")
    text = fails_with(capsys, f"solutions/{CH}/saxpy.cu: exercise 'saxpy': the reference kernel does not compile "
                      "with NVRTC for sm_80", "expected a \";\"")
    assert "Traceback" not in text
    code, text = check_specs(capsys, "--no-compile")  # the notebook then differs from the file, nothing else
    assert code == 2 and "does not compile" not in text and "the solution cell should be" in text


@pytest.mark.parametrize("old,new,says", [
    ("speed_threshold=0.8,\n        floor_bytes=lambda s: 12", "speed_threshold=1.5,\n        floor_bytes=lambda s: 12",
     ["field 'speed_threshold'", "ratio in (0, 1]", "got 1.5"]),
    ("speed_threshold=0.8,\n        floor_bytes=lambda s: 12", "speed_threshold=0,\n        floor_bytes=lambda s: 12",
     ["field 'speed_threshold'", "got 0"]),
    ("speed_tiers=((0.5, 0.5),)", "speed_tiers=((0.5, 0.5), (0.3, 0.75))",
     ["field 'speed_tiers'", "should give fewer points than the tier above it"]),
    ("speed_tiers=((0.5, 0.5),)", "speed_tiers=((0.9, 0.5),)", ["field 'speed_tiers'", "below speed_threshold=0.8"]),
    ("points=Points(correctness=6, speed=4),\n        speed_threshold=0.8,\n        speed_tiers",
     "points=Points(correctness=10),\n        speed_threshold=0.8,\n        speed_tiers",
     ["field 'speed_tiers'", "no speed points"]),
], ids=["above-1", "zero", "tier-fraction-up", "tier-above-threshold", "tiers-without-speed"])
def test_nonsense_thresholds(chapter_copy, capsys, old, new, says):
    chapter_copy.plant(SPEC, old, new)
    fails_with(capsys, f"{SPEC}: does not load", *says)


def test_test_cell_points_differ_from_the_spec(chapter_copy, capsys):
    chapter_copy.edit_notebook(lambda nb: chapter_copy.cell(nb, grade_id="saxpy_test")["metadata"]["nbgrader"]
                               .update(points=8))
    fails_with(capsys, f"{NOTEBOOK} cell", "exercise 'saxpy': the hidden test cell is worth 8 points, the spec's "
               "saxpy 10", f"python -m autograder sync {CH}")


def test_solution_cell_differs_from_the_solution_file(chapter_copy, capsys):
    chapter_copy.plant(f"solutions/{CH}/rgb_to_gray.cu", "// END SOLUTION", "// a late fix\n    // END SOLUTION")
    fails_with(capsys, "exercise 'rgb_to_gray': the solution cell should be '%%cuda --name rgb_to_gray --no-run' "
               f"and then solutions/{CH}/rgb_to_gray.cu", "the file has '    // a late fix'")


def test_notebook_quotes_another_threshold(chapter_copy, capsys):
    """The spec's threshold changed and the notebook still says the old one; and a number in the prose."""
    chapter_copy.plant(SPEC, "speed_threshold=0.8,\n        floor_bytes=lambda s: 12",
                       "speed_threshold=0.75,\n        floor_bytes=lambda s: 12")
    text = fails_with(capsys, "exercise 'saxpy': says \"full speed points at 0.8 x the reference's speed or "
                      "better\"; the spec says \"full speed points at 0.75 x")
    assert "rgb_to_gray" not in text

    def prose(nb):
        cell = nb["cells"][3]
        cell["source"] = cell["source"][:-1] + [cell["source"][-1] + " Aim for 0.9 x the reference."]
    chapter_copy.edit_notebook(prose)
    fails_with(capsys, "quotes '0.9 x the reference', but the spec's speed ratios are 0.75")


def test_an_exercise_without_notebook_cells(chapter_copy, capsys):
    """An exercise added to the spec but not to the notebook is named, with the cell to add."""
    chapter_copy.plant(SPEC, "EXERCISES = [\n", "EXERCISES = [\n    Exercise(\n        name=\"saxpy_again\", "
                       "kernel=\"saxpy\", source_file=\"saxpy.cu\", params=[Scalar(\"n\", \"int\", \"n\"), "
                       "Scalar(\"a\", \"float\", 2.0), In(\"x\", \"float32\", \"n\"), InOut(\"y\", \"float32\", \"n\")],"
                       " sizes=[{\"n\": 1}, {\"n\": 2}, {\"n\": 33}, {\"n\": 1_000_003}, {\"n\": LARGER_THAN_L2}], "
                       "launch=saxpy_launch, "
                       "launch_defaults={\"block\": 256}, reference=saxpy_reference, points=Points(correctness=3),\n"
                       "    ),\n")
    fails_with(capsys, "exercise 'saxpy_again': no cell is tagged kernel:saxpy_again",
               "`%%cuda --name saxpy_again --no-run`", "expected one hidden test cell with grade id saxpy_again_test")


def test_a_misspelt_chapter_is_a_usage_error(capsys):
    code, text = check_specs(capsys, "01_first_kernal")
    assert code == 2 and "Did you mean '01_first_kernel'" in text
