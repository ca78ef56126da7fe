"""Chapter 11's graded side on the CPU: the spec loads and agrees with its notebook, every kernel of the chapter
(references, the notebook's starters, the corpus) compiles for sm_75, sm_80 and sm_90, the median starter uses
local memory by the grader's own SASS check while the reference does not, the median network and the NumPy
references are right, and the exercise notebook goes through nbgrader's release with compiling stubs.

The GPU side: the verdicts and the ratios of the calibration in tests/autograder/test_corpus_gpu.py, the
misaligned views in tests/autograder/test_ch11_gpu.py.
"""
import itertools
import json
import re

import numpy as np
import pytest

from ag_corpus import parse_expect
from ag_helpers import ROOT
from autograder import get_exercise, load_chapter

CH = "11_profiling"
SOLUTIONS = ROOT / "solutions" / CH
CORPUS = ROOT / "tests" / "autograder" / "corpus" / CH
NOTEBOOK = ROOT / "exercises" / "source" / CH / f"{CH}.ipynb"
ARCHS = ("sm_75", "sm_80", "sm_90")
STARTER = "{}_starter"          # the notebook's ungraded starter cell of each exercise: %%cuda --name NAME_starter


def _course():
    course = pytest.importorskip("course")
    try:
        course.compile_for_arch('extern "C" __global__ void k() {}', "sm_80")
    except course.CompileError as exc:
        pytest.skip(f"NVRTC is not usable here: {exc}")
    return course


def _cells():
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    return [("".join(c["source"]) if isinstance(c["source"], list) else c["source"], c) for c in nb["cells"]]


def notebook_starters() -> dict:
    """{exercise: the body of its %%cuda --name EXERCISE_starter cell}, for every exercise of the spec."""
    out = {}
    for ex in load_chapter(CH):
        magic = f"%%cuda --name {STARTER.format(ex.name)}\n"
        found = [src for src, _ in _cells() if src.startswith(magic)]
        assert len(found) == 1, f"{NOTEBOOK.name}: expected one cell starting {magic!r}, found {len(found)}"
        out[ex.name] = found[0][len(magic):]
    return out


def _kernel_sources():
    """(id, source, kernel name) of every kernel of the chapter: references, starters, corpus files."""
    out = [(f"solution/{ex.name}", (SOLUTIONS / ex.source_file).read_text(), ex.kernel) for ex in load_chapter(CH)]
    out += [(f"starter/{name}", src, STARTER.format(name)) for name, src in notebook_starters().items()]
    out += [(f"corpus/{p.parent.name}/{p.stem}", p.read_text(), p.parent.name) for p in sorted(CORPUS.glob("*/*.cu"))]
    return out


def test_spec_has_two_graded_exercises_and_no_problems():
    """Does the spec load with two kernel exercises that each have speed points, the median requiring
    no_local_memory, and does check-specs find nothing wrong (spec, references, notebook)?"""
    from autograder.spec_checks import check_chapter
    exercises = {ex.name: ex for ex in load_chapter(CH)}
    assert set(exercises) == {"row_means", "median3x3"}
    assert all(ex.points.correctness > 0 and ex.points.speed > 0 for ex in exercises.values())
    assert exercises["median3x3"].required_techniques == ("no_local_memory",)
    assert exercises["median3x3"].tolerance == "exact"
    problems = [str(p) for p in check_chapter(CH, compile=False)]
    assert problems == [], problems


def test_corpus_covers_each_exercise():
    """Does every exercise have a corpus folder with the untouched stub (0 points), the notebook's starter
    and at least two wrong kernels, each file's first line a well-formed expectation?"""
    for ex in load_chapter(CH):
        files = {p.stem: parse_expect(p) for p in (CORPUS / ex.name).glob("*.cu")}
        assert files.get("stub", {}).get("points") == 0.0, ex.name
        assert "starter" in files, ex.name
        wrong = [s for s, e in files.items() if s not in ("stub", "starter") and e.get("points") == 0.0]
        assert len(wrong) >= 2, (ex.name, wrong)


def test_corpus_starters_are_the_notebooks():
    """Is each corpus starter.cu the notebook's starter cell with the kernel renamed (comments aside), so the
    starter's GPU verdict is the verdict of what students are handed?"""
    def code(src):
        return [ln.strip() for ln in src.splitlines() if ln.strip() and not ln.strip().startswith("//")]
    for name, src in notebook_starters().items():
        corpus = (CORPUS / name / "starter.cu").read_text()
        assert code(corpus) == code(src.replace(STARTER.format(name), name)), name


