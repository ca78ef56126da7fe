"""Pulling kernels and LAUNCH data out of notebooks and folders, without executing anything."""
import json

import pytest

from ag_helpers import ROOT, make_notebook
from autograder.extract import cuda_cell_name, extract_cells, find_submissions, read_notebook, strip_magic
from autograder.launchcfg import LaunchDataError, launch_from_source, merge_launch, parse_launch_cell
from autograder.runner import _exercise_of_file
from autograder import SpecError, get_exercise, load_chapter

K1 = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { }'
K2 = 'extern "C" __global__ void rgb_to_gray(const unsigned char* rgb, unsigned char* gray, int w, int h) { }'


def ch01_exercises() -> list:
    """Chapter 01's exercise names, from its spec: adding an exercise there must not break these tests."""
    return [e.name for e in load_chapter("01_first_kernel")]


def test_tagged_cell_is_found_and_magic_line_stripped():
    cells = [("code", "%load_ext course", []), ("markdown", "%%cuda --name saxpy\nnot code", []),
             ("code", f"%%cuda --name saxpy --no-run\n{K1}", ["kernel:saxpy"])]
    kernels, launches, problems = extract_cells(cells)
    assert kernels == {"saxpy": K1} and not launches and not problems


def test_cuda_cell_name_from_option_or_first_kernel():
    assert cuda_cell_name(f"%%cuda --name saxpy --no-run\n{K1}") == "saxpy"
    assert cuda_cell_name(f"%%cuda --name=saxpy\n{K1}") == "saxpy"
    assert cuda_cell_name(f"%%cuda --arch sm_80\n{K2}\n{K1}") == "rgb_to_gray"
    assert cuda_cell_name(K1) is None  # a plain Python cell is not a kernel cell
    assert strip_magic(f"\n%%cuda\n{K1}") == K1


def test_later_cell_wins_like_running_the_notebook():
    cells = [("code", f"%%cuda --name saxpy\n{K1} // first", []), ("code", f"%%cuda --name saxpy\n{K1} // second", [])]
    assert extract_cells(cells)[0]["saxpy"].endswith("// second")


def test_launch_cell_is_read_as_a_literal_never_executed(tmp_path):
    marker = tmp_path / "ran"
    evil = f"LAUNCH = __import__('pathlib').Path({str(marker)!r}).touch()"
    cells = [("code", 'LAUNCH = {"block": 128}', ["launch:saxpy"]), ("code", evil, ["launch:rgb_to_gray"])]
    kernels, launches, problems = extract_cells(cells)
    assert launches == {"saxpy": {"block": 128}}
    assert "rgb_to_gray" in problems and "literal dict" in problems["rgb_to_gray"]
    assert not marker.exists()


def test_launch_values_are_sanitized():
    assert parse_launch_cell('SAXPY_LAUNCH = {"block": [16, 16]}', "saxpy") == {"block": (16, 16)}
    for bad in ('LAUNCH = {"block": 1.5}', 'LAUNCH = {"block": True}', 'LAUNCH = [256]', 'LAUNCH = {1: 2}'):
        with pytest.raises(LaunchDataError):
            parse_launch_cell(bad)


def test_launch_comment_in_source():
    src = f'// LAUNCH = {{"block": 2048}}\n{K1}'
    assert launch_from_source(src) == {"block": 2048}
    assert launch_from_source(K1) is None


def test_merge_launch_rejects_unknown_keys_with_suggestion():
    ex = get_exercise("01_first_kernel", "saxpy")
    assert merge_launch(ex, {"block": 128}) == {"block": 128}
    assert merge_launch(ex, None) == {"block": 256}
    with pytest.raises(LaunchDataError, match="Did you mean 'block'"):
        merge_launch(ex, {"blocks": 128})
    with pytest.raises(LaunchDataError):
        merge_launch(ex, {"block": -1})


def test_notebook_file(tmp_path):
    path = tmp_path / "01_first_kernel.ipynb"
    make_notebook([("code", ["%%cuda --name saxpy\n", K1], [])], path)
    kernels, _, _ = read_notebook(path)
    assert kernels == {"saxpy": K1}


