"""The grader's Triton path, piece by piece (CPU tier): what a Triton cell may hold, the signature check, the
variants compiled, the compile child's confinement, and the checks that keep the untrusted child's output data.
The whole path, children included, is graded on the corpus by test_triton_corpus.py."""
import base64
import multiprocessing
import socket
import textwrap

import pytest

from autograder import get_exercise
from autograder.triton_build import all_keys, program_problem, reference_task, specializations
from autograder.triton_source import (check_source, compare_params, kernel_parameters, launch_from_python,
                                      spec_problem)

GOOD = textwrap.dedent('''
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice
    import math

    LAUNCH = {"BLOCK": 1024, "num_warps": 4}
    SCALE: tl.constexpr = 2


    @triton.jit
    def twice(x):
        return x * SCALE


    @triton.jit
    def softmax(x_ptr, y_ptr, rows, cols, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < cols, other=0.0)
        for i in range(2):
            x = twice(x) * math.pi
        tl.store(y_ptr + offs, x, mask=offs < min(cols, BLOCK))
''')


@pytest.mark.parametrize("snippet, why", [
    ("import subprocess", "import subprocess"),
    ("from os import system", "from os import"),
    ("from . import x", "from . import"),
    ("from math import *", "import *"),
    ("import triton.runtime", "import triton.runtime"),
    ("x = [i for i in range(3)]", "only literal constants"),
    ("x = len('abc')", "only literal constants"),
    ("class K:\n    pass", "ClassDef statement"),
    ("if True:\n    pass", "If statement"),
    ("def plain(x):\n    return x", "exactly @triton.jit"),
])
def test_module_level_python_is_refused(snippet, why):
    problem = check_source(GOOD + "\n" + snippet + "\n")
    assert why in problem, problem


@pytest.mark.parametrize("line, why", [
    ("y = (lambda v: v)(x)", "Lambda"),
    ("y = [v for v in range(2)]", "ListComp"),
    ("global SCALE", "Global"),
    ("y = __import__('os')", "starting with '_'"),
    ("y = x.__class__", "starting with '_'"),
    ("y = eval('1')", "uses 'eval'"),
    ("y = getattr(x, 'dtype')", "uses 'getattr'"),
    ("y = twice.fn", "may only be called"),
    ("f = twice", "may only be called"),
    ("m = math", "may only be used as"),
    ("y = tl.load(x_ptr, **{'mask': None})", "`**` arguments"),
])
def test_kernel_bodies_name_only_the_language(line, why):
    src = GOOD.replace("    offs = tl.arange(0, BLOCK)\n", f"    offs = tl.arange(0, BLOCK)\n    {line}\n")
    problem = check_source(src)
    assert why in problem, problem


def test_a_kernel_in_the_language_passes_and_its_parts_are_read():
    assert check_source(GOOD) == ""
    assert kernel_parameters(GOOD, "softmax") == [("x_ptr", False, False), ("y_ptr", False, False),
                                                  ("rows", False, False), ("cols", False, False),
                                                  ("BLOCK", True, False)]
    assert launch_from_python(GOOD) == {"BLOCK": 1024, "num_warps": 4}


def test_attribute_chains_are_resolved_on_the_real_modules():
    pytest.importorskip("triton")
    from autograder.triton_source import resolve_problem
    assert resolve_problem(GOOD) == ""
    for chain, why in (("tl.core.builtins.exec", "'builtins'"), ("triton.knobs.cache.dir", "'knobs'"),
                       ("tl.no_such_thing", "does not exist"), ("triton.compiler.compile", "'compiler'")):
        src = GOOD.replace("    offs = tl.arange(0, BLOCK)\n", f"    offs = tl.arange(0, BLOCK)\n    y = {chain}\n")
        assert why in resolve_problem(src), chain


def test_the_signature_check_names_what_the_exercise_expects():
    ex = get_exercise("15_triton", "softmax")
    assert compare_params(ex, GOOD) == ""
    short = GOOD.replace("def softmax(x_ptr, y_ptr, rows, cols, BLOCK", "def softmax(x_ptr, y_ptr, cols, BLOCK")
    assert "should take 4 runtime parameters (x, y, rows, cols)" in compare_params(ex, short)
    odd = GOOD.replace("BLOCK: tl.constexpr)", "BLOCK: tl.constexpr, WIDTH: tl.constexpr)")
    assert "constexpr 'WIDTH' has no value" in compare_params(ex, odd)
    assert "no @triton.jit function named 'softmax'" in compare_params(ex, GOOD.replace("def softmax", "def sm"))


def test_variants_cover_the_cases_and_the_generic_one_comes_first():
    mm = get_exercise("15_triton", "matmul")
    keys = specializations(mm, mm.sizes, 50 << 20)
    assert keys[0] == "000" and "111" in keys            # 4096^3, the speed size: all divisible by 16
    assert "100" not in keys or any(c.get("m", 0) % 16 == 0 for c in mm.sizes)
    assert len(all_keys(mm)) == 8 and all_keys(mm)[0] == "000"
    sm = get_exercise("15_triton", "softmax")
    assert specializations(sm, [{"rows": 1, "cols": 1}], 50 << 20)[0] == "00"


def test_spec_fields_of_a_triton_exercise_are_checked():
    import dataclasses
    ex = get_exercise("15_triton", "softmax")
    assert spec_problem(ex) == ("", "")
    assert "a .py file" in spec_problem(dataclasses.replace(ex, source_file="softmax.cu"))[1]
    assert "num_warps" in spec_problem(dataclasses.replace(ex, launch_defaults={"BLOCK": 1024}))[1]
    assert spec_problem(dataclasses.replace(ex, triton_types={"nope": "bf16"}))[0] == "triton_types"
    assert "should be 'cuda' or 'triton'" in spec_problem(dataclasses.replace(ex, language="rust"))[1]


