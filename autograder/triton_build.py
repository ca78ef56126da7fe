"""Triton exercises in the compile children: the submission compiled to cubins, the reference compiled and the
student's machine code inspected, each in its own child.

The student's child is the only process that ever executes a submission's Python. Before it does, the source
passes `triton_source.resolve_problem`, so executing it only defines jit functions, and compiling runs only
Triton's code generator over them. That child is confined harder than a CUDA compile child (its one writable
folder is its own, network connections are refused) and what it returns is data the parent re-checks: cubins
and launch metadata. Everything the grade relies on besides them (the reference's cubins, the technique checks
read from the student's SASS) comes from a second child that runs no student code.

A jit kernel is compiled for the exercise's parameter types and the student's LAUNCH constexprs, once per
*specialization*: like Triton's own launcher, an integer argument divisible by 16 is compiled with that fact
known (it lets Triton prove alignment and vectorize). The variants needed are those of this grading's size
cases, plus the one that assumes nothing, which fits any arguments.
"""
from __future__ import annotations

import base64

from .spec import Scalar, Uniform, evaluate
from .triton_source import TRITON_SCALARS, pointer_type, resolve_problem

__all__ = ["LAUNCH_ONLY", "GENERIC", "specializations", "variant_key", "compile_program", "student_task",
           "reference_task", "program_problem", "all_keys", "int_scalars"]

LAUNCH_ONLY = ("num_warps", "num_stages")   # LAUNCH keys that are compile options, not constexprs
MAX_VARIANTS = 8
MAX_CUBIN_BYTES = 16 << 20
_INT_TYPES = ("i32", "i64", "u32", "u64")


def int_scalars(ex) -> list:
    """(position, Scalar) of the integer by-value parameters, in the kernel's order."""
    return [(i, p) for i, p in enumerate(ex.kernel_params)
            if isinstance(p, Scalar) and TRITON_SCALARS.get(p.ctype) in _INT_TYPES]


GENERIC = ""  # the key of no specialization: filled in per exercise by `variant_key`


def variant_key(flags) -> str:
    """'1' for an integer argument divisible by 16, '0' otherwise, in parameter order ('' with none)."""
    return "".join("1" if f else "0" for f in flags)


def all_keys(ex) -> list:
    """Every variant key of ``ex`` when there are at most `MAX_VARIANTS` (the reference is compiled for all,
    once per session), else None."""
    n = len(int_scalars(ex))
    if 2 ** n > MAX_VARIANTS:
        return None
    return sorted((variant_key(int(b) for b in format(i, f"0{n}b")) for i in range(2 ** n)),
                  key=lambda k: (set(k) != {"0"} and k != "", k)) if n else [""]


def specializations(ex, cases, l2_bytes: int) -> list:
    """The variant keys this grading needs: each size case's (and the speed size's), and the generic one."""
    ints = int_scalars(ex)
    generic = variant_key([False] * len(ints))
    keys = {generic}
    for case in list(cases) + [ex.default_speed_size()]:
        sizes = ex.resolve_sizes(case, l2_bytes)
        flags = []
        for _, p in ints:
            if isinstance(p.value, Uniform) or callable(p.value):
                flags.append(None)  # drawn per run: both variants
            else:
                flags.append(int(evaluate(p.value, sizes)) % 16 == 0)
        options = [[]]
        for f in flags:
            options = [o + [v] for o in options for v in ((False, True) if f is None else (f,))]
        keys |= {variant_key(o) for o in options}
    return sorted(keys, key=lambda k: (k != generic, k))[:MAX_VARIANTS]


def _signature(ex, fn, cfg: dict, key: str) -> tuple:
    """(signature, constexprs, attrs) for Triton's ASTSource: the spec's types, LAUNCH's constexprs."""
    sig, attrs = {}, {}
    params = ex.kernel_params
    names = list(fn.arg_names)
    flags = iter(key)
    overrides = getattr(ex, "triton_types", {}) or {}
    for i, (name, p) in enumerate(zip(names, params)):
        if isinstance(p, Scalar):
            sig[name] = TRITON_SCALARS[p.ctype]
            if sig[name] in _INT_TYPES and next(flags, "0") == "1":
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[name] = pointer_type(p.np_dtype, overrides.get(p.name))
            attrs[(i,)] = [["tt.divisibility", 16]]  # every grader buffer starts 256-byte aligned
    constexprs = {}
    for name in names[len(params):]:
        sig[name] = "constexpr"
        if name in cfg:
            constexprs[name] = cfg[name]
    return sig, constexprs, attrs


def _load_module(source: str, label: str):
    """Execute an already-checked source as a module; its functions' source is served from linecache."""
    import linecache
    import types
    filename = f"<{label}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(label)
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)
    return module