def test_nbgrader_submitted_layout(tmp_path):
    for student in ("alice", "bob"):
        d = tmp_path / "submitted" / student / "01_first_kernel"
        d.mkdir(parents=True)
        make_notebook([("code", f"%%cuda --name saxpy\n{K1}", ["kernel:saxpy"])], d / "01_first_kernel.ipynb")
        (d / ".ipynb_checkpoints").mkdir()
        make_notebook([], d / ".ipynb_checkpoints" / "01_first_kernel-checkpoint.ipynb")
    subs = find_submissions(tmp_path / "submitted", known_chapters=["01_first_kernel"])
    assert [s.label for s in subs] == ["alice/01_first_kernel", "bob/01_first_kernel"]
    assert all(s.chapter == "01_first_kernel" and s.kernels == {"saxpy": K1} for s in subs)


def test_cu_files_take_the_exercise_from_file_or_folder(tmp_path):
    d = tmp_path / "01_first_kernel" / "saxpy"
    d.mkdir(parents=True)
    (d / "off_by_one.cu").write_text(K1)
    (tmp_path / "saxpy.cu").write_text(K1)
    subs = find_submissions(tmp_path, chapter="01_first_kernel", known_chapters=["01_first_kernel"])
    names = ch01_exercises()
    assert sorted(_exercise_of_file(s, names, None) for s in subs) == ["saxpy", "saxpy"]
    (tmp_path / "mystery.cu").write_text(K1)
    sub = find_submissions(tmp_path / "mystery.cu", chapter="01_first_kernel")[0]
    with pytest.raises(SpecError, match="cannot tell which exercise"):
        _exercise_of_file(sub, names, None)
    assert _exercise_of_file(sub, names, "saxpy") == "saxpy"


def test_chapter_is_inferred_from_folder_names(tmp_path):
    d = tmp_path / "01_first_kernel" / "saxpy"
    d.mkdir(parents=True)
    (d / "x.cu").write_text(K1)
    (sub,) = find_submissions(d / "x.cu", known_chapters=["01_first_kernel"])
    assert sub.chapter == "01_first_kernel" and sub.single_exercise


# --- malformed, extra and hostile files: one bad file costs only its student --------------------------------

def _cell(source, tags=[], **extra):  # noqa: B006 - never mutated
    return {"cell_type": "code", "metadata": {"tags": tags}, "source": source, "outputs": [],
            "execution_count": None, **extra}


def _good(path):
    make_notebook([("code", f"%%cuda --name saxpy\n{K1}", ["kernel:saxpy"])], path)


def _tree(root, student, assignment="01_first_kernel"):
    d = root / student / assignment
    d.mkdir(parents=True)
    (d / "timestamp.txt").write_text("2024-01-01 00:00:00.000000 UTC")
    return d


MALFORMED = {
    "too_deep": ('{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    "a_list": ("[]", "holds a list"),
    "not_json": ('{"cells": [', "not valid JSON"),
    "not_utf8": (b'{"cells": [], "x": "\xff\xfe"}', "not UTF-8"),
    "tag_not_a_string": ({"cells": [_cell(K1, [5])]}, "tag that is a number"),
    "tags_a_string": ({"cells": [_cell(K1, "kernel:saxpy")]}, "tags of cell 1"),
    "source_a_number": ({"cells": [_cell(42)]}, "source of cell 1"),
    "source_list_of_numbers": ({"cells": [_cell(["%%cuda --name saxpy\n", 7])]}, "source of cell 1"),
    "cell_not_an_object": ({"cells": [_cell(K1), "cell"]}, "cell 2 (counting from the top) is a string"),
    "metadata_not_an_object": ({"cells": [{"cell_type": "code", "metadata": "tags", "source": K1}]},
                               "metadata of cell 1"),
    "cells_not_a_list": ({"cells": {"0": {}}}, '"cells" field is an object'),
    "nbformat_3": ({"worksheets": [{"cells": []}], "nbformat": 3}, "nbformat 3"),
}


def _write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_a_malformed_notebook_is_one_problem_row_and_the_rest_is_graded(tmp_path, kind):
    """Does a notebook that is not one become a single submission whose problem says what is wrong and what
    to do, while the other students' notebooks are still read?"""
    content, says = MALFORMED[kind]
    _good(_tree(tmp_path, "alice") / "01_first_kernel.ipynb")
    _write(_tree(tmp_path, "bob") / "01_first_kernel.ipynb", content)
    subs = find_submissions(tmp_path, known_chapters=["01_first_kernel"])
    assert [s.label for s in subs] == ["alice/01_first_kernel", "bob/01_first_kernel"]
    assert subs[0].kernels == {"saxpy": K1} and not subs[0].problems
    bob = subs[1]
    assert bob.chapter == "01_first_kernel" and not bob.kernels and list(bob.problems) == ["*"]
    assert says in bob.problems["*"], bob.problems["*"]
    assert "JupyterLab" in bob.problems["*"]  # what to do, not only what is wrong


def test_a_huge_notebook_is_not_read_and_says_how_to_shrink_it(tmp_path):
    """Is a notebook over the size cap refused without being parsed, with advice on clearing outputs?"""
    import autograder.extract as extract
    big = make_notebook([("code", f"%%cuda --name saxpy\n{K1}", ["kernel:saxpy"])])
    big["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout",
                                   "text": "x" * (extract.MAX_FILE_BYTES + 1)}]
    _write(_tree(tmp_path, "bob") / "01_first_kernel.ipynb", big)
    (big_cu := tmp_path / "bob" / "01_first_kernel" / "saxpy.cu").write_text("x" * (extract.MAX_FILE_BYTES + 1))
    nb, cu = find_submissions(tmp_path, known_chapters=["01_first_kernel"])
    assert extract.MAX_FILE_BYTES == 20 << 20
    assert not nb.kernels and "MiB" in nb.problems["*"] and "Clear Outputs" in nb.problems["*"]
    assert cu.path == str(big_cu) and cu.single_exercise and not cu.kernels and "MiB" in cu.problems["*"]


