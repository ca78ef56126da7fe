"""autograder.sample_inputs: the inputs notebooks' self-checks and benchmark rows use are the grader's own draw."""
import numpy as np

from autograder import get_exercise, sample_inputs
from autograder.buffers import make_inputs


def test_sample_inputs_are_the_graders_draw_in_signature_order():
    ex = get_exercise("09_convolution", "damped_waves")
    v = sample_inputs(ex, {"n": 1009}, seed=5)
    assert list(v) == [p.name for p in ex.params if p.name in v] == ["x", "d", "w", "c", "n"]
    arrays, scalars = make_inputs(ex, {"n": 1009}, np.random.default_rng(5))
    assert all(np.array_equal(v[k], arrays[k]) for k in arrays) and v["n"] == scalars["n"] == 1009
    assert v["x"].shape == (1009,) and v["x"].dtype == np.float32
    again, other = sample_inputs(ex, {"n": 1009}, seed=5), sample_inputs(ex, {"n": 1009}, seed=6)
    assert all(np.array_equal(v[k], again[k]) for k in arrays)
    assert not np.array_equal(v["x"], other["x"])


def test_outputs_are_left_out():
    ex = get_exercise("01_first_kernel", "saxpy")
    v = sample_inputs(ex, {"n": 33})
    outs = {p.name for p in ex.params if type(p).__name__ == "Out"}
    assert not outs & set(v) and {"x", "n"} <= set(v)
