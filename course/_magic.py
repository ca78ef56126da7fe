"""IPython magics: `%%cuda` compiles a cell of CUDA C++, `%%triton --name NAME` runs a cell of Triton kernels
(Python) and keeps its source, `%%gpu` runs a Python cell only with a GPU,
`%%cublas --name EXERCISE` checks (and with a GPU, runs) a cuBLAS call written as data (chapter 10), `%%streams
--name EXERCISE` checks a stream schedule written as data (chapter 03) and the order it gives, without a GPU."""
from __future__ import annotations

import argparse
import shlex

from ._errors import CompileError
from ._sources import CELL_FIRST_LINE, cell_sources

__all__ = ["cell_sources", "CELL_FIRST_LINE", "load_ipython_extension", "cuda_cell", "gpu_cell", "cublas_cell",
           "streams_cell", "triton_cell"]

_parser = argparse.ArgumentParser(prog="%%cuda", add_help=False)
_parser.add_argument("--arch", default=None)
_parser.add_argument("--options", default="")
_parser.add_argument("--name", default=None)
_parser.add_argument("--no-run", action="store_true", dest="no_run")
_parser.add_argument("--requires", default=None)
_parser.add_argument("--quiet", action="store_true")
_parser.add_argument("--include", default="")
_parser.add_argument("--headers", default="")   # header-only libraries outside the CUDA wheels: cute


def _usage_error(msg):
    from IPython.core.error import UsageError
    return UsageError(msg)


def cuda_cell(line: str, cell: str, namespace: dict) -> dict:
    """Compile ``cell``; put its kernels in ``namespace``; return them. Used by the `%%cuda` magic."""
    from ._compile import declared_arch, compile_for_arch, normalize_arch, resource_lines
    from ._env import device_info, gpu_available
    from ._launch import Module
    from ._signature import parse_kernels
    try:
        args = _parser.parse_args(shlex.split(line))
    except SystemExit:
        raise _usage_error("%%cuda takes: [--arch sm_80] [--options \"-DN=4\"] [--name NAME] [--no-run] "
                           "[--requires sm_80] [--quiet] [--include NAME,...] [--headers cute]") from None
    names = list(parse_kernels(cell))
    key = args.name or (names[0] if names else "cell")
    cell_sources[key] = cell
    options = shlex.split(args.options)
    libraries = [n for n in args.headers.split(",") if n]
    if libraries:
        from ._errors import FeatureUnavailable
        from ._headers import library_options
        try:
            options = [*library_options(libraries), *options]
        except ValueError as exc:
            raise _usage_error(f"%%cuda --headers: {exc}") from None
        except FeatureUnavailable as exc:
            print(str(exc))   # an optional extra: one sentence, and the notebook goes on
            return {}
    have_gpu = gpu_available()
    arch = normalize_arch(args.arch) if args.arch else None
    requires = args.requires or declared_arch(cell)   # `// requires: sm_80` says the same as --requires
    if requires and not arch and normalize_arch(requires).endswith("a"):
        arch = normalize_arch(requires)   # an arch-specific target (sm_90a) is the one to build for
    if have_gpu and requires:
        need = normalize_arch(requires)
        if not _arch_satisfied(need):
            newer = "" if need.endswith("a") else " or newer"
            print(f"This cell needs {need}{newer}; this GPU is {device_info().arch}. It was compiled for {need} "
                  "only, to show that it builds; the lesson's fallback path follows.")
            have_gpu, arch = False, need
    target = arch or (device_info().arch if have_gpu else normalize_arch(requires or "sm_80"))
    includes = [n for n in args.include.split(",") if n]
    missing = [n for n in includes if n not in cell_sources]
    if missing:
        raise _usage_error(f"This cell uses the device functions of the cell(s) {', '.join(missing)}: run the "
                           f"`%%cuda --name {missing[0]}` cell above first.")
    prelude = {"prelude": "\n".join(cell_sources[n] for n in includes), "prelude_name": "+".join(includes)} \
        if includes else {}
    try:
        # IPython hands the magic the cell below its %%cuda line, which the notebook numbers line 1
        prog = compile_for_arch(cell, target, options=options, first_line=CELL_FIRST_LINE, **prelude)
    except CompileError as exc:
        if args.no_run:
            print(str(exc))  # an exercise: the grader reports it too; let the notebook go on
            return {}
        raise _usage_error(str(exc)) from None
    if not have_gpu or args.no_run:
        if not args.quiet:
            res = prog.resources
            detail = "; ".join(resource_lines((k, v) for k, v in res.items() if k in names)) or "ok"
            why = "kept for grading" if args.no_run else "running it needs a GPU"
            print(f"Compiled {', '.join(names) or 'the cell'} for {target} with NVRTC ({detail}); {why}.")
        return {}
    module = Module(prog)
    namespace.update(module.kernels)
    if args.name:
        namespace[args.name + "_module"] = module
    if not args.quiet:
        print(module.report())
    return dict(module.kernels)


