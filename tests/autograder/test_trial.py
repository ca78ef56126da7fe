"""autograder.trial: a size case bound for a notebook's self-check (GPU tier): the arguments in the kernel's order,
outputs poisoned, and a check with the spec's tolerance that passes the reference and names what a wrong kernel
got wrong."""
import pytest

import autograder

pytestmark = pytest.mark.gpu


def test_the_reference_passes_and_a_wrong_kernel_is_named():
    import course
    ex = autograder.get_exercise("01_first_kernel", "saxpy")
    src = course.solution_source("01_first_kernel", "saxpy.cu")
    k = course.compile(src).kernel("saxpy")
    t = autograder.trial(ex, {"n": 1000}, seed=3)
    assert [type(a).__name__ for a in t.args][:2] == ["int32", "float32"] and set(t.outputs) == {"y"}
    k(t.grid, t.block, *t.args)
    assert all(t.results().values()) and t.check().startswith("n=1000: "), t.check()
    wrong = course.compile(src.replace("a * x[i] + y[i]", "a * x[i]")).kernel("saxpy")
    t = autograder.trial("01_first_kernel", "saxpy", {"n": 1000}, seed=3)
    wrong(t.grid, t.block, *t.args)
    r = t.results()["y"]
    assert not r and r.n_bad > 0 and "yours" in t.check(), t.check()
