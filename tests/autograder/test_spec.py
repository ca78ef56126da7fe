"""Spec loading and validation: errors name the file, exercise and field, with 'did you mean'."""
import json

import pytest

from autograder import LARGER_THAN_L2, SpecError, get_exercise, load_chapter
from autograder.loader import chapters, load_spec_file
from autograder.sync import notebook_path
from autograder.spec import evaluate, names_in

TEMPLATE = '''
from autograder import LARGER_THAN_L2, Exercise, In, InOut, Out, Points, Scalar, Tolerance, Uniform, cdiv

def launch(sizes, cfg):
    return cdiv(sizes["n"], cfg["block"]), cfg["block"], 0

EXERCISES = [
    Exercise(
        name="saxpy", kernel="saxpy", source_file={source_file!r},
        params=[Scalar("n", "int", "n"), Scalar("a", {a_type!r}, Uniform(0.5, 2.0)),
                In("x", "float32", {shape!r}), InOut("y", "float32", "n")],
        sizes={sizes},
        launch={launch}, launch_defaults={{"block": 256}},
        reference=lambda v: {{"y": v["a"] * v["x"] + v["y"]}},
        points=Points(correctness=6, speed=4),
        floor_bytes={floor},
        {extra}
    ),
]
'''
GOOD = dict(source_file="saxpy.cu", a_type="float", shape="n",
            sizes='[{"n": 1}, {"n": 2}, {"n": 33}, {"n": 1_000_003}, {"n": LARGER_THAN_L2}]',
            launch="launch", floor='lambda s: 12 * s["n"]', extra="")


def write_spec(tmp_path, **changes):
    # the file is named after the chapter, so solutions/01_first_kernel/ is where sources are looked up
    path = tmp_path / "01_first_kernel.py"
    path.write_text(TEMPLATE.format(**{**GOOD, **changes}))
    return path


def load_error(tmp_path, **changes) -> str:
    with pytest.raises(SpecError) as info:
        load_spec_file(write_spec(tmp_path, **changes))
    return str(info.value)


def test_template_is_valid(tmp_path):
    (ex,) = load_spec_file(write_spec(tmp_path))
    assert ex.name == "saxpy" and ex.chapter == "01_first_kernel" and ex.max_points == 10


@pytest.mark.parametrize("chapter", chapters())
def test_real_chapter_spec_loads(chapter):
    """Does each chapter's spec load, with one exercise per solution cell of its notebook, in the same order?"""
    names = [e.name for e in load_chapter(chapter)]
    nb = json.loads(notebook_path(chapter).read_text(encoding="utf-8"))
    tags = [t.partition(":")[2] for c in nb["cells"] for t in c.get("metadata", {}).get("tags", [])
            if t.startswith(("kernel:", "call:"))]
    assert names and names == tags


def test_misspelt_field_says_did_you_mean_with_line(tmp_path):
    msg = load_error(tmp_path, extra="tolerence=Tolerance(1e-5),")
    assert "Exercise has no field 'tolerence'" in msg and "Did you mean 'tolerance'?" in msg
    assert "01_first_kernel.py, line" in msg


@pytest.mark.parametrize("sizes,needs", [
    ('[{"n": 2}, {"n": 33}, {"n": 1_000_003}, {"n": LARGER_THAN_L2}]', "every size is 1"),
    ('[{"n": 1}, {"n": 64}, {"n": 1_000_000}, {"n": LARGER_THAN_L2}]', "prime"),
    ('[{"n": 1}, {"n": 64}, {"n": 1_000_003}]', "larger than L2"),
])
def test_required_size_cases(tmp_path, sizes, needs):
    msg = load_error(tmp_path, sizes=sizes)
    assert "field 'sizes'" in msg and "exercise 'saxpy'" in msg and needs in msg


def test_misspelt_size_name(tmp_path):
    msg = load_error(tmp_path, sizes='[{"n": 1}, {"m": 33}]')
    assert "field 'sizes'" in msg and "'m'" in msg


def test_shape_with_unknown_size_name(tmp_path):
    msg = load_error(tmp_path, shape="nn")
    assert "field 'sizes'" in msg or "field 'params'" in msg
    assert "'nn'" in msg


def test_missing_source_file_suggests_the_right_one(tmp_path):
    msg = load_error(tmp_path, source_file="saxpi.cu")
    assert "field 'source_file'" in msg and "Did you mean 'saxpy.cu'?" in msg


def test_params_must_match_the_reference_kernel(tmp_path):
    msg = load_error(tmp_path, a_type="double")
    assert "field 'params'" in msg and "do not match the reference kernel in saxpy.cu" in msg


def test_unknown_ctype_suggests(tmp_path):
    msg = load_error(tmp_path, a_type="flaot")
    assert "unknown C type 'flaot'" in msg and "Did you mean 'float'?" in msg