def gpu_cell(line: str, cell: str, shell) -> None:
    """Run ``cell`` with a GPU; otherwise print one sentence saying what it would have done."""
    import os

    from ._env import gpu_available, no_gpu_message
    if os.environ.get("NBGRADER_EXECUTION") == "autograde":
        # the grader has graded the kernels already, in its own processes: self-checks would only cost time
        print(f"Not run while the instructor autogrades: {line.strip() or 'this cell'}.")
        return
    words = line.split()
    need = words[1] if len(words) > 1 and words[0] == "--requires" else None
    what = " ".join(words[2:] if need else words) or "this cell"
    if not gpu_available():
        print(no_gpu_message(what))
        return
    if need and not _arch_satisfied(need):
        from ._env import device_info
        print(f"Not run: {what} needs {need} (this GPU is {device_info().arch}); the recorded results below "
              "show what it gives.")
        return
    shell.run_cell(cell)


def _arch_satisfied(need: str) -> bool:
    """Whether this GPU runs code built for ``need`` (`course.arch_runs_on`)."""
    from ._compile import arch_runs_on
    from ._env import device_info
    return arch_runs_on(need, device_info().cc)


def _cell_name(line: str, magic: str, known) -> str:
    """The --name of a data cell's magic line, one of ``known``; a usage error saying what to write."""
    try:
        args = shlex.split(line)
        name = args[args.index("--name") + 1]
    except (ValueError, IndexError):
        raise _usage_error(f"{magic} takes --name " + (f"EXERCISE ({', '.join(known)})" if known else "NAME")) from None
    if known is not None and name not in known:
        raise _usage_error(f"{magic}: unknown exercise {name!r}; known: {', '.join(known)}")
    return name


def _data_cell(name: str, cell: str, parse, error: type, check):
    """Record a data cell's source, read it with ``parse`` (never run) and check it; the value, or None once
    the reason it is not usable is printed."""
    cell_sources[name] = cell
    try:
        value = parse(cell, name)
    except error as exc:
        print(f"{name}: {exc}")
        return None
    problem = check(value)
    if problem:
        print(f"{name}: {problem}")
        return None
    return value


def cublas_cell(line: str, cell: str) -> bool:
    """Read the call in ``cell`` as data, check it, and make it once on a small padded case (cuBLAS with a
    GPU, a NumPy model of it without). Prints the verdict; returns whether the call was right."""
    from . import calls
    name = _cell_name(line, "%%cublas", calls.PROBLEMS)
    call = _data_cell(name, cell, calls.parse_call_cell, calls.CallDataError, lambda c: calls.check_call(name, c))
    if call is None:
        return False
    from ._env import gpu_available
    gpu = gpu_available()
    sizes = calls.TRY_SIZES[name]
    verdict = calls.run_case(name, call, sizes, seed=0, backend="cupy" if gpu else "numpy")
    label = ", ".join(f"{k}={v}" for k, v in sizes.items())
    how = "cuBLAS on this GPU" if gpu else "a NumPy model of cublasSgemm (no GPU here; the grader uses cuBLAS)"
    if verdict["status"] == "passed":
        print(f"{name}: right on a small case with padded rows ({label}), made by {how}. "
              "The grader checks more shapes.")
        return True
    print(f"{name}: wrong on a small case with padded rows ({label}), made by {how}: {verdict['message']}")
    return False


def streams_cell(line: str, cell: str) -> bool:
    """Read the schedule in ``cell`` as data, check it and its order (no GPU needed: `course.schedule`), and
    print the verdict and how the host issues the first two chunks; returns whether it is well formed and
    orders every read after its write. The grader runs it on the GPU (`autograder.preview`)."""
    from . import schedule as sched
    name = _cell_name(line, "%%streams", sched.EXERCISES)
    plan = _data_cell(name, cell, sched.parse_schedule_cell, sched.ScheduleError, sched.check_schedule)
    if plan is None:
        return False
    missing = sched.missing_dependencies(plan, plan["chunks"])
    for m in missing:
        print(f"{name}: {sched.dependency_message(m)}")
    if not missing:
        print(f"{name}: well formed, and every read is ordered after its write (checked without a GPU). "
              "autograder.preview runs it on the GPU and measures the overlap.")
    print("The host issues, for the first two chunks:\n" + sched.issue_order(plan, min(2, plan["chunks"])))
    return not missing


def triton_cell(line: str, cell: str, namespace: dict) -> bool:
    """Run a cell of ``@triton.jit`` functions in ``namespace`` and keep its source in `cell_sources` under its
    --name (what `course.triton.lesson_kernels`, the grader's preview and the benchmarks read). Without Triton:
    one sentence, nothing run. Triton needs a function's source text, so the cell is compiled under a name that
    `linecache` serves."""
    import linecache
    name = _cell_name(line, "%%triton", None)
    cell_sources[name] = cell
    from ._triton_env import available
    ok, why = available()
    if not ok:
        print(why)
        return False
    filename = f"<triton cell {name}>"
    linecache.cache[filename] = (len(cell), None, cell.splitlines(True), filename)
    exec(compile(cell, filename, "exec"), namespace)
    return True


def load_ipython_extension(ipython) -> None:
    from IPython.core.magic import register_cell_magic

    @register_cell_magic("cuda")
    def _cuda(line, cell):
        cuda_cell(line, cell, ipython.user_ns)

    @register_cell_magic("triton")
    def _triton(line, cell):
        triton_cell(line, cell, ipython.user_ns)

    @register_cell_magic("gpu")
    def _gpu(line, cell):
        gpu_cell(line, cell, ipython)

    @register_cell_magic("cublas")
    def _cublas(line, cell):
        cublas_cell(line, cell)

    @register_cell_magic("streams")
    def _streams(line, cell):
        streams_cell(line, cell)
