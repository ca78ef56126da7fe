"""`Constant` params (a kernel reading a `__constant__` array the grader fills): spec validation, the
signature compare that leaves them out, the declaration and capacity checks, a fake grading. No GPU."""
import pytest

from autograder import SpecError, Status, get_exercise, grade_source
from autograder.loader import ROOT, load_spec_file
from autograder.signature import check_constants, compare_signature

CH, EX = "09_convolution", "conv_const"
CONV = get_exercise(CH, EX)
SOLUTION = (ROOT / "solutions" / CH / "conv_const.cu").read_text()
DECL = "__constant__ float w[MAX_TAPS];"

TEMPLATE = '''
import numpy as np
from autograder import LARGER_THAN_L2, Constant, Exercise, In, Out, Points, Scalar, Uniform, cdiv

EXERCISES = [Exercise(
    name="conv_const", kernel="conv_const", source_file="conv_const.cu",
    params=[In("x", np.float32, "n + g - 1"), {constant}, Out("y", np.float32, "n"),
            Scalar("n", "int", "n"), Scalar("g", "int", "g")],
    sizes={sizes},
    launch=lambda s, c: (cdiv(s["n"], 256), 256, 0),
    reference=lambda v: {{"y": np.zeros(int(v["n"]), np.float32)}},
    points=Points(correctness=5),
    {extra}
)]
'''
GOOD = dict(constant='Constant("w", np.float32, ("g",))',
            sizes='[{"n": 1, "g": 1}, {"n": 1009, "g": 7}, {"n": 33, "g": 1024}, {"n": LARGER_THAN_L2, "g": 64}]',
            extra="")


def write_spec(tmp_path, **changes):
    path = tmp_path / f"{CH}.py"  # named after the chapter: the source is solutions/09_convolution/conv_const.cu
    path.write_text(TEMPLATE.format(**{**GOOD, **changes}))
    return path


def load_error(tmp_path, **changes) -> str:
    with pytest.raises(SpecError) as info:
        load_spec_file(write_spec(tmp_path, **changes))
    return str(info.value)


# -- the spec ----------------------------------------------------------------------------------------

def test_constant_spec_loads_and_is_not_in_the_signature(tmp_path):
    (ex,) = load_spec_file(write_spec(tmp_path))
    assert [c.name for c in ex.constants] == ["w"] and [p.name for p in ex.arrays] == ["x", "y"]
    assert ex.signature() == "const float* x, float* y, int n, int g"
    assert ex.constant_capacity(ex.constants[0]) == 1024
    assert ex.constant_declaration(ex.constants[0]) == "__constant__ float w[1024]"


def test_chapter_09_conv_const_reads_w_from_constant_memory():
    assert CONV.signature() == "const float* x, float* y, int n, int g"
    assert [(c.name, c.np_dtype.name, c.shape) for c in CONV.constants] == [("w", "float32", ("g",))]
    assert compare_signature(CONV, SOLUTION) == ""


def test_constant_shape_on_the_l2_size_is_refused(tmp_path):
    msg = load_error(tmp_path, constant='Constant("w", np.float32, "n")')
    assert "09_convolution.py" in msg and "'conv_const'" in msg and "field 'params'" in msg
    assert "Constant 'w'" in msg and "LARGER_THAN_L2" in msg and "64 KiB" in msg


def test_constant_larger_than_constant_memory_is_refused(tmp_path):
    msg = load_error(tmp_path, constant='Constant("w", np.float32, ("g", 32))')
    assert "field 'params'" in msg and "Constant 'w' needs 131072 bytes" in msg and "64 KiB" in msg


def test_constant_bad_name_dtype_and_gen_are_refused(tmp_path):
    assert "C identifier" in load_error(tmp_path, constant='Constant("w-1", np.float32, ("g",))')
    assert "not a NumPy dtype" in load_error(tmp_path, constant='Constant("w", "flaot32", ("g",))')
    assert "gen should be a Uniform" in load_error(tmp_path, constant='Constant("w", np.float32, ("g",), gen=3)')
    msg = load_error(tmp_path, constant='Constant("w", np.float32, ("g",), fill=0)')
    assert "Constant has no field 'fill'" in msg and "Fields: name, dtype, shape, gen" in msg


