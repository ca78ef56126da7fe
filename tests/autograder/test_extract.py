"""Pulling kernels and LAUNCH data out of notebooks and folders, without executing anything."""
import pytest

from ag_helpers import make_notebook
from autograder.extract import cuda_cell_name, extract_cells, find_submissions, read_notebook, strip_magic
from autograder.launchcfg import LaunchDataError, launch_from_source, merge_launch, parse_launch_cell
from autograder.runner import _exercise_of_file
from autograder import SpecError, get_exercise

K1 = 'extern "C" __global__ void saxpy(int n, float a, const float* x, float* y) { }'
K2 = 'extern "C" __global__ void rgb_to_gray(const unsigned char* rgb, unsigned char* gray, int w, int h) { }'


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
    names = ["saxpy", "rgb_to_gray"]
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