def test_launch_function_is_checked_at_load(tmp_path):
    msg = load_error(tmp_path, launch='lambda s, c: (0, 256, 0)')
    assert "field 'launch'" in msg and "grid should be a positive int" in msg
    msg = load_error(tmp_path, launch='lambda s, c: c["blocks"]')
    assert "field 'launch'" in msg and "KeyError" in msg


def test_speed_points_need_a_floor(tmp_path):
    msg = load_error(tmp_path, floor="None")
    assert "field 'floor_bytes'" in msg


def test_tiers_must_be_below_threshold(tmp_path):
    msg = load_error(tmp_path, extra="speed_tiers=((0.9, 0.5),),")
    assert "field 'speed_tiers'" in msg


def test_integer_outputs_cannot_have_float_tolerance():
    from autograder.loader import validate
    ex = get_exercise("01_first_kernel", "rgb_to_gray")
    from autograder import Tolerance
    bad = ex.__class__(**{**ex.__dict__, "tolerance": Tolerance(1e-3)})
    with pytest.raises(SpecError, match="compared exactly"):
        validate(bad, "autograder/specs/01_first_kernel.py")


def test_unknown_chapter_and_exercise_suggest():
    with pytest.raises(SpecError, match="Did you mean '01_first_kernel'"):
        load_chapter("01_first_kernal")
    with pytest.raises(SpecError, match="Did you mean 'saxpy'"):
        get_exercise("01_first_kernel", "saxpi")


def test_larger_than_l2_resolves_to_smallest_odd_size_over_the_target():
    ex = get_exercise("01_first_kernel", "saxpy")
    l2 = 50 << 20
    n = ex.resolve_sizes({"n": LARGER_THAN_L2}, l2)["n"]
    assert n % 2 == 1 and 8 * n >= 2 * l2 and 8 * (n - 2) < 2 * l2
    big = ex.resolve_sizes({"n": LARGER_THAN_L2 * 4}, l2)["n"]
    assert 8 * big >= 8 * l2
    g = get_exercise("01_first_kernel", "rgb_to_gray")
    s = g.resolve_sizes({"width": 4099, "height": LARGER_THAN_L2}, l2)
    assert s["width"] == 4099 and 4 * 4099 * s["height"] >= 2 * l2 and list(s) == ["width", "height"]


def test_expressions_are_restricted():
    assert evaluate("3 * width * height", {"width": 2, "height": 5}) == 30
    assert evaluate("cdiv(n, 256)", {"n": 257}) == 2
    assert names_in(("height", "width", 3)) == {"height", "width"}
    for bad in ("__import__('os')", "n.real", "[n]", "lambda: 1"):
        with pytest.raises(SpecError):
            evaluate(bad, {"n": 1})


def test_size_multiples_move_the_edge_cases_to_the_unit(tmp_path):
    """A contract "n a multiple of 16" needs 16 (not 1), 16 x a prime, and rounds LARGER_THAN_L2 up to 16s."""
    ok = dict(sizes='[{"n": 16}, {"n": 48}, {"n": 272}, {"n": LARGER_THAN_L2}]', extra='size_multiples={"n": 16},')
    (ex,) = load_spec_file(write_spec(tmp_path, **ok))
    l2 = 50 << 20
    n = ex.resolve_sizes({"n": LARGER_THAN_L2}, l2)["n"]
    assert n % 16 == 0 and 8 * n >= 2 * l2 and 8 * (n - 16) < 2 * l2
    assert "not a multiple of 16" in load_error(tmp_path, sizes='[{"n": 16}, {"n": 33}, {"n": 272}, {"n": LARGER_THAN_L2}]',
                                                extra='size_multiples={"n": 16},')
    assert "unit times a prime" in load_error(tmp_path, sizes='[{"n": 16}, {"n": 144}, {"n": 64}, {"n": LARGER_THAN_L2}]',
                                              extra='size_multiples={"n": 16},')
    assert "every size is 1" in load_error(tmp_path, sizes='[{"n": 32}, {"n": 48}, {"n": 272}, {"n": LARGER_THAN_L2}]',
                                           extra='size_multiples={"n": 16},')


def test_gemm_chapters_keep_their_contracts():
    """Chapter 08's big cases honour WMMA's multiples of 16 and mma_gemm's n, k multiples of 8."""
    l2 = 50 << 20
    w = get_exercise("08_tensor_cores", "wmma_gemm")
    big = next(c for c in w.sizes if any(not isinstance(v, int) for v in c.values()))
    s = w.resolve_sizes(big, l2)
    assert all(v % 16 == 0 for v in s.values())
    m = get_exercise("08_tensor_cores", "mma_gemm")
    assert all(c["n"] % 8 == 0 and c["k"] % 8 == 0 for c in m.sizes)
    assert m.required_techniques == ("tensor_cores",) and w.required_techniques == ("tensor_cores",)
