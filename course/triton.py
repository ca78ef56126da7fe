"""Triton kernels on CuPy arrays (chapter 15): compiled by Triton's compiler, launched by CuPy.

Triton's own launcher (``kernel[grid](...)``) finds its device and stream through PyTorch: without PyTorch it
cannot launch at all, and with it a kernel goes to PyTorch's current stream, not to the CuPy stream on which
`course.benchmark` records its events. So the course does what that launcher does, in the open: it compiles a
``@triton.jit`` function once per signature (the arguments' types, which integers are divisible by 16, the
``tl.constexpr`` values, ``num_warps`` and ``num_stages``), loads the cubin with CuPy, and launches it on CuPy's
current stream with one program per grid cell and ``32 x num_warps`` threads. The grader runs Triton exercises
the same way (autograder/triton_launch.py). Triton is imported only when a function here needs it; without a
GPU, `compile_for` still shows what Triton generates for any arch.
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import re

from ._triton_env import MISSING, available

__all__ = ["available", "BF16", "Compiled", "Loaded", "compile_for", "signature_of", "launch", "Launcher", "autotune",
           "lesson_kernels", "cell_source", "kernels_from_source", "MISSING", "HostArray", "interpret"]

_TYPES = {"float32": "fp32", "float16": "fp16", "float64": "fp64", "int32": "i32", "uint32": "u32", "int64": "i64",
          "uint64": "u64", "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16", "bool": "i1"}


@dataclasses.dataclass(frozen=True)
class BF16:
    """A uint16 CuPy array that holds BF16 bits (as `course.cublas.to_bf16` makes them): Triton sees ``*bf16``."""

    array: object


@dataclasses.dataclass
class Compiled:
    """One compiled variant: the cubin and what Triton's launcher needs to run it."""

    name: str
    arch: str
    cubin: bytes
    ptx: str
    shared: int
    num_warps: int
    num_stages: int
    params: int              # in the PTX entry: the kernel's own, plus Triton's trailing scratch pointers
    scratch: tuple           # (global scratch bytes per program, alignment)
    profile_scratch: int = 0     # bytes of Triton's profiler scratch (launched with a null pointer: must be 0)
    cluster: tuple = (1, 1, 1)   # thread-block cluster dims (Triton's num_ctas > 1): launched only as (1, 1, 1)

    def sass(self) -> str:
        from course import sass_of
        return sass_of(self.cubin)

    def summary(self) -> str:
        return (f"{self.name} for {self.arch}: {self.num_warps} warps ({32 * self.num_warps} threads), "
                f"{self.num_stages} stages, {self.shared:,} bytes of shared memory, {len(self.cubin):,}-byte cubin")


def _arg_type(a) -> tuple:
    """(Triton type, divisible by 16) of one launch argument, as Triton's launcher decides it."""
    import numpy as np
    if isinstance(a, BF16):
        return "*bf16", a.array.data.ptr % 16 == 0
    if hasattr(a, "data") and hasattr(a, "dtype") and hasattr(a.data, "ptr"):   # a CuPy array
        return "*" + _TYPES[np.dtype(a.dtype).name], a.data.ptr % 16 == 0
    if isinstance(a, (bool, np.bool_)):
        return "i1", False
    if isinstance(a, (int, np.integer)):
        return ("i32" if -2**31 <= int(a) < 2**31 else "i64"), int(a) % 16 == 0
    if isinstance(a, (float, np.floating)):
        return "fp32", False
    raise TypeError(f"a Triton launch takes CuPy arrays, course.triton.BF16(...), ints and floats; got {type(a)}")