def _program(**changes):
    variant = {"cubin": base64.b64encode(b"\x7fELF" + bytes(64)).decode(), "shared": 0, "num_warps": 4,
               "num_stages": 3, "params": 6, "name": "softmax", "scratch": [0, 1], "profile_scratch": 0,
               "cluster": [1, 1, 1], "arch": "sm_90", "ptx": ""}
    variant.update(changes)
    return {"kind": "triton", "arch": "sm_90", "kernel": "softmax", "variants": {"00": variant}}


@pytest.mark.parametrize("changes, why", [
    ({"name": "other"}, "uses what the grader does not launch"),
    ({"num_warps": 64}, "uses what the grader does not launch"),
    ({"cluster": [2, 1, 1]}, "uses what the grader does not launch"),
    ({"profile_scratch": 1024}, "uses what the grader does not launch"),
    ({"params": 99}, "uses what the grader does not launch"),
    ({"cubin": "not base64!"}, "malformed"),
    ({"shared": "lots"}, "malformed"),
    ({"scratch": [0, 0]}, "uses what the grader does not launch"),
    ({"arch": None}, "uses what the grader does not launch"),
])
def test_what_the_student_child_sends_is_checked_as_data(changes, why):
    ex = get_exercise("15_triton", "softmax")
    assert program_problem(ex, _program()) == ""
    assert why in program_problem(ex, _program(**changes))
    assert "no Triton program" in program_problem(ex, {"kind": "cuda"})
    # the grader's child refuses it before reading any machine code
    out = reference_task({"student": _program(**changes), "arch": "sm_90"}, ex)
    assert out["status"] == "compile error" and why in out["message"]


def test_the_untrusted_child_writes_its_own_folder_only_and_has_no_network(monkeypatch, tmp_path):
    from autograder import sandbox, worker
    seen = {}
    monkeypatch.setattr(sandbox, "limit", lambda **kw: None)
    monkeypatch.setattr(sandbox, "confine", lambda **kw: seen.update(kw) or "")
    task = {"private_dir": str(tmp_path / "own"), "kernel_cache": str(tmp_path / "cupy")}
    worker._confine(dict(task, untrusted_python=True), compile_phase=True)
    assert seen["write"] == [task["private_dir"]] and seen["network"] is False and seen["devices"] is False
    worker._confine(task, compile_phase=True)
    assert task["kernel_cache"] in seen["write"] and seen["network"] is True


def _connect_confined(port, queue):
    from autograder import sandbox
    sandbox.confine(read=sandbox.python_read_paths(), write=[], devices=False, network=False, allow_threads=True)
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        queue.put("connected")
    except OSError as exc:
        queue.put(f"refused: {exc}")


def test_network_false_refuses_tcp_connections():
    from autograder import sandbox
    if sandbox.landlock_abi() < 4:
        pytest.skip("Landlock below ABI 4 does not restrict the network")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        proc = ctx.Process(target=_connect_confined, args=(server.getsockname()[1], queue))
        proc.start()
        proc.join(60)
        assert queue.get(timeout=5).startswith("refused")
        socket.create_connection(server.getsockname(), timeout=5).close()   # unconfined, the port is open
    finally:
        server.close()


def test_a_triton_cell_is_found_by_its_magic_name():
    from autograder.extract import body_first_line, cuda_cell_name, extract_cells
    cell = "%%triton --name softmax\n" + GOOD
    assert cuda_cell_name(cell) == "softmax" and body_first_line(cell) == 2
    kernels, _, _ = extract_cells([("code", cell, [])])
    assert kernels["softmax"] == GOOD


def test_release_stub_of_a_triton_cell_is_python():
    nbformat = pytest.importorskip("nbformat")
    from autograder.nbgrader_plugin import ClearSolutions
    cs = ClearSolutions(code_stub={"python": "// YOUR CODE HERE"})
    tri = nbformat.v4.new_code_cell("%%triton --name k\n@triton.jit\ndef k(x):\n    ### BEGIN SOLUTION\n    y = 1\n"
                                    "    ### END SOLUTION\n")
    cu = nbformat.v4.new_code_cell("%%cuda --name k\n__global__ void k() {\n    // ### BEGIN SOLUTION\n    x;\n"
                                   "    // ### END SOLUTION\n}\n")
    assert cs._replace_solution_region(tri, "python") and cs._replace_solution_region(cu, "python")
    assert "    # YOUR CODE HERE\n    pass" in tri.source and "// YOUR CODE HERE" in cu.source


def test_a_child_cannot_extend_its_own_deadline():
    """The parent bounds what a begin or arm message asks for (a child that ran student Python could ask for a
    day, or send a string): capped at the task's max_step_s, and a non-number ends the child."""
    from autograder.supervise import _timeout
    assert _timeout({"timeout": 1e9}, 180.0) == 180.0
    assert _timeout({"timeout": 5}, 180.0) == 5.0
    assert _timeout({"timeout": -3}, 180.0) == 0.0
    assert _timeout({"timeout": "soon"}, 180.0) is None
    assert _timeout({"timeout": float("nan")}, 180.0) is None
    assert _timeout({}, None) is None
    assert _timeout({"timeout": 1e4}, None) == 1e4       # the grader's own children keep their deadlines