def test_reference_without_the_declaration_is_a_spec_error(tmp_path):
    """The reference kernel is checked like a student's: a Constant it does not declare is a spec error."""
    msg = load_error(tmp_path, constant='Constant("taps", np.float32, ("g",))')
    assert "field 'params'" in msg and "conv_const.cu" in msg and "__constant__ float taps[1024]" in msg


# -- the signature and the declaration ---------------------------------------------------------------

def test_old_pointer_signature_is_told_w_is_not_a_parameter():
    old = SOLUTION.replace("const float* __restrict__ x, float* __restrict__ y",
                           "const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y")
    msg = compare_signature(CONV, old)
    assert "takes 5 parameter(s)" in msg and "expects 4" in msg
    assert "w is not a parameter" in msg and "`__constant__ float w[1024]`" in msg


def test_missing_declaration_gets_a_teacherly_reason():
    src = SOLUTION.replace(DECL, "__device__ float taps[MAX_TAPS];").replace("w[j]", "taps[j]")
    msg = compare_signature(CONV, src)
    assert msg.startswith("the exercise reads w from `__constant__ float w[1024]`")
    assert "declare it at file scope" in msg.lower() and "before every launch" in msg
    assert "not a kernel parameter" in msg


def test_commented_out_declaration_does_not_count():
    src = SOLUTION.replace(DECL, "// " + DECL + "\n/* __constant__ float w[1024]; */")
    assert "declares no such array" in check_constants(CONV, src)


def test_declaration_of_the_wrong_type():
    msg = check_constants(CONV, SOLUTION.replace(DECL, "__constant__ double w[MAX_TAPS];"))
    assert "`__constant__ double w[...]`" in msg and "float32" in msg and "__constant__ float w[1024]" in msg


@pytest.mark.parametrize("decl", ["__constant__ float w[1024];", "__constant__ float w[MAX_TAPS];",
                                  "__device__ __constant__ float w[2048];", "__constant__ const float w[32 * 32];",
                                  "static __constant__ float w[MAX_TAPS * 2];", "__constant__ float w[0x400u];",
                                  "__constant__ float w[NOT_A_LITERAL];"])  # unresolvable: not checked
def test_big_enough_declarations_pass(decl):
    assert check_constants(CONV, SOLUTION.replace(DECL, decl)) == ""


@pytest.mark.parametrize("decl, cap", [("__constant__ float w[512];", 512), ("__constant__ float w[MAX_TAPS / 2];",
                                                                              None),
                                       ("__constant__ float w[100 * 10];", 1000)])
def test_capacity_smaller_than_the_largest_size(decl, cap):
    msg = check_constants(CONV, SOLUTION.replace(DECL, decl))
    if cap is None:  # a division is not resolved simply: no capacity check
        assert msg == ""
    else:
        assert f"holds {cap} elements" in msg and "up to 1024" in msg and "__constant__ float w[1024]" in msg


def test_capacity_through_a_define():
    src = SOLUTION.replace("#define MAX_TAPS 1024", "#define MAX_TAPS 256")
    assert "holds 256 elements" in check_constants(CONV, src)


# -- a whole grading through the fake harness ----------------------------------------------------------

def test_fake_grading_with_a_constant_param(fake_harness):
    """The parent checks the declaration before any child runs; a declared w grades normally."""
    r = grade_source(CH, EX, SOLUTION + "\n// FAKE:\n")
    assert r.status == Status.PASSED and r.points == CONV.max_points, r.feedback()
    missing = SOLUTION.replace(DECL, "").replace("w[j]", "1.0f")
    r = grade_source(CH, EX, missing + "\n// FAKE:\n")
    assert r.status == Status.COMPILE_ERROR and r.points == 0
    assert "__constant__ float w[1024]" in r.reason and "file scope" in r.reason