def compile_program(source: str, ex, cfg: dict, arch: str, keys, label: str) -> dict:
    """Compile ``ex.kernel`` of ``source`` for ``arch`` once per variant key (`course.triton.compile_for`, as the
    lesson compiles); the program as JSON-safe data (`course.triton.Compiled`'s fields, the cubin in base64).

    Raises ValueError (a message for the student) when the source is not allowed or Triton rejects it.
    """
    problem = resolve_problem(source)
    if problem:
        raise ValueError(problem)
    import dataclasses

    import triton
    from course.triton import compile_for
    module = _load_module(source, label)
    fn = getattr(module, ex.kernel, None)
    if not isinstance(fn, triton.runtime.jit.JITFunction):
        raise ValueError(f"{ex.kernel} is not a @triton.jit function")
    options = {k: int(cfg[k]) for k in LAUNCH_ONLY if k in cfg}
    variants = {}
    for key in keys:
        sig, constexprs, attrs = _signature(ex, fn, cfg, key)
        try:
            c = compile_for(fn, sig, constexprs, arch=arch, attrs=attrs, **options)
        except Exception as exc:  # Triton's CompilationError carries the source line; keep its message
            raise ValueError(_compile_message(exc)) from None
        variants[key] = dict(dataclasses.asdict(c), cubin=base64.b64encode(c.cubin).decode(),
                             ptx=c.ptx if key == keys[0] else "")
    return {"kind": "triton", "arch": arch, "kernel": ex.kernel, "variants": variants,
            "triton": triton.__version__, "cfg": {k: v for k, v in cfg.items()}}


def _compile_message(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"Triton could not compile your kernel:\n{text[-3000:]}"


def program_problem(ex, prog) -> str:
    """'' when a program from the student's child has the shape the run child loads; else why not. The
    student's child executed student code, so nothing it sent is trusted further than this."""
    if not isinstance(prog, dict) or prog.get("kind") != "triton" or not isinstance(prog.get("variants"), dict):
        return "the compile child returned no Triton program"
    total = 0
    n_user = len(ex.kernel_params)
    for key, v in prog["variants"].items():
        if not (isinstance(key, str) and set(key) <= {"0", "1"} and isinstance(v, dict)):
            return "malformed variant"
        try:
            total += len(base64.b64decode(v["cubin"], validate=True))
            ok = (v["name"] == ex.kernel and 1 <= int(v["num_warps"]) <= 32 and 0 <= int(v["shared"]) <= 1 << 20
                  and n_user <= int(v["params"]) <= n_user + 4 and int(v["profile_scratch"]) == 0
                  and 0 <= int(v["scratch"][0]) <= 1 << 20 and 1 <= int(v["scratch"][1]) <= 4096
                  and list(v["cluster"]) == [1, 1, 1] and isinstance(v["arch"], str) and isinstance(v["ptx"], str)
                  and 0 <= int(v["num_stages"]) <= 16)
        except (KeyError, TypeError, ValueError, IndexError):
            return "malformed variant"
        if not ok:
            return (f"the compiled kernel uses what the grader does not launch (warps {v.get('num_warps')}, shared "
                    f"{v.get('shared')} bytes, clusters {v.get('cluster')}); use num_warps 1 to 32 and no clusters")
    if total > MAX_CUBIN_BYTES:
        return f"the compiled kernels take {total >> 20} MiB, more than the grader loads"
    return "" if prog["variants"] else "no variant compiled"


def student_task(task: dict, ex) -> dict:
    """The student's child: their source compiled, nothing else (see the module docstring)."""
    try:
        prog = compile_program(task["source"], ex, dict(task["launch"]), task["arch"], list(task["keys"]), "student")
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        return {"status": "compile error", "message": str(exc)[-4000:]}
    return {"status": "ok", "student": prog}


class _Compiled:
    """What the technique checks read from a compiled program (techniques.evaluate's ``program``)."""

    def __init__(self, cubin: bytes, ptx: str, arch: str):
        self.cubin, self.ptx, self.arch, self.log, self.resources = cubin, ptx, arch, "", {}

    def sass(self) -> str:
        from course import sass_of
        return sass_of(self.cubin)


def reference_task(task: dict, ex) -> dict:
    """The grader's child: the reference compiled (when the session has not yet), the student's program checked
    for shape and its machine code for the exercise's techniques."""
    from .techniques import evaluate as evaluate_techniques
    out = {"status": "ok", "notes": []}
    student = task.get("student")
    if student is not None:
        problem = program_problem(ex, student)
        if problem:
            return {"status": "compile error", "message": problem}
        worst = {}  # check name -> its worst verdict over the variants (a grading may launch any of them)
        rank = {False: 0, None: 1, True: 2}
        for key in sorted(student["variants"]):
            v = student["variants"][key]
            compiled = _Compiled(base64.b64decode(v["cubin"]), v.get("ptx", ""), task["arch"])
            for verdict in evaluate_techniques(ex, compiled):
                if verdict.name not in worst or rank[verdict.passed] < rank[worst[verdict.name].passed]:
                    worst[verdict.name] = verdict
        verdicts = list(worst.values())
        out["notes"] += [v.message for v in verdicts if v.passed is None]
        failed = [v for v in verdicts if v.passed is False and v.required]
        if failed:
            return {"status": "failed", "notes": out["notes"], "message": "\n".join(v.message for v in failed)}
        out["techniques"] = [v.to_dict() for v in verdicts]
    if task.get("reference_source") is not None:
        out["reference"] = compile_program(task["reference_source"], ex, dict(task["reference_launch"]),
                                           task["arch"], list(task["keys"]), "reference")
    return out

