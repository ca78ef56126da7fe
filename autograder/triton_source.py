"""A Triton submission read as text: what it may contain, its kernel's parameters, its LAUNCH data.

A Triton exercise's source is Python, and Python runs whatever it is given, so the grader never runs a
submission as it stands. It accepts a small language instead, checked here with `ast` before anything is
executed (in the parent, for the student's message; again in the compile child, which then resolves every
name against the real Triton modules, `resolve_problem`):

- at module level: imports of ``triton``, ``triton.language`` (and its submodules) and ``math``; functions
  decorated ``@triton.jit``; constants assigned literals (``LAUNCH = {...}`` among them); docstrings;
- inside the functions: the parameters, local names, the module's jit functions and constants, the
  imported modules, and a few builtins Triton compiles (``range``, ``min``, ``max``, ``len``...); no name or
  attribute starting with an underscore, so nothing reaches ``__globals__``, ``__builtins__`` or a module's
  private state.

Executing such a module only defines functions; compiling one with Triton runs only what Triton's code
generator calls, which `resolve_problem` keeps to Triton's own language and ``math``.
"""
from __future__ import annotations

import ast

__all__ = ["ALLOWED_BUILTINS", "TRITON_SCALARS", "check_source", "kernel_parameters", "compare_params",
           "launch_from_python", "pointer_type", "resolve_problem", "spec_problem", "MAX_SOURCE_CHARS"]

MAX_SOURCE_CHARS = 200_000
ALLOWED_BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "abs", "print", "isinstance",
                              "tuple", "True", "False", "None"})
_ROOT_MODULES = ("triton", "math")
# a spec's scalar C type -> Triton's signature type
TRITON_SCALARS = {"int": "i32", "unsigned int": "u32", "long long": "i64", "unsigned long long": "u64",
                  "size_t": "u64", "float": "fp32", "double": "fp64"}
_POINTEE = {"float32": "fp32", "float16": "fp16", "float64": "fp64", "int32": "i32", "uint32": "u32",
            "int64": "i64", "uint64": "u64", "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16",
            "bool": "i1"}
_WHAT = ("Write the kernel as a plain @triton.jit function; the module may import triton, triton.language "
         "and math, define @triton.jit functions and assign constants, and nothing else.")


def pointer_type(dtype, override: str | None = None) -> str:
    """Triton's pointer type for an array of NumPy ``dtype`` (``*fp32``); ``override`` names another element
    type for the same bits (``bf16`` for bfloat16 kept as uint16)."""
    import numpy as np
    return "*" + (override or _POINTEE[np.dtype(dtype).name])


def _imports(tree: ast.Module) -> tuple:
    """(alias -> dotted module or 'module:attr', problem)."""
    names = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in _ROOT_MODULES or (a.name.startswith("triton.")
                                                                  and not a.name.startswith("triton.language")):
                    return names, f"line {node.lineno}: `import {a.name}` is not allowed. {_WHAT}"
                names[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level or not (mod == "triton" or mod.startswith("triton.language") or mod == "math"):
                return names, f"line {node.lineno}: `from {'.' * node.level}{mod} import ...` is not allowed. {_WHAT}"
            for a in node.names:
                if a.name == "*" or a.name.startswith("_"):
                    return names, f"line {node.lineno}: `from {mod} import {a.name}` is not allowed. {_WHAT}"
                names[a.asname or a.name] = f"{mod}:{a.name}"
    return names, ""


def _is_jit(dec: ast.expr, imports: dict) -> bool:
    if isinstance(dec, ast.Attribute) and isinstance(dec.value, ast.Name):
        return dec.attr == "jit" and imports.get(dec.value.id) == "triton"
    return isinstance(dec, ast.Name) and imports.get(dec.id) == "triton:jit"


def _literal(node) -> bool:
    try:
        ast.literal_eval(node)
        return True
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False


def _constexpr_literal(node, imports) -> bool:
    """``tl.constexpr(3)``: a literal wrapped in Triton's constexpr, as module constants often are."""
    return (isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords and _literal(node.args[0])
            and isinstance(node.func, ast.Attribute) and node.func.attr == "constexpr"
            and isinstance(node.func.value, ast.Name) and node.func.value.id in imports)


def _module_names(tree: ast.Module, imports: dict) -> tuple:
    """(jit function names, constant names, problem) of the module's top level."""
    jits, consts = [], []
    for node in tree.body:
        line = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        if isinstance(node, ast.FunctionDef):
            if len(node.decorator_list) != 1 or not _is_jit(node.decorator_list[0], imports):
                return jits, consts, (f"{line}: {node.name} should be decorated with exactly @triton.jit (the grader "
                                      "compiles the configuration in LAUNCH; autotune in your notebook, not here). "
                                      + _WHAT)
            jits.append(node.name)
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if (all(isinstance(t, ast.Name) for t in targets) and value is not None
                    and (_literal(value) or _constexpr_literal(value, imports))):
                consts += [t.id for t in targets]
                continue
            return jits, consts, f"{line}: only literal constants may be assigned at module level. {_WHAT}"
        kind = "an expression" if isinstance(node, ast.Expr) else f"a {type(node).__name__}"
        return jits, consts, f"{line}: {kind} statement is not allowed at module level. {_WHAT}"
    return jits, consts, ""


_BANNED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Global, ast.Nonlocal,
           ast.Import, ast.ImportFrom, ast.Try, ast.With, ast.AsyncFunctionDef, ast.ClassDef, ast.Await,
           ast.Yield, ast.YieldFrom, ast.Delete, ast.Raise, ast.NamedExpr)