@pytest.mark.parametrize("value", [None, 0, 1.5, True, "text", [], [1, 2], {}, {"cells": None}, {"cells": 3},
                                   {"cells": [None]}, {"cells": [[]]}, {"cells": [{"metadata": None}]},
                                   {"cells": [{"metadata": {"tags": None}, "source": None}]},
                                   {"cells": [{"metadata": {"tags": [None]}}]},
                                   {"cells": [{"cell_type": 3}]}, {"cells": [{"source": {"a": 1}}]}])
def test_cells_of_and_extract_cells_take_any_json_value(value):
    """Do cells_of and extract_cells answer any JSON value with cells or a ValueError, never a crash?"""
    from autograder.extract import cells_of
    try:
        cells = cells_of(value)
    except ValueError as exc:
        assert "not a notebook nbgrader can read" in str(exc) or "nbformat 3" in str(exc)
        return
    assert extract_cells(cells) == ({}, {}, {})


@pytest.mark.parametrize("value", [None, 5, 7, 0.5, {}, [], "stray text", ["%%cuda"], (1, 2, 3), [("code", 1, [])]])
def test_extract_cells_and_cuda_cell_name_refuse_odd_values_cleanly(value):
    """Is a value that is not a list of (type, source, tags) a ValueError, and never a kernel name?"""
    assert cuda_cell_name(value) is None
    if value == []:
        assert extract_cells(value) == ({}, {}, {})
    else:
        with pytest.raises(ValueError):
            extract_cells(value)


