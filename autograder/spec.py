"""What a chapter's spec file declares about each graded kernel exercise.

A spec is data plus a few pure functions (launch geometry, NumPy reference, floors). Everything a
student supplies (source, LAUNCH values) is checked against it; nothing here touches CUDA, so specs
load and validate on any machine.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import math
import operator
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = [
    "In", "Out", "InOut", "Scalar", "Constant", "Uniform", "Tolerance", "Points", "Pipeline", "Exercise",
    "CallExercise", "L2Multiple",
    "LARGER_THAN_L2", "SpecError", "cdiv", "did_you_mean", "evaluate", "names_in", "shape_of",
    "POISON_DEFAULT", "PEAKS", "LARGE_LITERAL_BYTES", "PARTIAL_STEP", "DATA_MAGICS",
]

POISON_DEFAULT = "poison"
# `Exercise.peak`: the arithmetic an exercise's own precision runs on; its FLOP floor divides by this peak
PEAKS = ("fp32", "tf32", "fp16", "bf16", "int8")
# a literal size case whose buffers reach this counts as larger than L2 (2 x the largest L2 of current GPUs)
LARGE_LITERAL_BYTES = 256 << 20
# partial correctness points are rounded down to a multiple of this, so a feedback page never shows 2.333
PARTIAL_STEP = 0.5


class SpecError(ValueError):
    """A spec file, or a student's launch data, does not fit the spec format."""


def did_you_mean(name: str, choices) -> str:
    """' Did you mean 'x'?' for the closest of ``choices``, or ''."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def cdiv(a: int, b: int) -> int:
    """Ceiling division for grid sizes: blocks of ``b`` needed to cover ``a`` items."""
    return -(-int(a) // int(b))


@dataclasses.dataclass(frozen=True)
class L2Multiple:
    """A size resolved on the GPU: the smallest value whose buffers exceed ``factor`` x the L2 size.

    Written ``LARGER_THAN_L2`` (2 x L2, so the data cannot stay cached) or ``LARGER_THAN_L2 * 8``.
    """

    factor: float = 2.0

    def __mul__(self, k):
        if not isinstance(k, (int, float)) or k <= 0:
            raise SpecError(f"LARGER_THAN_L2 can only be scaled by a positive number; got {k!r}")
        return L2Multiple(self.factor * k)

    __rmul__ = __mul__

    def __repr__(self) -> str:
        return "LARGER_THAN_L2" if self.factor == 2.0 else f"LARGER_THAN_L2 * {self.factor / 2:g}"


LARGER_THAN_L2 = L2Multiple()


@dataclasses.dataclass(frozen=True)
class Uniform:
    """Values drawn uniformly from [low, high) with the grader's secret seed (ints: inclusive high)."""

    low: float
    high: float

    def draw(self, rng: np.random.Generator, shape, dtype):
        dt = np.dtype(dtype)
        if dt.kind in "iu":
            return rng.integers(int(self.low), int(self.high), size=shape, endpoint=True, dtype=dt)
        if dt.kind == "b":
            return rng.integers(0, 2, size=shape).astype(bool)
        return rng.uniform(self.low, self.high, size=shape).astype(dt)


def default_generator(dtype) -> Uniform:
    dt = np.dtype(dtype)
    if dt.kind == "u":
        return Uniform(0, min(np.iinfo(dt).max, 1 << 20))
    if dt.kind == "i":
        return Uniform(-min(-np.iinfo(dt).min, 1 << 20), min(np.iinfo(dt).max, 1 << 20))
    return Uniform(-1.0, 1.0)


# -- tiny expression language for shapes and scalar values: names are size variables ------------

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
           ast.Div: operator.truediv}
_FUNCS = {"min": min, "max": max, "cdiv": cdiv, "abs": abs}


def _parse(expr: str) -> ast.Expression:
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError as exc:
        raise SpecError(f"{expr!r} is not an expression ({exc.msg})") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.BinOp, ast.UnaryOp, ast.USub, ast.UAdd, ast.Constant,
                               ast.Name, ast.Load, ast.Call) + tuple(_BINOPS))
        if not ok:
            raise SpecError(f"{expr!r}: only + - * / // % **, numbers, size names and "
                            f"{', '.join(_FUNCS)} are allowed")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS
                                               and not node.keywords):
            raise SpecError(f"{expr!r}: only calls to {', '.join(_FUNCS)} are allowed")
        if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
            raise SpecError(f"{expr!r}: only numeric constants are allowed")
    return tree