def signature_of(fn, args, constexprs: dict) -> tuple:
    """(signature, constexprs, attrs) for Triton's ASTSource from the launch's arguments."""
    names = list(fn.arg_names)
    extra = [k for k in constexprs if k not in names[len(args):]]
    if len(args) > len(names) or extra:
        raise TypeError(f"{fn.__name__} takes {', '.join(names)}; got {len(args)} arguments and constexprs "
                        f"{', '.join(constexprs) or 'none'}")
    sig, attrs = {}, {}
    for i, (name, a) in enumerate(zip(names, args)):
        sig[name], aligned = _arg_type(a)
        if aligned and sig[name] != "i1":
            attrs[(i,)] = [["tt.divisibility", 16]]
    for name in names[len(args):]:
        if name not in constexprs:
            raise TypeError(f"{fn.__name__}'s {name} has no value: pass {name}=... to the launch")
        sig[name] = "constexpr"
    return sig, dict(constexprs), attrs


def _arch(arch) -> str:
    if arch:
        return arch
    from course import device_info
    return device_info().arch


def compile_for(fn, signature: dict, constexprs: dict | None = None, *, arch=None, num_warps: int = 4,
                num_stages: int = 3, attrs=None) -> Compiled:
    """Compile ``fn`` (a ``@triton.jit`` function) for ``arch`` ('sm_90'; default: this GPU's) without a GPU:
    ``signature`` maps each parameter to its Triton type ('*fp32', 'i32', 'constexpr')."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from course import arch_cc
    major, minor = arch_cc(_arch(arch))
    k = triton.compile(ASTSource(fn, signature, constexprs or {}, attrs or {}),
                       target=GPUTarget("cuda", major * 10 + minor, 32),
                       options={"num_warps": int(num_warps), "num_stages": int(num_stages)})
    ptx = k.asm.get("ptx", "")
    entry = re.search(r"\.entry\s+\w+\s*\((.*?)\)", ptx, re.S)
    md = k.metadata
    return Compiled(md.name, f"sm_{major}{minor}", k.asm["cubin"], ptx, int(md.shared), int(md.num_warps),
                    int(num_stages), len(re.findall(r"\.param\b", entry.group(1))) if entry else 0,
                    (int(getattr(md, "global_scratch_size", 0) or 0), int(getattr(md, "global_scratch_align", 1) or 1)),
                    int(getattr(md, "profile_scratch_size", 0) or 0),
                    tuple(int(x) for x in (getattr(md, "cluster_dims", None) or (1, 1, 1))))


class Loaded:
    """A `Compiled` kernel loaded by CuPy: ``loaded(grid, args)`` launches it on CuPy's current stream as Triton's
    launcher would (one program per grid cell, 32 x num_warps threads, its shared memory, and the trailing scratch
    pointers Triton adds), ``args`` already typed (arrays, NumPy scalars). `launch` and the grader's run child
    (autograder/triton_launch.py) both launch through it."""

    def __init__(self, c: Compiled):
        import cupy
        self.compiled, self.module = c, cupy.cuda.function.Module()
        self.module.load(c.cubin)
        self.fn = self.module.get_function(c.name)
        if c.shared > 48 << 10:
            cupy.cuda.driver.funcSetAttribute(self.fn.ptr, 8, c.shared)   # the dynamic shared memory opt-in
        self.scratch = None

    def _scratch_ptr(self, programs: int) -> int:
        size, align = self.compiled.scratch
        if not size:
            return 0
        import cupy
        want = size * programs + align
        if self.scratch is None or self.scratch.nbytes < want:   # kept: no allocation inside a timed launch
            self.scratch = cupy.empty(want, dtype=cupy.uint8)
        return -(-self.scratch.data.ptr // align) * align

    def __call__(self, grid, args) -> None:
        import numpy as np
        c = self.compiled
        grid = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
        grid = tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
        packed = list(args)
        extra = c.params - len(packed)
        if extra > 0:
            packed += [np.uint64(self._scratch_ptr(grid[0] * grid[1] * grid[2]))] + [np.uint64(0)] * (extra - 1)
        self.fn(grid, (32 * c.num_warps, 1, 1), tuple(packed), shared_mem=c.shared)


_CACHE: dict = {}


def _pack(a, t):
    import numpy as np
    if isinstance(a, BF16):
        return a.array
    if t.startswith("*"):
        return a
    return {"i1": np.bool_, "i32": np.int32, "i64": np.int64, "fp32": np.float32}[t](a)


def launch(fn, grid, *args, num_warps: int = 4, num_stages: int = 3, **constexprs) -> Compiled:
    """Launch ``fn`` on CuPy's current stream: ``grid`` programs (an int or a tuple of up to 3), the runtime
    ``args`` in order (CuPy arrays, `BF16`, ints, floats) and the ``tl.constexpr`` values by name. The first
    launch of a signature compiles it (outside any timed region, if you launch once before timing)."""
    sig, cx, attrs = signature_of(fn, args, constexprs)
    key = (fn, tuple(sig.items()), tuple(sorted(cx.items())), tuple(sorted(attrs)), num_warps, num_stages)
    loaded = _CACHE.get(key)
    if loaded is None:
        loaded = _CACHE[key] = Loaded(compile_for(fn, sig, cx, num_warps=num_warps, num_stages=num_stages,
                                                  attrs=attrs))
    loaded(grid, [_pack(a, t) for a, t in zip(args, sig.values())])
    return loaded.compiled


class Launcher:
    """``Launcher(fn)[grid](*args, num_warps=4, **constexprs)``: Triton's launch syntax over `launch`."""

    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        return lambda *args, **kw: launch(self.fn, grid, *args, **kw)


