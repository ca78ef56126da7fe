"""`python -m autograder check-specs`: what a spec can get wrong that only grading day would show, found on a CPU.

Loading a spec validates its fields one by one (autograder/loader.py). This module checks the spec against
what it describes, for every exercise of a chapter:

- the params against the reference kernel's signature: an `In` is a ``const`` pointer, an `Out` or `InOut`
  a writable one, and the names stand in the kernel's order (two swapped float arrays pass the type check);
- the NumPy reference, run on inputs drawn by the spec's own generators at its smallest public sizes: the
  keys, shapes and dtypes it returns are the outputs the grader reads;
- the reference kernel, compiled with NVRTC for sm_80 (or the newer arch it needs, or exactly its ``arch``), as
  every grading does;
- the exercise notebook, against the spec and the reference solutions (autograder/sync.py).
"""
from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping

import numpy as np

from . import loader
from .spec import CallExercise, In, InOut, L2Multiple, Out, Scalar, SpecError, did_you_mean, shape_of
from .sync import Problem, live_exercises, notebook_problems, solution_file

__all__ = ["Problem", "COMPILE_ARCH", "check_chapter", "signature_problems", "reference_problems",
           "compile_problems"]

COMPILE_ARCH = "sm_80"  # the oldest GPU the course grades on; a reference that needs more says so on line 1
_REFERENCE_BYTES = 16 << 20
_LOG_CHARS = 3000


def _shown(path) -> str:
    try:
        return path.relative_to(loader.ROOT).as_posix()
    except ValueError:
        return str(path)


def check_chapter(chapter: str, *, compile: bool = True) -> list:
    """Every problem of ``chapter``'s spec, reference solutions and exercise notebook; [] when all is well.

    A misspelt chapter raises `SpecError` (a usage error); a spec that does not load is one problem.
    ``compile=False`` skips NVRTC (for a machine without it).
    """
    spec_file = loader.SPECS_DIR / f"{chapter}.py"
    try:
        exercises = live_exercises(chapter)
    except SpecError as exc:
        if not spec_file.is_file() and chapter not in loader.chapters():
            raise
        text = str(exc)
        for prefix in (_shown(spec_file), spec_file.name):  # the loader's message names the file already
            if text.startswith(prefix):
                text = text[len(prefix):].lstrip(":, ")
        return [Problem(_shown(spec_file), f"does not load: {text}", kind="load", chapter=chapter)]
    problems = []
    if spec_file.is_file() and _frozen(chapter):
        try:  # grading reads the frozen snapshot, which must load as well
            loader.load_chapter(chapter)
        except SpecError as exc:
            problems.append(Problem(_shown(spec_file), f"the frozen snapshot graded instead of this file does not "
                                    f"load: {exc}", kind="load", chapter=chapter))
    for ex in exercises:
        if isinstance(ex, CallExercise):
            continue  # its reference call went through the checker when the spec loaded
        source = solution_file(ex).read_text(encoding="utf-8")
        problems += signature_problems(ex, source)
        problems += reference_problems(ex)
        if compile:
            problems += compile_problems(ex, source)
    return problems + notebook_problems(chapter, exercises)


def _frozen(chapter: str) -> bool:
    from .speclock import locked
    return locked(chapter) is not None


def _problem(ex, message: str, kind: str, where=None) -> Problem:
    return Problem(where or _shown(loader.SPECS_DIR / f"{ex.chapter}.py"), message, ex.name, kind,
                   chapter=ex.chapter)


# -- the params against the reference kernel's signature ------------------------------------------------------

def _read_only(decl: str) -> bool:
    """Whether a pointer parameter's pointee is const: ``const float* x`` and ``float const* x`` are,
    ``float* const x`` is not."""
    head = decl.split("*", 1)[0] if "*" in decl else decl
    return re.search(r"\bconst\b", head) is not None