def names_in(expr) -> set:
    """Size variable names an expression (str, number, or tuple of them) refers to."""
    if isinstance(expr, (tuple, list)):
        return set().union(*(names_in(e) for e in expr)) if expr else set()
    if isinstance(expr, (int, float, np.integer)):
        return set()
    return {n.id for n in ast.walk(_parse(expr)) if isinstance(n, ast.Name) and n.id not in _FUNCS}


def evaluate(expr, env: dict):
    """Value of a shape or scalar expression with size variables from ``env``."""
    if isinstance(expr, (int, float, np.integer, np.floating)):
        return expr

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in env:
                raise SpecError(f"unknown size {node.id!r} in {expr!r}.{did_you_mean(node.id, env)}")
            return env[node.id]
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Call):
            return _FUNCS[node.func.id](*(ev(a) for a in node.args))
        raise SpecError(f"cannot evaluate {expr!r}")

    return ev(_parse(expr))


def shape_of(shape_expr, sizes: dict) -> tuple:
    """Concrete shape tuple of a param for one size case."""
    parts = shape_expr if isinstance(shape_expr, (tuple, list)) else (shape_expr,)
    return tuple(int(evaluate(p, sizes)) for p in parts)


# -- kernel parameters, in the order of the C signature -----------------------------------------

@dataclasses.dataclass(frozen=True)
class _Array:
    name: str
    dtype: Any
    shape: Any  # expression or tuple of expressions over the size variables

    role = "array"

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.dtype)

    def nbytes(self, sizes: dict) -> int:
        return math.prod(shape_of(self.shape, sizes)) * self.np_dtype.itemsize


@dataclasses.dataclass(frozen=True)
class In(_Array):
    """A read-only input array (``const T*``); the grader checks that it is left unchanged."""

    gen: Any = None  # Uniform, or callable(rng, shape, dtype) -> ndarray; None: by dtype
    role = "in"


@dataclasses.dataclass(frozen=True)
class Out(_Array):
    """An output array; poisoned (NaN, or 0xFF bytes) before every call unless ``fill`` is given."""

    fill: Any = POISON_DEFAULT  # or a number the kernel may rely on (e.g. 0 for accumulations)
    role = "out"


@dataclasses.dataclass(frozen=True)
class InOut(_Array):
    """An array read and then overwritten in place (``y`` in ``y = a*x + y``)."""

    gen: Any = None
    role = "inout"


@dataclasses.dataclass(frozen=True)
class Constant(_Array):
    """An array the kernel reads from a file-scope ``__constant__`` symbol of the same name, not a parameter.

    Drawn like an `In` (``gen``); before every run the grader copies the values into the symbol of the
    student's module and of the reference's. Not in the C signature; the NumPy reference gets it by name.
    """

    gen: Any = None
    role = "constant"


@dataclasses.dataclass(frozen=True)
class Scalar:
    """A by-value parameter: ``value`` is a size expression ("n"), a number, or a `Uniform`."""

    name: str
    ctype: str
    value: Any
    role = "scalar"

    @property
    def np_dtype(self) -> np.dtype:
        from course.source import CTYPES
        return np.dtype(CTYPES[self.ctype])


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """``|yours - expected| <= atol + rtol * |expected|``; ``atol=None`` scales with the data."""

    rtol: float
    atol: float | None = None


@dataclasses.dataclass(frozen=True)
class Points:
    """Points for a correct kernel, and speed points for one that is also fast enough."""

    correctness: float = 1.0
    speed: float = 0.0

    @property
    def total(self) -> float:
        return self.correctness + self.speed


def import_function(target: str, what: str) -> Callable:
    """The function named by ``target`` ("module:function"); `SpecError` saying why when it cannot be."""
    import importlib
    module, _, func = str(target).partition(":")
    if not module or not func:
        raise SpecError(f"{what} should be 'module:function'; got {target!r}")
    try:
        fn = getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise SpecError(f"{what} {target!r} cannot be imported ({type(exc).__name__}: {exc})") from None
    if not callable(fn):
        raise SpecError(f"{what} {target!r} is not a function")
    return fn


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """Points for measured overlap: the kernel run through a grader-owned copy-compute-copy pipeline.

    The student's LAUNCH data chooses ``streams`` (1..``max_streams``) and ``chunks`` (1..``max_chunks``)
    and the ``block``; ``driver`` ("module:function") moves ``nbytes`` each way, checks the output and
    returns the pipeline's time over the un-overlapped time (copy-in + kernel + copy-out, each alone).
    Full ``points`` at a ratio <= ``full_at``, half at <= ``half_at``, else none.
    """

    points: float
    full_at: float
    half_at: float
    max_streams: int = 16
    max_chunks: int = 256
    nbytes: int = 256 << 20
    driver: str = "drivers.pipeline:pipeline_report"

    def fraction(self, ratio: float) -> float:
        """Fraction of ``points`` for a pipeline/un-overlapped time ratio (lower is better)."""
        if ratio <= self.full_at:
            return 1.0
        return 0.5 if ratio <= self.half_at else 0.0

    def resolve_driver(self) -> Callable:
        """The driver function (imported here; importing it must not touch CUDA)."""
        return import_function(self.driver, "driver")


