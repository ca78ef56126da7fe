"""One size case of an exercise, bound for a notebook's self-check: the grader's draws, the kernel's arguments in
order, its launch, and a check of its outputs against the spec's reference with the spec's tolerance.

For exercise notebooks (the check cell under a kernel cell), so each does not write the binding by hand; it runs in
the student's own process, on the student's GPU, and is not grading (`autograder.preview` is): the seed is the
notebook's, never a grading's.

    t = autograder.trial("15_triton", "softmax", {"rows": 37, "cols": 31}, seed=68, launch=cfg)
    course.triton.launch(softmax, t.grid, *t.args, num_warps=cfg["num_warps"])
    print(t.check())
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .buffers import fill_output, numpy_reference, sample_inputs
from .spec import In, InOut, Out, Scalar, Tolerance, shape_of

__all__ = ["Trial", "trial"]


@dataclasses.dataclass
class Trial:
    """A size case bound to device arrays. ``args`` are the kernel's arguments in the C signature's order (CuPy
    arrays, a Triton BF16 input wrapped as Triton needs it, typed scalars); ``outputs`` the output arrays among them,
    poisoned (NaN, or 0xFF bytes) unless the spec gives a fill; ``expected`` the spec's NumPy reference."""

    exercise: object
    sizes: dict
    values: dict
    expected: dict
    args: list
    outputs: dict
    grid: object
    block: object
    shared_mem: int

    def results(self) -> dict:
        """output name -> `course.CheckResult` against the reference, with the spec's tolerance (truthy when right)."""
        import course
        return {name: course.check(self.outputs[name].get(), want, name=name, **_tolerance(self.exercise, want.dtype))
                for name, want in self.expected.items()}

    def check(self) -> str:
        """One line per output, to print: the size case and `course.check`'s verdict."""
        label = self.exercise.size_label(self.sizes)
        return "\n".join(f"{label}: {r}" for r in self.results().values())


def _tolerance(ex, dtype) -> dict:
    tol = ex.tolerance
    if tol == "exact" or np.dtype(dtype).kind in "iub":
        return {"rtol": 0.0, "atol": 0.0}
    if isinstance(tol, Tolerance):
        return {"rtol": tol.rtol, "atol": tol.atol}
    return {}


def trial(exercise, name_or_sizes=None, sizes: dict | None = None, *, seed: int = 0, launch: dict | None = None) -> Trial:
    """Bind one size case of an exercise: ``trial(ex, sizes, ...)`` or ``trial("NN_topic", "name", sizes, ...)``.

    ``launch`` is the LAUNCH data of the student's cell (`launch_from_source` / `launch_from_python`), merged over
    the spec's defaults as the grader merges it; ``seed`` picks the draws (any int: this is not a grading).
    """
    import cupy
    if isinstance(exercise, str):
        from .loader import get_exercise
        exercise = get_exercise(exercise, name_or_sizes)
    else:
        sizes = name_or_sizes
    ex = exercise
    values = sample_inputs(ex, sizes, seed=seed)
    host = {p.name: values[p.name] for p in ex.params if not isinstance(p, Scalar) and p.name in values}  # inputs
    scalars = {p.name: values[p.name] for p in ex.params if isinstance(p, Scalar)}
    expected = numpy_reference(ex, sizes, host, scalars) if callable(ex.reference) else {}
    cfg = {**ex.launch_defaults, **(launch or {})}
    grid, block, shared_mem = ex.launch(dict(sizes), cfg)
    args, outputs = [], {}
    bf16 = getattr(ex, "triton_types", {}) or {}
    for p in ex.kernel_params:
        if isinstance(p, Scalar):
            args.append(scalars[p.name])
            continue
        if isinstance(p, Out):
            a = cupy.empty(shape_of(p.shape, sizes), dtype=p.np_dtype)
            fill_output(a, p)
        else:
            a = cupy.asarray(host[p.name])
        if isinstance(p, (Out, InOut)):
            outputs[p.name] = a
        if isinstance(p, In) and bf16.get(p.name) == "bf16":
            import course
            a = course.triton.BF16(a)
        args.append(a)
    return Trial(ex, dict(sizes), values, expected, args, outputs, grid, block, int(shared_mem))
