"""The compile child's work: NVRTC on the student's source (and the reference's), no CUDA context.

Compiling is its own phase in its own child so that it can be confined harder than a run child can:
no CUDA context means an address-space limit works (CUDA reserves hundreds of GiB of virtual memory,
NVRTC does not), and the child sees only the CUDA headers and the Python installation, so no
``#include`` can reach the reference solution, another student's work or a system file. The cubins
travel to the run children inside their task: no compile cache is read or written while grading, so
nothing a notebook cell plants on disk is ever loaded.
"""
from __future__ import annotations

import base64
import dataclasses
import re

__all__ = ["COMPILE_MEMORY_BYTES", "COMPILE_CPU_S", "MAX_CUBIN_BYTES", "choose_arch", "compile_task",
           "program_to_dict", "program_from_dict"]

COMPILE_MEMORY_BYTES = 4 << 30  # the course's largest kernel needs well under 1 GiB in NVRTC
COMPILE_CPU_S = 120
MAX_CUBIN_BYTES = 32 << 20
_NO_GPU_ARCH = (7, 5)           # the oldest arch CUDA 13 compiles for


def choose_arch(cc, *sources) -> str:
    """The arch to compile for: the GPU's, or an ``a`` variant a source asks for on its first line
    (``// requires: sm_90a``) when it names this GPU's compute capability. Without a GPU (``cc`` None):
    the arch a source asks for, else sm_75, so compile errors still show."""
    from course import arch_cc, declared_arch
    wanted = [a for a in (declared_arch(s or "") for s in sources) if a]
    if cc is None:
        return wanted[0] if wanted else f"sm_{_NO_GPU_ARCH[0]}{_NO_GPU_ARCH[1]}"
    cc = tuple(int(x) for x in cc)
    for a in wanted:
        if arch_cc(a) == cc:
            return a
    return f"sm_{cc[0]}{cc[1]}"


def program_to_dict(prog) -> dict:
    """A `course.Program` as JSON-safe data (the cubin in base64; the PTX is not needed to run)."""
    return {"source": prog.source, "arch": prog.arch, "options": list(prog.options),
            "cubin": base64.b64encode(prog.cubin).decode(), "log": prog.log, "lowered_names": dict(prog.lowered_names),
            "resources": {k: dataclasses.asdict(v) for k, v in prog.resources.items()}, "name": prog.name}


def program_from_dict(d: dict):
    from course import Program, Resources
    return Program(d["source"], d["arch"], tuple(d["options"]), base64.b64decode(d["cubin"]), "", d["log"],
                   dict(d["lowered_names"]), {k: Resources(**v) for k, v in d["resources"].items()}, d["name"])


def _compile_problem(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, MemoryError) or re.search(r"OUT_OF_MEMORY|out of memory|bad_alloc", text):
        return (f"your source needed more than {COMPILE_MEMORY_BYTES >> 30} GiB of memory to compile (deep template "
                "recursion or a huge unrolled loop?); the compiler was stopped. Simplify the source.\n" + text)
    return text


def compile_task(task: dict) -> dict:
    """Compile ``task["source"]`` (and the reference, unless ``task`` carries its program) for
    ``task["arch"]``; a result dict with the programs as data, or a compile error with a scrubbed log."""
    import course

    from .loader import get_exercise
    from .source_check import scrub_log
    from .techniques import evaluate as evaluate_techniques
    from .tensormaps import ptx_problem
    ex = get_exercise(task["chapter"], task["exercise"])
    arch = task["arch"]
    try:
        student = course.compile_for_arch(task["source"], arch, options=tuple(ex.options), name=f"{ex.name}.cu",
                                          use_cache=False, first_line=int(task.get("first_line") or 1))
    except (course.CompileError, MemoryError) as exc:
        log = getattr(exc, "log", "") or ""
        return {"status": "compile error", "message": scrub_log(_compile_problem(exc)), "log": scrub_log(log)}
    if len(student.cubin) > MAX_CUBIN_BYTES:
        return {"status": "compile error", "message": (
            f"your compiled kernel is {len(student.cubin) >> 20} MiB, more than the {MAX_CUBIN_BYTES >> 20} MiB the "
            "grader loads: a large initialized __device__ or __constant__ array? Compute such data at run time.")}
    if ex.kernel not in student.kernel_names:
        return {"status": "compile error", "message": f"no kernel named {ex.kernel!r} in the compiled source"}
    problem = ptx_problem(ex, student.ptx)
    if problem:
        return {"status": "compile error", "message": problem}
    notes = []
    res = student.resources.get(ex.kernel)
    if res is not None and (res.spill_stores or res.spill_loads):
        notes.append(f"{ex.kernel} spills registers to local memory ({res.summary(explain=False)}); that costs speed.")
    verdicts = evaluate_techniques(ex, student)
    notes += [scrub_log(v.message, cap=1200) for v in verdicts if v.passed is None]
    failed = [v for v in verdicts if v.passed is False and v.required]
    if failed:
        return {"status": "failed", "notes": notes, "message": "\n".join(v.message for v in failed)}
    out = {"status": "ok", "log": scrub_log((student.log or "").strip(), cap=2000), "notes": notes,
           "student": program_to_dict(student), "arch": arch, "techniques": [v.to_dict() for v in verdicts]}
    if task.get("reference_source") is not None:
        ref = course.compile_for_arch(task["reference_source"], arch, options=tuple(ex.options),
                                      name=ex.source_file, use_cache=False)
        out["reference"] = program_to_dict(ref)
    return out
