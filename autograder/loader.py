"""Load `autograder/specs/NN_topic.py` and validate every exercise when it loads, not mid-grading.

Each error names the spec file, the exercise and the field, with a 'did you mean' for near misses.
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import re
import traceback
from pathlib import Path

import numpy as np

from .spec import check_launch_result, reference_source  # noqa: F401  (re-exported)
from .spec import (DATA_MAGICS, PARTIAL_STEP, PEAKS, CallExercise, Constant, Exercise, In, InOut, L2Multiple, Out,
                   Pipeline, Points, Scalar, SpecError, Tolerance, Uniform, _Array, did_you_mean, names_in, shape_of)
from .speclock import frozen_spec_file, locked_chapters, snapshot_solutions
from . import techniques, tensormaps
from .ring import spec_problem

__all__ = ["ROOT", "SPECS_DIR", "SOLUTIONS_DIR", "chapters", "load_chapter", "get_exercise", "validate",
           "reference_source", "load_spec_file"]

ROOT = Path(__file__).resolve().parent.parent
SPECS_DIR = Path(__file__).resolve().parent / "specs"
SOLUTIONS_DIR = ROOT / "solutions"  # live reference solutions, solutions/<chapter>/; a frozen spec has its own
# a value that any real L2 is below, to test launch functions on symbolic sizes at load time
_L2_FOR_VALIDATION = 64 << 20
_WARP = 32
_CONSTANT_BYTES = 64 << 10  # the __constant__ space of a module


def chapters() -> list:
    """Chapter stems that have a spec file, live or frozen (autograder/speclock.py)."""
    return sorted({p.stem for p in SPECS_DIR.glob("[0-9][0-9]_*.py")} | set(locked_chapters()))


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _shown(path: Path) -> Path:
    try:
        return Path(path).relative_to(ROOT)
    except ValueError:
        return path


class _Where:
    """Builds error messages that say where: file, exercise, field."""

    def __init__(self, path: Path, exercise: str = "?"):
        self.path, self.exercise = path, exercise

    def error(self, field: str, problem: str) -> SpecError:
        return SpecError(f"{_shown(self.path)}: exercise {self.exercise!r}, field {field!r}: {problem}")


def _unexpected_kwarg(exc: TypeError):
    m = re.search(r"(\w+)\.__init__\(\) got an unexpected keyword argument '(\w+)'", str(exc))
    if not m:
        return None
    classes = (Exercise, CallExercise, In, Out, InOut, Scalar, Constant, Points, Tolerance, Uniform, Pipeline)
    cls = {c.__name__: c for c in classes}.get(m.group(1))
    fields = [f.name for f in dataclasses.fields(cls)] if cls else []
    return m.group(1), m.group(2), fields


def load_spec_file(path: Path) -> list:
    """Execute one spec file and return its validated `EXERCISES`."""
    path = Path(path).resolve()
    chapter = path.stem
    where = _Where(path)
    modname = f"autograder_spec_{chapter}"
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except TypeError as exc:
        bad = _unexpected_kwarg(exc)
        line = _line_in(exc, path)
        if bad:
            cls, kw, fields = bad
            raise SpecError(f"{path.name}{line}: {cls} has no field {kw!r}.{did_you_mean(kw, fields)} "
                            f"Fields: {', '.join(fields)}") from None
        raise SpecError(f"{path.name}{line}: {exc}") from None
    except SpecError as exc:
        raise SpecError(f"{path.name}{_line_in(exc, path)}: {exc}") from None
    except Exception as exc:
        raise SpecError(f"{path.name}{_line_in(exc, path)}: the spec file failed to load: "
                        f"{type(exc).__name__}: {exc}") from None
    exercises = getattr(module, "EXERCISES", None)
    if exercises is None:
        names = [n for n in vars(module) if not n.startswith("_")]
        raise SpecError(f"{path.name}: defines no EXERCISES list.{did_you_mean('EXERCISES', names)}")
    if not isinstance(exercises, (list, tuple)) or not all(isinstance(e, (Exercise, CallExercise))
                                                           for e in exercises):
        raise SpecError(f"{path.name}: EXERCISES should be a list of autograder.Exercise (or CallExercise)")
    seen = set()
    for ex in exercises:
        where.exercise = ex.name
        if ex.name in seen:
            raise where.error("name", "two exercises have this name")
        seen.add(ex.name)
        validate(ex, path)
    return list(exercises)


def _line_in(exc: BaseException, path: Path) -> str:
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == path]
    if isinstance(exc, SyntaxError) and exc.lineno:
        lines.append(exc.lineno)
    return f", line {lines[-1]}" if lines else ""


@functools.lru_cache(maxsize=None)
def load_chapter(chapter: str) -> tuple:
    """The validated exercises of ``chapter`` (e.g. '01_first_kernel'), from its frozen snapshot when the
    chapter is frozen (`python -m autograder freeze`), else from its live spec. Raises `SpecError`."""
    path = frozen_spec_file(chapter) or SPECS_DIR / f"{chapter}.py"
    if not path.exists():
        raise SpecError(f"no spec for chapter {chapter!r} in {_shown(SPECS_DIR)}/."
                        f"{did_you_mean(chapter, chapters())} Chapters with specs: "
                        f"{', '.join(chapters()) or 'none'}")
    return tuple(load_spec_file(path))


def get_exercise(chapter: str, name: str) -> Exercise:
    exercises = load_chapter(chapter)
    for ex in exercises:
        if ex.name == name:
            return ex
    names = [e.name for e in exercises]
    raise SpecError(f"chapter {chapter!r} has no exercise {name!r}.{did_you_mean(name, names)} "
                    f"Its exercises: {', '.join(names)}")


def _literal_case(ex: Exercise, case: dict) -> dict:
    return ex.resolve_sizes(case, _L2_FOR_VALIDATION)


def validate(ex: Exercise, path: Path) -> None:
    """Raise `SpecError` for the first problem found in ``ex``."""
    where, chapter = _Where(Path(path), ex.name), Path(path).stem
    if not isinstance(ex.name, str) or not ex.name.isidentifier():
        raise where.error("name", f"should be an identifier; got {ex.name!r}")
    if not ex.chapter:
        ex.chapter = chapter
    elif ex.chapter != chapter:
        raise where.error("chapter", f"is {ex.chapter!r} but the spec file is for {chapter!r}")
    # read by spec.reference_source: a frozen snapshot's references are its own copies, not solutions/
    ex.solutions_dir = snapshot_solutions(path) or SOLUTIONS_DIR / chapter
    if isinstance(ex, CallExercise):
        _validate_call(ex, where)
        _validate_hidden(ex, where)
        _validate_partial(ex, where)
        return
    if not isinstance(ex.kernel, str) or not re.fullmatch(r"[A-Za-z_]\w*", ex.kernel):
        raise where.error("kernel", f"should be the C name of the kernel; got {ex.kernel!r}")

    field, problem = spec_problem(ex)  # the language, Triton's fields (triton_source.py), a ring's (ring.py)
    if problem:
        raise where.error(field, problem)
    _validate_params(ex, where)
    _validate_sizes(ex, where)
    _validate_constants(ex, where)
    _validate_source(ex, where)
    _validate_launch(ex, where)
    _validate_scoring(ex, where)
    _validate_pipeline(ex, where)
    _validate_hidden(ex, where)
    _validate_partial(ex, where)


def _validate_params(ex, where):
    if not isinstance(ex.params, (list, tuple)) or not ex.params:
        raise where.error("params", "should be a non-empty list of In/Out/InOut/Scalar in C order (and "
                          "Constant symbols anywhere)")
    names = []
    for p in ex.params:
        if not isinstance(p, (In, Out, InOut, Scalar, Constant)):
            raise where.error("params", f"{p!r} is not an In, Out, InOut, Scalar or Constant")
        if p.name in names:
            raise where.error("params", f"two parameters are named {p.name!r}")
        names.append(p.name)
        if isinstance(p, _Array):
            try:
                np.dtype(p.dtype)
            except TypeError:
                raise where.error("params", f"{p.name}: {p.dtype!r} is not a NumPy dtype"
                                  + did_you_mean(str(p.dtype), list(np.sctypeDict))) from None
            try:
                names_in(p.shape)
            except SpecError as exc:
                raise where.error("params", f"{p.name}: shape {exc}") from None
            gen = getattr(p, "gen", None)
            if gen is not None and not (isinstance(gen, Uniform) or callable(gen)):
                raise where.error("params", f"{p.name}: gen should be a Uniform or a callable")
            if isinstance(p, Out) and not (p.fill == "poison" or isinstance(p.fill, (int, float))):
                raise where.error("params", f"{p.name}: fill should be 'poison' or a number; got {p.fill!r}")
        else:
            from course.source import CTYPES
            if p.ctype not in CTYPES:
                raise where.error("params", f"{p.name}: unknown C type {p.ctype!r}."
                                  + did_you_mean(p.ctype, list(CTYPES)))
            if isinstance(p.value, str):
                try:
                    names_in(p.value)
                except SpecError as exc:
                    raise where.error("params", f"{p.name}: value {exc}") from None
            elif not isinstance(p.value, (int, float, Uniform)) and not callable(p.value):
                raise where.error("params", f"{p.name}: value should be a size expression, a number, "
                                  f"a Uniform or a callable; got {p.value!r}")
    if not any(isinstance(p, (Out, InOut)) for p in ex.params):
        raise where.error("params", "has no Out or InOut array, so there is nothing to check")
    for c in ex.constants:
        if not re.fullmatch(r"[A-Za-z_]\w*", str(c.name)):
            raise where.error("params", f"Constant {c.name!r}: the name of a __constant__ symbol should be a C "
                              "identifier")


def _validate_sizes(ex, where):
    if not isinstance(ex.sizes, (list, tuple)) or not ex.sizes:
        raise where.error("sizes", "should be a non-empty list of dicts of size variables")
    used = set()
    for p in ex.params:
        used |= names_in(p.shape) if isinstance(p, _Array) else (
            names_in(p.value) if isinstance(p.value, str) else set())
    for case in ex.sizes:
        if not isinstance(case, dict):
            raise where.error("sizes", f"each case should be a dict like {{'n': 33}}; got {case!r}")
        for k in sorted(used - set(case)):
            odd = [x for x in case if x not in used]
            raise where.error("sizes", f"case {case!r} lacks {k!r}, which the params use."
                              + did_you_mean(k, odd))
        for k in set(case) - used:
            raise where.error("sizes", f"case {case!r}: no parameter uses {k!r}." + did_you_mean(k, used))
        for k, v in case.items():
            if isinstance(v, L2Multiple):
                continue
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise where.error("sizes", f"case {case!r}: {k} should be a positive int or LARGER_THAN_L2")
        if sum(isinstance(v, L2Multiple) for v in case.values()) > 1:
            raise where.error("sizes", f"case {case!r}: only one variable per case can be LARGER_THAN_L2")
    literal = [c for c in ex.sizes if not any(isinstance(v, L2Multiple) for v in c.values())]
    # a contract like "k a multiple of 16" (size_multiples) moves the edge cases to multiples of that unit
    unit = {k: int(ex.size_multiples.get(k, 1) or 1) for k in ex.size_names}
    for c in literal:
        for k, v in c.items():
            if v % unit.get(k, 1):
                raise where.error("sizes", f"case {c!r}: {k} = {v} is not a multiple of {unit[k]} (size_multiples)")
    missing = []
    if not any(all(v == unit.get(k, 1) for k, v in c.items()) for c in literal):
        missing.append("a case where every size is 1" + (" (or its size_multiples unit)" if ex.size_multiples else ""))
    if not any(_is_prime(int(v) // unit.get(k, 1)) and v // unit.get(k, 1) > 2 for c in literal for k, v in c.items()):
        missing.append("a prime size (an odd one, e.g. 1_000_003" + (", or a unit times a prime" if ex.size_multiples else "") + ")")
    if not any(v > 1 and v % _WARP != 0 for c in literal for v in c.values()):
        missing.append("a size > 1 that is not a multiple of the block size (e.g. 33)")
    big = [c for c in ex.sizes if ex.is_large_case(c)]
    if not big:
        missing.append("a case larger than L2 (e.g. {'n': LARGER_THAN_L2})")
    if missing:
        raise where.error("sizes", "the test sizes need " + "; ".join(missing))
    if ex.speed_size is not None:
        if not isinstance(ex.speed_size, dict) or set(ex.speed_size) != set(ex.size_names):
            raise where.error("speed_size", f"should be one size case with the keys {ex.size_names}; "
                              f"got {ex.speed_size!r}")


def _validate_source(ex, where):
    path = ex.solutions_dir / ex.source_file
    if not path.is_file():
        there = sorted(p.name for p in path.parent.glob("*.*")) if path.parent.is_dir() else []
        raise where.error("source_file", f"{_shown(path)} does not exist."
                          + did_you_mean(ex.source_file, there))
    from .signature import compare_signature
    problem = compare_signature(ex, path.read_text())
    if problem:
        raise where.error("params", f"do not match the reference kernel in {path.name}: {problem}")


def _validate_launch(ex, where):
    if not callable(ex.launch):
        raise where.error("launch", "should be a function (sizes, cfg) -> (grid, block, shared_mem)")
    if not isinstance(ex.launch_defaults, dict):
        raise where.error("launch_defaults", f"should be a dict like {{'block': 256}}; got {ex.launch_defaults!r}")
    from .launchcfg import check_cfg_values
    problem = check_cfg_values(ex.launch_defaults)
    if problem:
        raise where.error("launch_defaults", problem)
    for case in list(ex.sizes) + [ex.default_speed_size()]:
        sizes = _literal_case(ex, case)
        try:
            result = ex.launch(dict(sizes), dict(ex.launch_defaults))
        except Exception as exc:
            raise where.error("launch", f"raised {type(exc).__name__}: {exc} for sizes {sizes}") from None
        problem = check_launch_result(result)
        if problem:
            raise where.error("launch", f"for sizes {sizes}: {problem}")
    if not (ex.reference == "kernel" or callable(ex.reference)):
        raise where.error("reference", f"should be 'kernel' or a NumPy function; got {ex.reference!r}")


def _validate_scoring(ex, where):
    int_out = [p.name for p in ex.arrays if isinstance(p, (Out, InOut)) and p.np_dtype.kind in "iub"]
    tol = ex.tolerance
    if tol not in (None, "exact") and not isinstance(tol, Tolerance):
        raise where.error("tolerance", f"should be None (by dtype), 'exact' or Tolerance(rtol, atol); got {tol!r}")
    if isinstance(tol, Tolerance):
        if tol.rtol < 0 or (tol.atol is not None and tol.atol < 0):
            raise where.error("tolerance", "rtol and atol should be >= 0")
        if int_out:
            raise where.error("tolerance", f"integer outputs ({', '.join(int_out)}) are compared exactly; "
                              "use None or 'exact'")
    if not isinstance(ex.points, Points) or ex.points.correctness < 0 or ex.points.speed < 0:
        raise where.error("points", f"should be Points(correctness=..., speed=...) >= 0; got {ex.points!r}")
    _validate_speed_tiers(ex, where)
    if not (isinstance(ex.min_cc, tuple) and len(ex.min_cc) == 2 and all(isinstance(x, int) for x in ex.min_cc)):
        raise where.error("min_cc", f"should be (major, minor) such as (8, 0); got {ex.min_cc!r}")
    problem = tensormaps.validate(ex) or techniques.validate(ex)  # arch and TensorMap params; technique fields
    if problem:
        raise where.error(*problem)
    if not isinstance(ex.timeout_s, (int, float)) or ex.timeout_s <= 0:
        raise where.error("timeout_s", f"should be a positive number of seconds; got {ex.timeout_s!r}")
    if not isinstance(ex.deterministic, bool):
        raise where.error("deterministic", "should be True or False")
    if isinstance(ex.options, str) or not all(isinstance(o, str) for o in ex.options):
        raise where.error("options", f"should be a list of NVRTC options; got {ex.options!r}")
    big = _literal_case(ex, ex.default_speed_size())
    for field in ("floor_bytes", "floor_flops"):
        fn = getattr(ex, field)
        if fn is None:
            continue
        if not callable(fn):
            raise where.error(field, "should be a function of the sizes dict")
        try:
            v = fn(dict(big))
        except Exception as exc:
            raise where.error(field, f"raised {type(exc).__name__}: {exc}") from None
        if not isinstance(v, (int, float, np.integer, np.floating)) or v <= 0:
            raise where.error(field, f"should return a positive number; got {v!r}")
    if ex.peak not in PEAKS:
        raise where.error("peak", f"should be one of {', '.join(map(repr, PEAKS))} (the arithmetic the exercise's "
                          f"precision runs on); got {ex.peak!r}.{did_you_mean(str(ex.peak).lower(), PEAKS)}")
    if ex.points.speed > 0 and ex.floor_bytes is None and ex.floor_flops is None:
        raise where.error("floor_bytes", "an exercise with speed points needs floor_bytes or floor_flops, "
                          "so that impossible times are flagged")
    # a broken shape expression should fail here, not in the middle of grading
    for case in ex.sizes:
        sizes = _literal_case(ex, case)
        for p in ex.arrays:
            try:
                shape = shape_of(p.shape, sizes)
            except Exception as exc:
                raise where.error("params", f"{p.name}: shape {p.shape!r} at {sizes}: {exc}") from None
            if any(d < 1 for d in shape):
                raise where.error("params", f"{p.name}: shape {p.shape!r} is {shape} at {sizes}")


def _validate_speed_tiers(ex, where):
    """speed_threshold in (0, 1]; each lower tier below it and the one above, with a smaller fraction."""
    t = ex.speed_threshold
    if not _number(t) or not 0 < t <= 1:
        above = (f"; {t!r} would ask for a kernel {t:g} x as fast as the reference, which the reference itself "
                 "does not reach" if _number(t) and t > 1 else "")
        raise where.error("speed_threshold", "should be a ratio in (0, 1]: full speed points when the reference's "
                          f"time / the student's time reaches it (0.8: at least 80% of the reference's speed); got "
                          f"{t!r}{above}")
    tiers = ex.speed_tiers
    if not isinstance(tiers, (tuple, list)):
        raise where.error("speed_tiers", f"should be a tuple of (ratio, fraction) pairs such as ((0.5, 0.5),); got "
                          f"{tiers!r}")
    if tiers and not ex.points.speed:
        raise where.error("speed_tiers", f"gives partial speed points ({tiers!r}), but points has no speed "
                          "points; drop speed_tiers or give Points(speed=...)")
    above = (float(t), 1.0)
    for tier in sorted(tiers, key=lambda x: -x[0] if isinstance(x, tuple) and x and _number(x[0]) else 0):
        if not (isinstance(tier, tuple) and len(tier) == 2 and all(_number(x) for x in tier)
                and 0 < tier[0] < t and 0 < tier[1] < 1):
            raise where.error("speed_tiers", f"each tier is (ratio below speed_threshold={t:g}, fraction of the "
                              f"speed points in (0, 1)), e.g. (0.5, 0.5); got {tier!r}")
        if tier[0] >= above[0] or tier[1] >= above[1]:
            raise where.error("speed_tiers", f"tier {tier!r} should give fewer points than the tier above it "
                              f"{above!r} at a lower ratio: ratios and fractions both decrease down the tiers")
        above = tier


def _validate_constants(ex, where):
    """A Constant fills a __constant__ symbol: literal sizes only, within the 64 KiB constant space."""
    if not ex.constants:
        return
    if ex.pipeline is not None:
        raise where.error("pipeline", "the pipeline driver passes arrays only and cannot fill the __constant__ symbols "
                          f"({', '.join(c.name for c in ex.constants)}); drop the Constant params or the pipeline")
    l2_names = {k for case in list(ex.sizes) + [ex.default_speed_size()] for k, v in case.items()
                if isinstance(v, L2Multiple)}
    total = 0
    for c in ex.constants:
        big = sorted(names_in(c.shape) & l2_names)
        if big:
            raise where.error("params", f"Constant {c.name!r}: its shape {c.shape!r} uses {', '.join(big)}, which "
                              "is LARGER_THAN_L2 in some case; a __constant__ array holds at most 64 KiB, so its "
                              "shape may only use literal sizes")
        for case in list(ex.sizes) + [ex.default_speed_size()]:
            shape = shape_of(c.shape, _literal_case(ex, case))
            if any(d < 1 for d in shape):
                raise where.error("params", f"Constant {c.name!r}: shape {c.shape!r} is {shape} at {case}")
        need = ex.constant_capacity(c) * c.np_dtype.itemsize
        total += need
        if need > _CONSTANT_BYTES:
            raise where.error("params", f"Constant {c.name!r} needs {need} bytes at its largest size, more than "
                              f"the {_CONSTANT_BYTES // 1024} KiB of __constant__ memory")
    if total > _CONSTANT_BYTES:
        raise where.error("params", f"the Constant arrays need {total} bytes together, more than the "
                          f"{_CONSTANT_BYTES // 1024} KiB of __constant__ memory")


def _number(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _validate_partial(ex, where):
    """``partial``: None, or a fraction of the correctness points that rounds to at least one step."""
    p = ex.partial
    if p is None:
        return
    if isinstance(ex, CallExercise):
        raise where.error("partial", f"a library call is graded all-or-nothing (no case is larger than L2); "
                          f"leave it out; got {p!r}")
    if not (_number(p) and 0 < p < 1):
        raise where.error("partial", "should be None (all-or-nothing) or the fraction of the correctness points "
                          "for a kernel that fails only at sizes larger than L2, between 0 and 1 (e.g. 0.5); "
                          f"got {p!r}")
    if ex.points.correctness > 0 and ex.partial_points <= 0:
        raise where.error("partial", f"{p!r} of {ex.points.correctness:g} correctness points rounds down to 0 "
                          f"(partial points are multiples of {PARTIAL_STEP:g}); use a larger fraction, or None")


def _validate_pipeline(ex, where):
    pl = ex.pipeline
    if pl is None:
        return
    example = "Pipeline(points=4, full_at=0.64, half_at=0.85)"
    if not isinstance(pl, Pipeline):
        raise where.error("pipeline", f"should be None or {example}; got {pl!r}")
    if not _number(pl.points) or pl.points <= 0:
        raise where.error("pipeline", f"points should be a positive number; got {pl.points!r}")
    if not (_number(pl.full_at) and _number(pl.half_at) and 0 < pl.full_at < pl.half_at < 1):
        raise where.error("pipeline", "needs 0 < full_at < half_at < 1 (ratios of the pipeline's time to the "
                          f"un-overlapped time; lower is better); got full_at={pl.full_at!r}, half_at={pl.half_at!r}")
    for field in ("max_streams", "max_chunks", "nbytes"):
        v = getattr(pl, field)
        if type(v) is not int or v < 1:
            raise where.error("pipeline", f"{field} should be a positive int; got {v!r}")
    ins = [p for p in ex.arrays if isinstance(p, In)]
    if not ins:
        raise where.error("pipeline", "needs an In array: nbytes counts elements of the first one")
    item = ins[0].np_dtype.itemsize
    if pl.nbytes % item or pl.nbytes // item < pl.max_chunks:
        raise where.error("pipeline", f"nbytes={pl.nbytes} should be a multiple of {item} (the size of "
                          f"{ins[0].name}'s elements) and hold at least max_chunks={pl.max_chunks} of them")
    try:
        pl.resolve_driver()
    except SpecError as exc:
        raise where.error("pipeline", str(exc)) from None
    missing = [k for k in ("streams", "chunks", "block") if k not in ex.launch_defaults]
    if missing:
        raise where.error("launch_defaults", f"a pipeline exercise reads 'streams', 'chunks' and 'block' from "
                          f"LAUNCH; add defaults for {', '.join(map(repr, missing))} (e.g. 'streams': 1, "
                          "'chunks': 1, 'block': 256)")
    from .launchcfg import LaunchDataError, check_pipeline_cfg, reference_launch
    problem = check_pipeline_cfg(ex, ex.launch_defaults)
    if problem:
        raise where.error("launch_defaults", problem)
    try:
        reference_launch(ex)
    except LaunchDataError as exc:
        raise where.error("pipeline", f"the // LAUNCH line of the reference {ex.source_file}: {exc}") from None


def _validate_call(ex: CallExercise, where) -> None:
    """A library-call exercise: checker and driver importable, the reference call well-formed, sizes
    positive ints, correctness points only."""
    from .launchcfg import LaunchDataError, parse_call_cell
    for which in ("checker", "driver"):
        try:
            ex.resolve(which)
        except SpecError as exc:
            raise where.error(which, str(exc)) from None
    if not isinstance(ex.points, Points) or ex.points.correctness <= 0 or ex.points.speed:
        raise where.error("points", "a library call earns correctness points only: Points(correctness=N)")
    if not isinstance(ex.sizes, (list, tuple)) or not ex.sizes:
        raise where.error("sizes", "should be a non-empty list of size dicts")
    for case in ex.sizes:
        if not isinstance(case, dict) or not all(isinstance(v, int) and v >= 1 for v in case.values()):
            raise where.error("sizes", f"every case should map size names to positive ints; got {case!r}")
    if not (isinstance(ex.min_cc, tuple) and len(ex.min_cc) == 2):
        raise where.error("min_cc", f"should be a (major, minor) tuple; got {ex.min_cc!r}")
    if ex.magic not in DATA_MAGICS:
        raise where.error("magic", f"should be a data cell's magic, one of {', '.join(DATA_MAGICS)}; got {ex.magic!r}")
    if not isinstance(ex.grader_owned, bool):
        raise where.error("grader_owned", f"should be True or False; got {ex.grader_owned!r}")
    _validate_call_pipeline(ex, where)
    path = ex.solutions_dir / ex.solution_file
    if not path.is_file():
        raise where.error("solution_file", f"{_shown(path)} does not exist.")
    try:
        call = parse_call_cell(path.read_text(), ex.name, ex.parser)
    except LaunchDataError as exc:
        raise where.error("solution_file", f"{path.name}: {exc}") from None
    problem = ex.resolve("checker")(ex.name, call)
    if problem:
        raise where.error("solution_file", f"the reference call in {path.name} is refused by the checker: {problem}")


def _validate_call_pipeline(ex: CallExercise, where) -> None:
    """A call's ``pipeline``: None, or a `Pipeline` whose thresholds are ordered and whose driver imports."""
    pl = ex.pipeline
    if pl is None:
        return
    if not isinstance(pl, Pipeline) or not _number(pl.points) or pl.points <= 0:
        raise where.error("pipeline", f"should be None or Pipeline(points=4, full_at=0.64, half_at=0.85, driver=...); "
                          f"got {pl!r}")
    if not (_number(pl.full_at) and _number(pl.half_at) and 0 < pl.full_at < pl.half_at < 1):
        raise where.error("pipeline", f"needs 0 < full_at < half_at < 1; got full_at={pl.full_at!r}, "
                          f"half_at={pl.half_at!r}")
    if type(pl.nbytes) is not int or pl.nbytes < 1:
        raise where.error("pipeline", f"nbytes should be a positive int; got {pl.nbytes!r}")
    try:
        pl.resolve_driver()
    except SpecError as exc:
        raise where.error("pipeline", str(exc)) from None