def _function_problem(fn: ast.FunctionDef, known: set, callables: dict) -> str:
    args = fn.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        return f"line {fn.lineno}: {fn.name} should take plain parameters only (no *args, **kwargs or keyword-only)"
    for d in args.defaults:
        if not _literal(d):
            return f"line {d.lineno}: a default value in {fn.name} should be a literal"
    local = {a.arg for a in args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            local.add(node.id)
    # a module or a jit function is only ever the base of an attribute chain or the function called: held in a
    # variable (``m = tl``) it would carry an attribute chain past `resolve_problem`
    placed = {id(n.value) for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    placed |= {id(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    called = {id(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)}
    for node in ast.walk(fn):
        if (isinstance(node, ast.Name) and node.id not in local and node.id in callables
                and id(node) not in (called if callables[node.id] == "jit" else placed)):
            return (f"line {node.lineno}: {node.id} may only be "
                    + ("called" if callables[node.id] == "jit" else "used as `name.attribute` or called") + " here")
        if node is not fn and isinstance(node, (_BANNED + (ast.FunctionDef,))):
            return f"line {node.lineno}: {type(node).__name__} is not allowed inside a graded Triton kernel"
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            return f"line {node.lineno}: attribute {node.attr!r}: names starting with '_' are not allowed"
        if isinstance(node, ast.Name):
            if node.id.startswith("_") and node.id not in local:
                return f"line {node.lineno}: name {node.id!r}: names starting with '_' are not allowed"
            if isinstance(node.ctx, ast.Load) and node.id not in local and node.id not in known:
                return (f"line {node.lineno}: {fn.name} uses {node.id!r}, which is not a parameter, a local name, "
                        f"a jit function or constant of this cell, an imported Triton module, or one of "
                        f"{', '.join(sorted(ALLOWED_BUILTINS - {'True', 'False', 'None'}))}")
        if isinstance(node, ast.keyword) and node.arg is None:
            return f"line {node.value.lineno}: `**` arguments are not allowed inside a graded Triton kernel"
    return ""


def _parse(source: str) -> tuple:
    if not isinstance(source, str) or not source.strip():
        return None, "the submission is empty"
    if len(source) > MAX_SOURCE_CHARS:
        return None, f"the source is {len(source)} characters; a Triton kernel fits in {MAX_SOURCE_CHARS}"
    try:
        return ast.parse(source), ""
    except SyntaxError as exc:
        return None, f"line {exc.lineno}: Python cannot read this ({exc.msg})"
    except (MemoryError, RecursionError, ValueError):
        return None, "the source nests too deeply for Python to read"


def check_source(source: str) -> str:
    """'' when ``source`` keeps to what a graded Triton cell may hold; else what is not allowed, and where."""
    tree, problem = _parse(source)
    if problem:
        return problem
    imports, problem = _imports(tree)
    if problem:
        return problem
    jits, consts, problem = _module_names(tree, imports)
    if problem:
        return problem
    if not jits:
        return "no @triton.jit function found. " + _WHAT
    known = set(imports) | set(jits) | set(consts) | ALLOWED_BUILTINS
    callables = dict.fromkeys(imports, "import") | dict.fromkeys(jits, "jit")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            problem = _function_problem(node, known, callables)
            if problem:
                return problem
    return ""


def kernel_parameters(source: str, kernel: str) -> list | None:
    """[(name, is_constexpr, has_default)] of the jit function ``kernel``, or None where there is none."""
    tree, _ = _parse(source)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == kernel:
            args = node.args.args
            defaults = [None] * (len(args) - len(node.args.defaults)) + list(node.args.defaults)
            return [(a.arg, isinstance(a.annotation, ast.Attribute) and a.annotation.attr == "constexpr",
                     d is not None) for a, d in zip(args, defaults)]
    return None


def compare_params(ex, source: str, launch: dict | None = None) -> str:
    """'' when the jit function ``ex.kernel`` takes the spec's parameters in order, then constexprs that LAUNCH
    (or a literal default) sets; else what differs, with the signature the exercise expects."""
    params = kernel_parameters(source, ex.kernel)
    want = ", ".join([p.name for p in ex.kernel_params]
                     + [f"{k}: tl.constexpr" for k in ex.launch_defaults if k not in ("num_warps", "num_stages")])
    if params is None:
        return f"there is no @triton.jit function named {ex.kernel!r}. The exercise expects: def {ex.kernel}({want})"
    plain = [p for p in params if not p[1]]
    expected = [p.name for p in ex.kernel_params]
    if len(plain) != len(expected) or any(p[1] for p in params[:len(expected)]):
        got = ", ".join(n for n, _, _ in plain) or "none"
        return (f"{ex.kernel} should take {len(expected)} runtime parameters ({', '.join(expected)}) before its "
                f"tl.constexpr ones; it takes {len(plain)} ({got}). The exercise expects: def {ex.kernel}({want})")
    cfg = dict(ex.launch_defaults, **(launch or {}))
    for name, _, has_default in params[len(expected):]:
        if name not in cfg and not has_default:
            return (f"{ex.kernel}'s constexpr {name!r} has no value: LAUNCH sets "
                    f"{', '.join(k for k in cfg if k not in ('num_warps', 'num_stages')) or 'nothing'}; "
                    f"give {name} a default or use one of those names")
    return ""


def launch_from_python(source: str) -> dict | None:
    """The literal dict the cell assigns to ``LAUNCH`` at module level, or None (read with ast, never run)."""
    from .launchcfg import parse_launch_cell
    return parse_launch_cell(source)


def _resolve(root, attrs):
    obj = root
    for a in attrs:
        obj = getattr(obj, a)
        yield a, obj


def _allowed_object(obj) -> bool:
    import types
    if isinstance(obj, types.ModuleType):
        name = obj.__name__
        return name == "math" or name == "triton" or name.startswith("triton.language")
    if isinstance(obj, (int, float, bool, str, type(None))):
        return True
    module = getattr(obj, "__module__", None) or getattr(type(obj), "__module__", "") or ""
    if module == "math":
        return True
    import triton
    if obj in (triton.cdiv, triton.next_power_of_2, triton.jit):
        return True
    return module.startswith("triton.language") or type(obj).__module__.startswith("triton.language")


def resolve_problem(source: str) -> str:
    """Every imported name and every attribute chain on one, resolved on the real modules (in the compile child,
    where Triton is imported and before the submission runs): '' when each reaches only Triton's language,
    ``triton.cdiv``/``next_power_of_2``/``jit`` or ``math``; else the first that reaches something else."""
    import importlib
    problem = check_source(source)
    if problem:
        return problem
    tree = ast.parse(source)
    imports, _ = _imports(tree)
    roots = {}
    for alias, target in imports.items():
        mod, _, attr = target.partition(":")
        try:
            obj = importlib.import_module(mod)
            if attr:  # a submodule (``from triton.language.extra import libdevice``) or a name in the module
                obj = getattr(obj, attr) if hasattr(obj, attr) else importlib.import_module(f"{mod}.{attr}")
        except (ImportError, AttributeError) as exc:
            return f"{alias}: cannot import {target.replace(':', '.')} ({exc})"
        if not _allowed_object(obj):
            return f"{alias} ({target.replace(':', '.')}) is not part of Triton's language"
        roots[alias] = obj
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, base = [], node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        if not (isinstance(base, ast.Name) and base.id in roots):
            continue
        try:
            for attr, obj in _resolve(roots[base.id], reversed(chain)):
                if not _allowed_object(obj):
                    return (f"line {node.lineno}: {base.id}.{'.'.join(reversed(chain))} reaches {attr!r}, which is not "
                            "part of Triton's language; a graded kernel uses triton.language (tl.*) and math only")
        except AttributeError:
            return f"line {node.lineno}: {base.id}.{'.'.join(reversed(chain))} does not exist"
    return ""


def spec_problem(ex) -> tuple:
    """(field, problem) for an `Exercise` whose ``language`` or Triton fields do not fit; ('', '') when they do."""
    if ex.language not in ("cuda", "triton"):
        return "language", f"should be 'cuda' or 'triton'; got {ex.language!r}"
    if ex.language != "triton":
        return "", ""
    from .techniques import CHECKS
    checks = [CHECKS[t] for t in tuple(ex.techniques) + tuple(ex.required_techniques) if t in CHECKS]
    why = ("source_file should be a .py file" if not str(ex.source_file).endswith(".py") else
           "launch_defaults needs 'num_warps' (Triton's warps per program)" if "num_warps" not in ex.launch_defaults
           else "Constant params are CUDA's __constant__ symbols" if ex.constants else
           "a pipeline runs CUDA kernels" if ex.pipeline is not None else
           "arch pins a CUDA target" if ex.arch else
           "counter checks profile CUDA modules" if any(c.where == "counters" for c in checks) else "")
    if why:
        return "language", f"a Triton exercise cannot have this: {why}"
    if not isinstance(ex.triton_types, dict) or any(p not in {q.name for q in ex.arrays} for p in ex.triton_types):
        return "triton_types", "should map array param names to Triton element types such as 'bf16'"
    return "", ""