@dataclasses.dataclass
class Exercise:
    """One graded kernel. See autograder/SPEC_FORMAT.md for each field."""

    name: str
    kernel: str
    source_file: str
    params: list
    sizes: list
    launch: Callable
    reference: Any = "kernel"
    chapter: str = ""
    launch_defaults: dict = dataclasses.field(default_factory=dict)
    speed_size: dict | None = None
    tolerance: Any = None
    points: Points = dataclasses.field(default_factory=Points)
    speed_threshold: float = 0.8
    speed_tiers: tuple = ()
    deterministic: bool = True
    min_cc: tuple = (7, 0)
    # an arch-specific target ("sm_90a"): both kernels compile for exactly it; other GPUs skip (tensormaps.py)
    arch: str | None = None
    required_sass: tuple = ()
    # technique checks by name (autograder/techniques.py): a failure withholds the speed points, or, for a
    # required one, fails the exercise
    techniques: tuple = ()
    required_techniques: tuple = ()
    # size name -> multiple that a LARGER_THAN_L2 value of it is rounded up to (instead of made odd), for
    # contracts such as WMMA's "m a multiple of 16"
    size_multiples: dict = dataclasses.field(default_factory=dict)
    floor_bytes: Callable | None = None
    floor_flops: Callable | None = None
    timeout_s: float = 10.0
    options: tuple = ()
    description: str = ""
    pipeline: Pipeline | None = None
    # the peak (one of PEAKS) that floor_flops is divided by: "fp32" for CUDA-core float math, "bf16" etc.
    # for tensor-core exercises
    peak: str = "fp32"
    # hidden sizes (autograder/hidden.py): cases drawn from each grading's secret seed besides `sizes`
    hidden_sizes: int = 3                    # how many; 0: none
    tile: dict = dataclasses.field(default_factory=dict)        # size name -> tile (default 32)
    size_range: dict = dataclasses.field(default_factory=dict)  # size name -> (lo, hi), both allowed
    size_rule: Callable[[dict], str] | None = None   # sizes -> '' if allowed, else why not
    # partial credit (policy.py): this fraction of the correctness points for a kernel right at every small
    # and edge size (hidden ones included) that fails only at sizes larger than L2; None: all-or-nothing
    partial: float | None = 0.5
    # "cuda" (a %%cuda kernel) or "triton" (a @triton.jit kernel in Python: autograder/triton_source.py says what
    # such a source may hold); ``triton_types``: param name -> Triton element type where the dtype does not say
    # it (``{"a": "bf16"}`` for bfloat16 kept as uint16)
    language: str = "cuda"
    triton_types: dict = dataclasses.field(default_factory=dict)
    ring: Any = None   # autograder.ring.Ring: the kernel is a step of the grader's ring all-reduce (ring.py)
    # not a spec field: set by the loader to where the references are read (solutions/<chapter>/, or a
    # frozen snapshot's copies, autograder/speclock.py); a field so that copies of the exercise keep it
    solutions_dir: Any = dataclasses.field(default=None, repr=False, compare=False)

    # -- derived -------------------------------------------------------------------------------
    @property
    def max_points(self) -> float:
        return self.points.total + (float(self.pipeline.points) if self.pipeline is not None else 0.0)

    def pipeline_n(self) -> int:
        """Elements the pipeline moves each way: ``pipeline.nbytes`` of the first input array's dtype."""
        item = next(p for p in self.arrays if isinstance(p, In)).np_dtype.itemsize
        return int(self.pipeline.nbytes) // item

    @property
    def arrays(self) -> list:
        """The array parameters the kernel receives as pointers (not the `Constant` symbols)."""
        return [p for p in self.params if isinstance(p, _Array) and not isinstance(p, Constant)]

    @property
    def constants(self) -> list:
        """`Constant` arrays: filled into ``__constant__`` symbols, not passed."""
        return [p for p in self.params if isinstance(p, Constant)]

    @property
    def kernel_params(self) -> list:
        """The parameters of the C signature, in order (everything but `Constant`)."""
        return [p for p in self.params if not isinstance(p, Constant)]

    def constant_capacity(self, c, l2_bytes: int = 64 << 20) -> int:
        """Elements the ``__constant__`` symbol of ``c`` must hold: its largest size over all cases."""
        cases = list(self.sizes) + [self.default_speed_size()]
        return max(math.prod(shape_of(c.shape, self.resolve_sizes(case, l2_bytes))) for case in cases)

    def constant_declaration(self, c) -> str:
        """``__constant__ float w[1024]`` for a `Constant`, for messages."""
        return f"__constant__ {_ctype_of(c.np_dtype)} {c.name}[{self.constant_capacity(c)}]"

    @property
    def size_names(self) -> list:
        seen = []
        for case in self.sizes:
            for k in case:
                if k not in seen:
                    seen.append(k)
        return seen

    @property
    def tiers(self) -> list:
        """(minimum reference/student time ratio, fraction of speed points), best first."""
        return [(float(self.speed_threshold), 1.0)] + sorted(
            ((float(r), float(f)) for r, f in self.speed_tiers), reverse=True)

    def array_bytes(self, sizes: dict) -> int:
        return sum(p.nbytes(sizes) for p in self.arrays)

    def signature(self) -> str:
        """The C parameter list the exercise expects, for messages."""
        out = []
        for p in self.kernel_params:
            if isinstance(p, Scalar):
                out.append(f"{p.ctype} {p.name}")
            elif hasattr(p, "c_decl"):  # a TMA map, passed by value (tensormaps.TensorMap)
                out.append(p.c_decl())
            else:
                c = _ctype_of(p.np_dtype)
                out.append(f"{'const ' if isinstance(p, In) else ''}{c}* {p.name}")
        return ", ".join(out)

    def size_label(self, sizes: dict) -> str:
        return ", ".join(f"{k}={v}" for k, v in sizes.items())

    def resolve_sizes(self, case: dict, l2_bytes: int) -> dict:
        """Replace any `L2Multiple` in ``case`` with the smallest odd value that exceeds it."""
        sym = [k for k, v in case.items() if isinstance(v, L2Multiple)]
        if not sym:
            return {k: int(v) for k, v in case.items()}
        key = sym[0]
        target = case[key].factor * max(int(l2_bytes), 1 << 20)
        fixed = {k: int(v) for k, v in case.items() if k != key}

        def nbytes(v):
            return self.array_bytes({**fixed, key: v})

        lo, hi = 1, 1
        while nbytes(hi) < target:
            lo, hi = hi, hi * 2
        while lo < hi:  # smallest v with nbytes(v) >= target; buffers grow with every size variable
            mid = (lo + hi) // 2
            if nbytes(mid) >= target:
                hi = mid
            else:
                lo = mid + 1
        mult = int(self.size_multiples.get(key, 0) or 0)
        v = -(-hi // mult) * mult if mult > 1 else hi | 1  # odd: never a multiple of a power-of-two block size
        return {k: (v if k == key else fixed[k]) for k in case}

    def is_large_case(self, case: dict) -> bool:
        """True for a case larger than L2: a `LARGER_THAN_L2` size, or literal buffers of 256 MiB or more."""
        if any(isinstance(v, L2Multiple) for v in case.values()):
            return True
        return self.array_bytes(case) >= LARGE_LITERAL_BYTES

    @property
    def partial_points(self) -> float | None:
        """Correctness points for the small and edge sizes alone (rounded down to `PARTIAL_STEP`), or None."""
        if self.partial is None:
            return None
        steps = float(self.partial) * float(self.points.correctness) / PARTIAL_STEP
        return math.floor(steps + 1e-9) * PARTIAL_STEP  # 0.29 * 100 is 28.999999999999996 in floats

    def default_speed_size(self) -> dict:
        """The L2-sized case scaled to 8 x L2 (timing needs a few hundred microseconds per call)."""
        if self.speed_size is not None:
            return dict(self.speed_size)
        for case in self.sizes:
            if any(isinstance(v, L2Multiple) for v in case.values()):
                return {k: (L2Multiple(max(v.factor, 8.0)) if isinstance(v, L2Multiple) else v)
                        for k, v in case.items()}
        return max(self.sizes, key=lambda c: self.array_bytes(c))


DATA_MAGICS = ("%%cublas", "%%streams")
"""The cell magics of data cells (a `CallExercise`'s ``magic``), each a magic of `course` (course/_magic.py):
the loader accepts these only, and extract.py finds a data cell by them."""


@dataclasses.dataclass
class CallExercise:
    """One graded library call: the student writes its arguments as a literal dict (a cell tagged
    ``call:NAME`` assigning ``CALL = {...}``), never executed; a grader-owned driver makes the call.

    ``checker`` ("module:function", ``(name, call) -> ''`` or what is wrong) runs in the parent with no
    GPU; ``driver`` (``(name, call, sizes, seed) -> {"status": "passed" | "failed", "message": str}``)
    runs each size case in a grading child on fresh inputs. The reference call is the ``CALL`` of
    ``solutions/<chapter>/<solution_file>``. Correctness points, and overlap points when a ``pipeline`` is
    given: the work is the library's (or the grader's own kernels'), so there is no speed to grade.

    ``parser`` ("module:function", ``(source, name) -> dict``, raising ValueError with what to write) reads
    the cell; ``magic`` is the cell's first word (``%%cublas`` for chapter 10's calls, ``%%streams`` for
    chapter 03's schedule). With a ``pipeline``, its ``driver`` (``(name, call, *, seed, nbytes) -> dict`` with
    the keys of `course.streams.pipeline_report`) is timed once the cases pass, as a kernel's pipeline.

    ``grader_owned``: the driver runs only the grader's kernels, buffers and copies, and the student's data
    merely orders them (chapter 03's schedule), so an exception from it is a grader error. False (a library
    call such as cuBLAS's): the student's arguments can fault the GPU, a "crashed" verdict.
    """

    name: str
    checker: str
    driver: str
    solution_file: str
    sizes: list
    points: Points = dataclasses.field(default_factory=Points)
    chapter: str = ""
    description: str = ""
    min_cc: tuple = (7, 0)
    timeout_s: float = 60.0
    pipeline: Pipeline | None = None
    partial: None = None    # all-or-nothing: no call case is larger than L2, so there is no group to drop
    parser: str = "course.calls:parse_call_cell"
    magic: str = "%%cublas"
    grader_owned: bool = False
    # hidden sizes, as for `Exercise`; ``case_bytes(sizes)`` is what a case's buffers take (for the cap)
    hidden_sizes: int = 3
    tile: dict = dataclasses.field(default_factory=dict)
    size_range: dict = dataclasses.field(default_factory=dict)
    size_rule: Callable[[dict], str] | None = None
    case_bytes: Callable[[dict], int] | None = None
    solutions_dir: Any = dataclasses.field(default=None, repr=False, compare=False)  # as for `Exercise`

    @property
    def max_points(self) -> float:
        return self.points.total + (float(self.pipeline.points) if self.pipeline is not None else 0.0)

    @property
    def size_names(self) -> list:
        seen = []
        for case in self.sizes:
            seen += [k for k in case if k not in seen]
        return seen

    def resolve(self, which: str) -> Callable:
        """The checker or the driver function (importing it must not touch CUDA)."""
        return import_function(getattr(self, which), which)

    def size_label(self, sizes: dict) -> str:
        return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _ctype_of(dt: np.dtype) -> str:
    names = {"float32": "float", "float64": "double", "float16": "half", "int32": "int",
             "uint32": "unsigned int", "int64": "long long", "uint64": "unsigned long long",
             "uint8": "unsigned char", "int8": "signed char", "int16": "short", "uint16": "unsigned short",
             "bool": "bool"}
    return names.get(np.dtype(dt).name, np.dtype(dt).name)


# --- used by the loader, the launch checks and the hidden-case draw alike (kept here: no import cycles)

_ROOT = Path(__file__).resolve().parent.parent


def reference_source(ex) -> str:
    """The reference kernel (an `Exercise`) or the reference call cell (a `CallExercise`)."""
    name = ex.solution_file if isinstance(ex, CallExercise) else ex.source_file
    # the loader records the folder: solutions/<chapter>/, or a frozen snapshot's own copies (speclock.py)
    folder = ex.solutions_dir or _ROOT / "solutions" / ex.chapter
    return (Path(folder) / name).read_text()


def _dims_ok(v) -> bool:
    if isinstance(v, (int, np.integer)):
        return int(v) >= 1
    return isinstance(v, tuple) and 1 <= len(v) <= 3 and all(
        isinstance(x, (int, np.integer)) and int(x) >= 1 for x in v)


def check_launch_result(result) -> str:
    """'' if ``result`` looks like (grid, block, shared_mem), else what is wrong with it."""
    if not (isinstance(result, tuple) and len(result) == 3):
        return f"should return (grid, block, shared_mem); got {result!r}"
    grid, block, smem = result
    if not _dims_ok(grid):
        return f"grid should be a positive int or a tuple of 1 to 3 of them; got {grid!r}"
    if not _dims_ok(block):
        return f"block should be a positive int or a tuple of 1 to 3 of them; got {block!r}"
    if not isinstance(smem, (int, np.integer)) or smem < 0:
        return f"shared_mem should be a non-negative int; got {smem!r}"
    return ""