def signature_problems(ex, source: str) -> list:
    """In/Out roles and parameter order against the reference kernel (the loader already compared the
    count, the pointers and the dtypes)."""
    from course.source import parse_kernels
    params = parse_kernels(source).get(ex.kernel)
    mine = ex.kernel_params
    if params is None or len(params) != len(mine):
        return []
    where = _shown(solution_file(ex))
    theirs_list = ", ".join(p.describe() for p in params)
    out = []
    for i, (p, theirs) in enumerate(zip(mine, params), start=1):
        if isinstance(p, Scalar) or not theirs.pointer:
            continue
        role = type(p).__name__
        if isinstance(p, In) and not _read_only(theirs.decl):
            out.append(_problem(ex, f"params: parameter {i} of {ex.kernel} in {where} is `{theirs.decl}`, a writable "
                                f"pointer, but the spec declares it In({p.name!r}), an input the grader checks comes "
                                f"back unchanged. If the kernel writes it, declare InOut (read and written) or Out "
                                f"(written only); if not, make the reference take `const {theirs.ctype}*`",
                                "signature"))
        elif isinstance(p, (Out, InOut)) and _read_only(theirs.decl):
            out.append(_problem(ex, f"params: parameter {i} of {ex.kernel} in {where} is `{theirs.decl}`, read-only, "
                                f"but the spec declares it {role}({p.name!r}), an output the grader reads back: the "
                                f"kernel cannot write it. Are two params swapped? The spec's order gives "
                                f"({ex.signature()}); the kernel takes ({theirs_list})", "signature"))
    spec_names = [p.name.lower() for p in mine]
    ref_names = [p.name.lower() for p in params]
    moved = [(i, ref_names.index(n)) for i, n in enumerate(spec_names) if n != ref_names[i] and n in ref_names]
    if moved:
        i, j = moved[0]
        out.append(_problem(ex, f"params: the spec lists {mine[i].name!r} as parameter {i + 1}, but in {where} it is "
                            f"parameter {j + 1} of {ex.kernel}. Params must be in the kernel's C order: the spec "
                            f"gives ({ex.signature()}); the kernel takes ({theirs_list})", "signature"))
    return out


# -- the NumPy reference ----------------------------------------------------------------------------------------

def _small_cases(ex) -> list:
    """The smallest public case, and the smallest one with every size above 1 (where a transpose shows)."""
    literal = [c for c in ex.sizes if not any(isinstance(v, L2Multiple) for v in c.values())]
    cases = sorted(({k: int(v) for k, v in c.items()} for c in literal), key=ex.array_bytes)
    full = [c for c in cases[1:] if all(v > 1 for v in c.values()) and ex.array_bytes(c) <= _REFERENCE_BYTES]
    return cases[:1] + full[:1]


def reference_problems(ex) -> list:
    """Run the NumPy reference where the grader would, on a CPU: its smallest public sizes, inputs drawn by
    the spec's generators, and compare what it returns with the outputs the grader reads."""
    if not callable(ex.reference):
        return []
    from .buffers import make_inputs
    for sizes in _small_cases(ex):
        at = f"reference: at sizes {ex.size_label(sizes)}"
        try:
            host, scalars = make_inputs(ex, sizes, np.random.default_rng(0))
        except Exception as exc:
            return [_problem(ex, f"{at}, drawing the inputs with the params' generators raised "
                             f"{type(exc).__name__}: {exc}", "reference")]
        try:
            with np.errstate(all="ignore"):  # what comes out is checked below; warnings would only be noise
                got = ex.reference({**sizes, **scalars, **{k: v.copy() for k, v in host.items()}})
        except Exception as exc:
            return [_problem(ex, f"{at}, the NumPy reference raised {type(exc).__name__}: {exc}. It gets the sizes, "
                             "the scalars (typed NumPy scalars) and the input arrays by name", "reference")]
        found = [_problem(ex, f"{at}, the NumPy reference {msg}", "reference")
                 for msg in _output_problems(ex, got, sizes)]
        if found:
            return found
    return []


def _squeezed(shape) -> tuple:
    return tuple(d for d in shape if d != 1)