def test_starter_expectations_follow_the_spec():
    """Does the row_means starter expect its correctness points (slow), and the median starter 0 (failed: the
    required technique), as the spec's points and required_techniques give?"""
    rows = get_exercise(CH, "row_means")
    exp = parse_expect(CORPUS / "row_means" / "starter.cu")
    assert (exp["status"], exp["points"]) == ("slow", rows.points.correctness)
    exp = parse_expect(CORPUS / "median3x3" / "starter.cu")
    assert (exp["status"], exp["points"]) == ("failed", 0.0) and "local memory" in exp["reason~"]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_compiles(arch):
    """Does every kernel of the chapter compile with NVRTC for this arch (a GPU run wasted on a typo costs
    more than this test)?"""
    course = _course()
    for ident, src, kernel in _kernel_sources():
        prog = course.compile_for_arch(src, arch, name=f"{ident}.cu")
        assert kernel in prog.kernel_names and prog.cubin, ident


@pytest.mark.parametrize("arch", ARCHS)
def test_median_starter_uses_local_memory_and_the_reference_does_not(arch):
    """The grader's no_local_memory check on this arch: does it fail the notebook's starter (naming LDL/STL)
    and pass the reference and every corpus kernel except the starter, as their expect lines assume?"""
    course = _course()
    from autograder import techniques
    ex = get_exercise(CH, "median3x3")
    cases = {"starter": (notebook_starters()["median3x3"], STARTER.format("median3x3"), False),
             "reference": ((SOLUTIONS / ex.source_file).read_text(), ex.kernel, True)}
    for p in (CORPUS / "median3x3").glob("*.cu"):
        cases[f"corpus/{p.stem}"] = (p.read_text(), ex.kernel, p.stem != "starter")
    for label, (src, kernel, clean) in cases.items():
        prog = course.compile_for_arch(src, arch)
        assert (prog.resources[kernel].local_bytes == 0) is clean, (label, prog.resources[kernel])
        if kernel != ex.kernel:
            continue      # the starter cell's own name: the grader's check runs on the renamed corpus copy
        (v,) = techniques.evaluate(ex, prog)
        if v.passed is None:
            pytest.skip(v.message)
        assert v.passed is clean, (label, v.message)
        if not clean:
            assert re.search(r"LDL|STL", v.message) and "local memory" in v.message


def _network(path):
    pairs = re.findall(r"CAS\((p\d), (p\d)\)", path.read_text())
    return [(int(a[1]), int(b[1])) for a, b in pairs]


def test_median_network_finds_the_fifth_smallest():
    """Does the reference's compare-exchange list leave the median of nine in p4 for every input? By the 0-1
    principle it is enough that it does for all 512 inputs of zeros and ones; 10,000 random float sets with
    repeats check it directly."""
    net = _network(SOLUTIONS / "median3x3.cu")
    assert len(net) == 19

    def run(values):
        p = list(values)
        for a, b in net:
            p[a], p[b] = min(p[a], p[b]), max(p[a], p[b])
        return p[4]
    for bits in itertools.product((0, 1), repeat=9):
        assert run(bits) == sorted(bits)[4], bits
    rng = np.random.default_rng(0)
    for values in rng.integers(0, 5, (10_000, 9)):
        assert run(values) == np.sort(values)[4]


def test_median_reference_is_the_clamped_median():
    """Is the NumPy reference, band by band, the median of the clamped 3 x 3 neighbourhood computed pixel by
    pixel, at a single pixel, a single row and column, and a band size that does not divide the height?"""
    ex = get_exercise(CH, "median3x3")
    rng = np.random.default_rng(1)
    for h, w in ((1, 1), (1, 7), (6, 1), (7, 5)):
        img = rng.random((h, w), dtype=np.float32)
        want = np.empty_like(img)
        for y, x in itertools.product(range(h), range(w)):
            near = [img[min(max(y + dy, 0), h - 1), min(max(x + dx, 0), w - 1)]
                    for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
            want[y, x] = sorted(near)[4]
        for chunk in (1, 3, 1024):
            got = ex.reference({"inp": img}, chunk_rows=chunk)["out"]
            assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32)), (h, w)