def autotune(run, configs) -> tuple:
    """(best config, {config label: BenchResult}): ``run(**config)`` enqueues one launch with that configuration
    (launch once first so that compiling stays out of the timing); every config timed by `course.interleaved`."""
    from course import interleaved
    label = {", ".join(f"{k}={v}" for k, v in c.items()): c for c in configs}
    for c in configs:
        run(**c)   # compiles each variant before anything is timed
    times = interleaved({k: (lambda c=c: run(**c)) for k, c in label.items()})
    best = min(times, key=lambda k: times[k].median_ms)
    return label[best], times


def lesson_kernels(chapter: str, name: str) -> dict:
    """The ``@triton.jit`` functions of the ``%%triton --name NAME`` cell of chapters/<chapter>.ipynb (the cell
    run in this session wins), executed in a module of their own: name -> JITFunction."""
    return kernels_from_source(cell_source(chapter, name), f"{chapter}:{name}")


def cell_source(chapter: str, name: str) -> str:
    """The text of the ``%%triton --name NAME`` cell of chapters/<chapter>.ipynb (the one run in this session
    wins), without its ``%%triton`` line."""
    from ._cells import triton_cell_source
    return triton_cell_source(chapter, name)


def kernels_from_source(source: str, label: str = "kernels") -> dict:
    """The ``@triton.jit`` functions of a Python source (a solution file, a cell), executed in a module of their
    own whose source `linecache` serves (Triton reads a function's text): name -> JITFunction."""
    import linecache
    import types
    import triton
    filename = f"<{label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f"triton_{abs(hash(label))}")
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return {k: v for k, v in vars(module).items() if isinstance(v, triton.runtime.jit.JITFunction)}


# Triton's interpreter on NumPy arrays: no GPU and no PyTorch (Triton 3.6, NumPy 2.4). The interpreter copies each
# argument with data_ptr() "to the host" through a corner of PyTorch's tensor API; a NumPy array is on the host
# already, so `HostArray` answers that corner with the array itself. Its limits are Triton's: BF16 tl.dot is not
# supported (triton#11584: it multiplies the raw bits), so products run there in FP16 or FP32.

class _Storage:
    def __init__(self, array):
        self.array = array

    def data_ptr(self):
        return self.array.ctypes.data

    def cpu(self):            # already on the host
        return self

    def copy_(self, other):   # the interpreter copies results "back to the device": the same memory here
        return self