def _output_problems(ex, got, sizes) -> list:
    outs = [p for p in ex.arrays if isinstance(p, (Out, InOut))]
    names = [p.name for p in outs]
    if not isinstance(got, Mapping):
        return [f"returned a {type(got).__name__}; it should return a dict {{output name: array}} with the keys "
                f"{names} (the Out and InOut params)"]
    problems = []
    missing = [n for n in names if n not in got]
    extra = [str(k) for k in got if k not in names]
    if missing or extra:
        msg = f"returned the keys {sorted(map(str, got))}; the grader reads {names} (the Out and InOut params)"
        if missing:
            msg += f": no {', '.join(map(repr, missing))}.{did_you_mean(missing[0], extra)}"
        if extra:
            msg += f" {', '.join(map(repr, extra))} is not an output, so nothing would check it"
        problems.append(msg)
    for p in outs:
        if p.name not in got:
            continue
        arr, want, dt = np.asarray(got[p.name]), shape_of(p.shape, sizes), p.np_dtype
        label = f"{p.name!r} ({type(p).__name__} {dt.name}, shape {want})"
        if arr.dtype.kind not in "biuf":
            problems.append(f"returned {arr.dtype} values for {label}")
        elif arr.size != math.prod(want):
            problems.append(f"returned {arr.size} values (shape {arr.shape}) for {label}, which has {math.prod(want)}")
        elif arr.ndim > 1 and _squeezed(arr.shape) != _squeezed(want):
            problems.append(f"returned shape {arr.shape} for {label}: the same number of values in another layout "
                            "(transposed?), which the grader would read as if it were shape "
                            f"{want}. Return the output in its declared shape")
        elif dt.kind in "biu" and arr.dtype.kind == "f":
            problems.append(f"returned {arr.dtype} for {label}: the grader converts with astype, which truncates "
                            f"(2.9 becomes 2). Round, or compute in integers, and return {dt.name}")
        elif dt.kind in "iu" and arr.size and arr.dtype.kind in "iu" and (
                int(arr.min()) < np.iinfo(dt).min or int(arr.max()) > np.iinfo(dt).max):
            problems.append(f"returned values from {int(arr.min())} to {int(arr.max())} for {label}, outside "
                            f"{dt.name}'s range: they would wrap around when converted")
        elif dt.kind == "f" and not np.isfinite(arr).all():
            bad = np.flatnonzero(~np.isfinite(arr.ravel()))
            problems.append(f"returned {bad.size} NaN or infinite value(s) for {label} (first at flat index "
                            f"{int(bad[0])}) from finite inputs, so no kernel could match it")
    return problems


# -- the reference kernel compiles ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def _nvrtc_missing() -> str:
    """'' when NVRTC compiles; else why not (asked once per process)."""
    import course
    try:
        course.compile_for_arch('extern "C" __global__ void probe() {}', COMPILE_ARCH, use_cache=False)
    except course.CompileError as exc:
        if "could not be loaded" in str(exc):
            return str(exc)
    return ""


def _arch_for(ex, source: str) -> str:
    import course
    if getattr(ex, "arch", None):   # an arch-specific target: the one arch both kernels compile for
        return ex.arch
    declared = course.declared_arch(source)
    choices = [a for a in (declared, f"sm_{ex.min_cc[0]}{ex.min_cc[1]}", COMPILE_ARCH) if a]
    return max(choices, key=lambda a: (course.arch_cc(a), a == declared))


def triton_problems(ex, source: str) -> list:
    """A Triton reference: the language a submission may use, and Triton compiling it for sm_80 and sm_90 as a
    grading would (no GPU needed; skipped where Triton is not installed, an optional extra)."""
    from .launchcfg import merge_launch
    from .triton_build import all_keys, compile_program
    from .triton_source import launch_from_python, resolve_problem
    where = _shown(solution_file(ex))
    try:
        import triton  # noqa: F401
    except ImportError:
        return []
    problem = resolve_problem(source)
    if problem:
        return [_problem(ex, f"the reference is not a source the grader accepts: {problem}", "compile", where)]
    cfg = merge_launch(ex, launch_from_python(source))
    for arch in ("sm_80", "sm_90"):
        try:
            compile_program(source, ex, cfg, arch, all_keys(ex) or [""], "reference")
        except ValueError as exc:
            return [_problem(ex, f"the reference does not compile with Triton for {arch}: {str(exc)[:_LOG_CHARS]}",
                             "compile", where)]
    return []


def compile_problems(ex, source: str) -> list:
    """Compile the reference kernel with NVRTC as a grading would (no GPU needed)."""
    import course
    if getattr(ex, "language", "cuda") == "triton":
        return triton_problems(ex, source)
    where = _shown(solution_file(ex))
    missing = _nvrtc_missing()
    if missing:
        return [_problem(ex, f"the reference kernel was not compiled: {missing.splitlines()[0]} Install NVRTC, or "
                         "pass --no-compile to skip this check", "compile", where)]
    arch = _arch_for(ex, source)
    try:
        prog = course.compile_for_arch(source, arch, options=tuple(ex.options), name=ex.source_file, use_cache=False)
    except course.CompileError as exc:
        text = str(exc)
        if len(text) > _LOG_CHARS:
            text = text[:_LOG_CHARS] + "\n[...]"
        return [_problem(ex, f"the reference kernel does not compile with NVRTC for {arch}, and every grading compiles "
                         f"it beside the student's kernel. Fix {where}, then run `python -m autograder sync "
                         f"{ex.chapter}`.\n{text}", "compile", where)]
    if ex.kernel not in prog.kernel_names:
        return [_problem(ex, f"{where} compiles, but has no kernel named {ex.kernel!r} (kernels: "
                         f"{', '.join(prog.kernel_names) or 'none'}): is it extern \"C\" __global__?", "compile",
                         where)]
    return []