# seeds whose hidden cases are drawn at load: a spec that cannot produce them fails check-specs, not a grading
_HIDDEN_CHECK_SEEDS = (0, 1, 2, 12345)


def _validate_hidden(ex, where) -> None:
    """hidden_sizes, tile, size_range, size_rule (and a CallExercise's case_bytes); then draw a few seeds."""
    from . import hidden
    if type(ex.hidden_sizes) is not int or not 0 <= ex.hidden_sizes <= 32:
        raise where.error("hidden_sizes", f"should be an int from 0 (none) to 32; got {ex.hidden_sizes!r}")
    names, unit = ex.size_names, hidden.units(ex)
    for field in ("tile", "size_range"):
        value = getattr(ex, field)
        if not isinstance(value, dict):
            raise where.error(field, f"should be a dict of size name -> {'tile' if field == 'tile' else '(lo, hi)'}; "
                              f"got {value!r}")
        for k in value:
            if k not in names:
                raise where.error(field, f"{k!r} is not a size of this exercise.{did_you_mean(k, names)} Sizes: "
                                  f"{', '.join(names)}")
    for k, t in ex.tile.items():
        if type(t) is not int or t < 1 or t % unit[k]:
            raise where.error("tile", f"{k}: should be a positive int, a multiple of its size_multiples unit "
                              f"{unit[k]}; got {t!r}")
    for k, r in ex.size_range.items():
        if not (isinstance(r, tuple) and len(r) == 2 and all(type(x) is int for x in r) and 1 <= r[0] <= r[1]):
            raise where.error("size_range", f"{k}: should be (lo, hi), ints with 1 <= lo <= hi; got {r!r}")
        if r[1] // unit[k] * unit[k] < r[0]:
            raise where.error("size_range", f"{k}: {r} holds no multiple of {unit[k]} (size_multiples)")
    if ex.size_rule is not None:
        if not callable(ex.size_rule):
            raise where.error("size_rule", f"should be None or a function sizes -> '' (allowed) or why not; got "
                              f"{ex.size_rule!r}")
        for case in ex.sizes:
            if any(isinstance(v, L2Multiple) for v in case.values()):
                continue
            try:
                why = ex.size_rule(dict(case))
            except Exception as exc:
                raise where.error("size_rule", f"raised {type(exc).__name__}: {exc} for the public case "
                                  f"{case}") from None
            if not isinstance(why, str) or why:
                raise where.error("size_rule", f"refuses the public case {case} ({why!r}); a rule the public cases "
                                  "break cannot be the exercise's contract")
    if isinstance(ex, CallExercise) and ex.case_bytes is not None and not callable(ex.case_bytes):
        raise where.error("case_bytes", f"should be None or a function sizes -> bytes; got {ex.case_bytes!r}")
    for seed in _HIDDEN_CHECK_SEEDS:
        try:
            cases = hidden.draw_cases(ex, seed)
        except SpecError as exc:
            raise where.error("hidden_sizes", f"cannot draw hidden size cases: {exc}. Widen size_range, relax "
                              "size_rule, or set hidden_sizes=0 and say why") from None
        except Exception as exc:
            raise where.error("hidden_sizes", f"drawing hidden size cases raised {type(exc).__name__}: {exc}") from None
        if len(cases) != ex.hidden_sizes:
            raise where.error("hidden_sizes", f"drew {len(cases)} cases instead of {ex.hidden_sizes}")