def test_read_notebook_says_what_is_wrong(tmp_path):
    """Does read_notebook raise a ValueError that names the problem, for a JSON list and for deep nesting?"""
    (p := tmp_path / "x.ipynb").write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds a list"):
        read_notebook(p)
    p.write_text("[" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_notebook(p)


def test_a_hostile_launch_cell_is_a_problem_for_its_exercise_only():
    """Does a launch cell that makes Python's parser give up (deep nesting) fail only that exercise?"""
    cells = [("code", f"%%cuda --name saxpy\n{K1}", ["kernel:saxpy"]),
             ("code", 'LAUNCH = {"block": ' + "-" * 100_000 + "1}", ["launch:saxpy"]),
             ("code", "x = " + "+".join(["1"] * 200_000), ["launch:rgb_to_gray"])]
    kernels, launches, problems = extract_cells(cells)
    assert kernels == {"saxpy": K1} and not launches
    assert set(problems) == {"saxpy", "rgb_to_gray"} and "literal dict" in problems["saxpy"]


def test_only_the_assignment_notebook_counts_in_nbgrader_layout(tmp_path):
    """In submitted/<student>/<assignment>/, are copies, scratch notebooks and stray .cu files left out,
    each with a reason, while .cu files named after an exercise still count?"""
    from autograder.extract import collect_submissions
    d = _tree(tmp_path, "alice")
    _good(d / "01_first_kernel.ipynb")
    for extra in ("01_first_kernel-Copy1.ipynb", "Untitled.ipynb", ".hidden.ipynb"):
        _good(d / extra)
    (d / "old").mkdir()
    _good(d / "old" / "01_first_kernel.ipynb")
    (d / ".ipynb_checkpoints").mkdir()
    _good(d / ".ipynb_checkpoints" / "01_first_kernel-checkpoint.ipynb")
    (d / "scratch.cu").write_text(K1)
    (d / "saxpy.cu").write_text(K1)
    (d / "rgb_to_gray").mkdir()
    (d / "rgb_to_gray" / "attempt2.cu").write_text(K2)
    names = {"01_first_kernel": ch01_exercises()}
    subs, ignored = collect_submissions(tmp_path, known_chapters=list(names), exercises_of=names.__getitem__)
    assert [s.label for s in subs] == ["alice/01_first_kernel", "alice/01_first_kernel/rgb_to_gray/attempt2",
                                       "alice/01_first_kernel/saxpy"]
    assert [line.split(":")[0] for line in ignored] == [
        "alice/01_first_kernel/01_first_kernel-Copy1.ipynb", "alice/01_first_kernel/Untitled.ipynb",
        "alice/01_first_kernel/old/01_first_kernel.ipynb", "alice/01_first_kernel/scratch.cu"]
    assert "only 01_first_kernel.ipynb" in ignored[0] and ", ".join(names["01_first_kernel"]) in ignored[-1]
    assert find_submissions(tmp_path, known_chapters=list(names), exercises_of=names.__getitem__) == subs


def test_nbgrader_case_of_the_assignment_name_is_accepted(tmp_path):
    """Is an assignment folder and notebook named with other capitals still that chapter's notebook?"""
    d = _tree(tmp_path, "alice", "01_First_Kernel")
    _good(d / "01_First_Kernel.ipynb")
    _good(d / "Untitled.ipynb")
    from autograder.extract import collect_submissions
    subs, ignored = collect_submissions(tmp_path, known_chapters=["01_first_kernel"])
    assert [(s.label, s.chapter) for s in subs] == [("alice/01_First_Kernel", "01_first_kernel")]
    assert len(ignored) == 1 and "Untitled.ipynb" in ignored[0]


def test_a_flat_folder_of_notebooks_keeps_working(tmp_path):
    """Is each notebook of a flat folder whose chapter can be told graded on its own (distinct labels, even
    in a folder named after a chapter), and one whose chapter cannot be told listed instead of failing?"""
    from autograder.extract import collect_submissions
    _good(tmp_path / "01_first_kernel.ipynb")
    _good(tmp_path / "02_memory_transfer.ipynb")
    _good(tmp_path / "notes.ipynb")
    (tmp_path / "01_first_kernel").mkdir()
    for student in ("alice", "bob"):
        _good(tmp_path / "01_first_kernel" / f"{student}.ipynb")
    known = ["01_first_kernel", "02_memory_transfer"]
    subs, ignored = collect_submissions(tmp_path, known_chapters=known)
    assert [(s.label, s.chapter) for s in subs] == [
        ("01_first_kernel/alice", "01_first_kernel"), ("01_first_kernel/bob", "01_first_kernel"),
        ("01_first_kernel", "01_first_kernel"), ("02_memory_transfer", "02_memory_transfer")]
    assert len(ignored) == 1 and ignored[0].startswith("notes.ipynb: cannot tell its chapter")
    subs, ignored = collect_submissions(tmp_path, chapter="01_first_kernel", known_chapters=known)
    assert "notes" in [s.label for s in subs] and "02_memory_transfer" not in [s.label for s in subs]


def test_chapter_option_selects_that_assignment_only(tmp_path):
    """With chapter 01_first_kernel, are other assignments' folders and notebooks left out (and listed),
    instead of being graded against chapter 01's exercises?"""
    from autograder.extract import collect_submissions
    for student in ("alice", "bob"):
        _good(_tree(tmp_path, student) / "01_first_kernel.ipynb")
        _good(_tree(tmp_path, student, "07_staged_gemm") / "07_staged_gemm.ipynb")
    (tmp_path / "alice" / "07_staged_gemm" / "saxpy.cu").write_text(K1)
    known = ["01_first_kernel", "07_staged_gemm"]
    subs = find_submissions(tmp_path, chapter="01_first_kernel", known_chapters=known)
    assert [s.label for s in subs] == ["alice/01_first_kernel", "bob/01_first_kernel"]
    _, ignored = collect_submissions(tmp_path, chapter="01_first_kernel", known_chapters=known)
    assert ignored == [f"{p}: belongs to 07_staged_gemm, not to --chapter 01_first_kernel" for p in (
        "alice/07_staged_gemm/07_staged_gemm.ipynb", "alice/07_staged_gemm/saxpy.cu",
        "bob/07_staged_gemm/07_staged_gemm.ipynb")]


def test_a_file_name_cannot_smuggle_control_characters_into_ignored_lines(tmp_path):
    """Is a student's file name with escapes and a newline shown escaped, on one line?"""
    from autograder.extract import collect_submissions
    _good(tmp_path / "evil\x1b[2J\nrow.ipynb")
    _, ignored = collect_submissions(tmp_path, known_chapters=["01_first_kernel"])
    assert ignored == ["evil\\x1b[2J\\nrow.ipynb: cannot tell its chapter (no NN_topic in its name or folders); "
                       "pass --chapter"]


@pytest.mark.parametrize("cells,says", [
    ([(f"%%cuda --name saxpy\n{K1} // first", ["kernel:saxpy"]), (f"{K1} // second", ["kernel:saxpy"])],
     "2 cells are tagged kernel:saxpy (cells 1 and 2"),
    ([(f"%%cuda --name saxpy\n{K1} // first", []), ("print(1)", []), (f"%%cuda --name saxpy\n{K1} // second", [])],
     "2 cells are %%cuda cells named saxpy (cells 1 and 3"),
    ([(f"%%cuda --name saxpy\n{K1} // first", []), (f"{K1} // second", ["kernel:saxpy"])],
     "2 cells hold saxpy"),
])
def test_a_duplicated_kernel_cell_is_a_note_and_the_last_one_is_graded(tmp_path, cells, says):
    """Do two cells for one exercise cost nothing but a note naming them, with the last one graded?"""
    make_notebook([("code", src, tags) for src, tags in cells], tmp_path / "01_first_kernel.ipynb")
    (sub,) = find_submissions(tmp_path, known_chapters=["01_first_kernel"])
    assert sub.kernels["saxpy"].endswith("// second") and not sub.problems
    assert list(sub.notes) == ["saxpy"] and says in sub.notes["saxpy"], sub.notes
    assert "the last one" in sub.notes["saxpy"] and "was graded" in sub.notes["saxpy"]


def test_one_cell_with_a_tag_and_a_cuda_name_is_no_duplicate(tmp_path):
    """Is a single cell both tagged kernel:saxpy and named by %%cuda counted once (no note)?"""
    make_notebook([("code", f"%%cuda --name saxpy\n{K1}", ["kernel:saxpy", "kernel:saxpy"])],
                  tmp_path / "01_first_kernel.ipynb")
    (sub,) = find_submissions(tmp_path, known_chapters=["01_first_kernel"])
    assert sub.kernels == {"saxpy": K1} and sub.notes == {}


def test_grading_a_folder_survives_a_malformed_notebook(fake_harness, tmp_path):
    """Does grading a folder with one broken notebook still grade the others, the broken one scoring 0 with
    the reason, instead of stopping the whole run?"""
    from autograder import grade_path
    saxpy = (ROOT / "solutions" / "01_first_kernel" / "saxpy.cu").read_text()
    make_notebook([("code", f"%%cuda --name saxpy\n{saxpy}", ["kernel:saxpy"])],
                  _tree(tmp_path, "alice") / "01_first_kernel.ipynb")
    _write(_tree(tmp_path, "bob") / "01_first_kernel.ipynb", MALFORMED["too_deep"][0])
    report = grade_path(tmp_path, exercise="saxpy", speed=False)
    rows = {e.submission: e for e in report.exercises}
    assert rows["alice/01_first_kernel"].points > 0, rows["alice/01_first_kernel"].feedback()
    assert rows["bob/01_first_kernel"].points == 0
    assert "nested too deeply" in rows["bob/01_first_kernel"].reason


def test_a_symbolic_link_is_never_read(tmp_path):
    """Is a submitted .cu that links to a file outside the submission left unread (its text would come
    back in a compile error)?"""
    from autograder.extract import collect_submissions
    secret = tmp_path / "secret.txt"
    secret.write_text("the instructor's secret")
    d = tmp_path / "submitted" / "mallory" / "01_first_kernel"
    d.mkdir(parents=True)
    (d / "saxpy.cu").symlink_to(secret)
    subs, _ = collect_submissions(tmp_path / "submitted", chapter="01_first_kernel",
                                  known_chapters=["01_first_kernel"], exercises_of=lambda ch: ["saxpy"])
    assert all("secret" not in "".join(s.kernels.values()) for s in subs)