def test_row_means_tolerance_passes_rounding_and_catches_a_lost_element():
    """With the spec's small-integer inputs, do `s / cols` and `s * (1 / cols)` in float32 both pass rtol,
    while a row missing one non-zero element fails, even in the longest public row (100,003 columns)?"""
    ex = get_exercise(CH, "row_means")
    rtol = ex.tolerance.rtol
    rng = np.random.default_rng(2)
    gen = ex.params[0].gen
    for cols in (1, 37, 1009, 4099, 100_003):
        x = gen(rng, (64, cols), np.float32)
        assert np.abs(x).max() <= 4 and np.array_equal(x, np.round(x))
        want = ex.reference({"inp": x, "cols": np.int32(cols)})["means"].astype(np.float64)
        sums = x.astype(np.float32).sum(axis=1, dtype=np.float32)        # exact: integers below 2^24
        for got in (sums / np.float32(cols), sums * (np.float32(1) / np.float32(cols))):
            assert np.all(np.abs(got - want) <= rtol * np.abs(want)), cols
        lost = x.copy()
        row, col = np.argwhere(lost != 0)[0]
        lost[row, col] = 0
        got = lost.astype(np.float64).sum(axis=1)[row] / cols
        assert abs(got - want[row]) > rtol * abs(want[row]), cols


def test_launches_cover_the_data_and_refuse_what_cannot_run():
    """Does row_means get a warp for every row at any LAUNCH block, and the median a thread for every pixel;
    are a block that is not whole warps and a grid taller than CUDA allows refused with a message?"""
    rows = get_exercise(CH, "row_means")
    for r in (1, 7, 8, 9, 1009, 100_001):
        for block in (32, 96, 256, 1024):
            grid, threads, smem = rows.launch({"rows": r, "cols": 5}, {"block": block})
            assert grid * (block // 32) >= r > (grid - 1) * (block // 32) and (threads, smem) == (block, 0)
    with pytest.raises(ValueError, match="multiple of 32"):
        rows.launch({"rows": 10, "cols": 5}, {"block": 100})
    med = get_exercise(CH, "median3x3")
    (gx, gy), (bx, by), _ = med.launch({"height": 1009, "width": 37}, {})
    assert gx * bx >= 37 and gy * by >= 1009 and (gx - 1) * bx < 37 and (gy - 1) * by < 1009
    with pytest.raises(ValueError, match="65535"):
        med.launch({"height": 65535 * 8 + 1, "width": 4}, {})


# -- the exercise notebook through nbgrader ------------------------------------------------------------------

@pytest.fixture(scope="module")
def released(tmp_path_factory):
    """nbgrader's generate_assignment of this chapter, with the course's configuration: (course root, the
    released notebook as JSON)."""
    pytest.importorskip("nbgrader")
    import os
    import shutil
    import sys
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader
    root = tmp_path_factory.mktemp("course11")
    shutil.copytree(NOTEBOOK.parent, root / "source" / CH)
    config_file = ROOT / "exercises" / "nbgrader_config.py"
    config = PyFileConfigLoader(config_file.name, str(config_file.parent)).load_config()
    config.merge(Config({"CourseDirectory": {"root": str(root)}}))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setenv("PATH", os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
        res = NbGraderAPI(config=config).generate_assignment(CH)
    assert res["success"], res["log"][-3000:]
    return root, json.loads((root / "release" / CH / f"{CH}.ipynb").read_text(encoding="utf-8"))


def test_release_gives_stubs_keeps_starters_and_records_the_points(released):
    """In the student's copy: does each graded cell hold the stub, compile and extract as the exercise's kernel,
    are the starter cells handed out as they are, are the hidden tests gone, and does the gradebook hold one
    graded cell per exercise worth the spec's points?"""
    from autograder.extract import read_notebook
    from nbgrader.api import Gradebook
    course = _course()
    root, nb = released
    path = root / "release" / CH / f"{CH}.ipynb"
    kernels, _launches, problems = read_notebook(path)
    text = "\n".join("".join(c["source"]) for c in nb["cells"])
    assert "BEGIN HIDDEN TESTS" not in text and "BEGIN SOLUTION" not in text
    starters = notebook_starters()
    for ex in load_chapter(CH):
        stub = kernels[ex.name]
        assert "// YOUR CODE HERE" in stub and not problems.get(ex.name), ex.name
        assert ex.kernel in course.compile_for_arch(stub, "sm_80").kernel_names
        assert kernels[STARTER.format(ex.name)] == starters[ex.name].rstrip("\n")
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        cells = gb.find_notebook(CH, CH).grade_cells
        points = {c.name: c.max_score for c in cells}
    assert points == {f"{ex.name}_test": ex.max_points for ex in load_chapter(CH)}