class HostArray:
    """A NumPy array as Triton's interpreter wants a tensor: ``data_ptr()``, ``dtype`` ('float32', or 'bfloat16'
    for uint16 bits) and the few storage calls it makes to copy arguments to the host and back."""

    def __init__(self, array, dtype: str | None = None):
        import numpy as np
        if not array.flags.c_contiguous:
            raise ValueError("HostArray needs a C-contiguous NumPy array (np.ascontiguousarray(a))")
        self.array, self.dtype = array, dtype or np.dtype(array.dtype).name

    def data_ptr(self):
        return self.array.ctypes.data

    def untyped_storage(self):
        return _Storage(self.array)

    def new_empty(self, *_, **__):
        return HostArray(self.array, self.dtype)

    def set_(self, *_):
        return self

    def storage_offset(self):
        return 0

    def size(self):
        return self.array.shape

    def stride(self):
        return tuple(s // self.array.itemsize for s in self.array.strides)


def _nested_class():
    from triton.runtime.interpreter import InterpretedFunction, InterpreterError, _patch_lang

    class Nested(InterpretedFunction):
        """A library function called from an interpreted kernel; unlike Triton's own device-function call it undoes
        its patches of triton.language when it returns, so the compiler finds the language as it was."""

        def __call__(self, *args, **kwargs):
            scope = _patch_lang(self.fn)
            try:
                return self.rewrite()(*args, **kwargs)
            except Exception as e:
                raise InterpreterError(repr(e)) from e
            finally:
                scope.restore()
    return Nested


@contextlib.contextmanager
def _interpreting(namespace: dict):
    """For one run: Triton's own library functions written in Triton (``tl.max``, ``tl.sum``, ``tl.cdiv``, ...) are
    JITFunctions when Triton was imported without TRITON_INTERPRET, and a JITFunction refuses to be called
    inside the interpreter; they are swapped for InterpretedFunctions of the same Python. And NumPy 2.4's
    stricter int() gets the one-element arrays the interpreter hands it as loop bounds (triton#9171)."""
    import triton.language as tl
    import triton.runtime.interpreter as interp
    from triton.runtime.jit import JITFunction
    try:   # imported lazily by the launcher's type mangling, and it asserts the library functions are JITFunctions
        import triton.experimental.gluon  # noqa: F401
    except ImportError:
        pass
    swapped, _Nested = [], _nested_class()
    for mod in (tl, tl.math, tl.standard, tl.core, namespace):
        table = mod if isinstance(mod, dict) else vars(mod)
        for name, value in list(table.items()):
            if isinstance(value, JITFunction):
                swapped.append((table, name, value))
                table[name] = _Nested(value.fn)
    original = interp._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))
    interp._patch_lang_tensor = patched
    try:
        yield
    finally:
        interp._patch_lang_tensor = original
        for table, name, value in swapped:
            table[name] = value


def interpret(fn, grid, *args, **constexprs):
    """Run the ``@triton.jit`` function ``fn`` over ``grid`` in Triton's interpreter, on the CPU, without a GPU or
    PyTorch: NumPy arrays (BF16 bits as ``HostArray(bits, "bfloat16")``: loads and arithmetic work, ``tl.dot`` does
    not), ints and floats in the order of its parameters, the ``tl.constexpr`` values by name. Outputs land in
    the arrays. One program at a time, each a NumPy computation on whole tiles: thousands of times slower than
    the GPU, for small sizes only."""
    import numpy as np
    from triton.runtime.interpreter import InterpretedFunction
    if not callable(getattr(fn, "fn", None)):
        raise TypeError(f"interpret takes a @triton.jit function; got {type(fn).__name__}")
    grid = (grid,) if isinstance(grid, (int, np.integer)) else tuple(grid)
    wrapped = [HostArray(a) if isinstance(a, np.ndarray) else a for a in args]
    with _interpreting(fn.fn.__globals__):
        InterpretedFunction(fn.fn)[grid](*wrapped, **constexprs)
