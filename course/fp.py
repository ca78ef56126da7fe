"""Floating point on the GPU: what NVRTC's math flags change in a kernel's machine code, its time and its error.

Chapter 09 compiles one kernel cell under each set of flags (`FLAG_SETS`), counts the arithmetic instructions
each build holds (`opcode_table`, no GPU needed), and on a GPU times every build and measures how far its
output is from a float64 evaluation of the same formula (`relative_error`). Nothing here touches CUDA at import.
"""
from __future__ import annotations

__all__ = ["FLAG_SETS", "MATH_OPCODES", "opcode_table", "builds", "relative_error"]

# NVRTC's defaults are IEEE-754 single precision where it has a choice: --fmad=true (a*b+c contracted into one
# FMA, rounded once), --ftz=false (subnormals kept), --prec-div=true and --prec-sqrt=true (correctly rounded).
# --use_fast_math is --ftz=true --prec-div=false --prec-sqrt=false --fmad=true plus the intrinsic versions of
# the math library's functions (__expf, __sinf, ...), which trade accuracy far from zero for speed.
FLAG_SETS = {
    "default (IEEE)": (),
    "--fmad=false": ("--fmad=false",),
    "--ftz=true": ("--ftz=true",),
    "--prec-div=false": ("--prec-div=false",),
    "--use_fast_math": ("--use_fast_math",),
}
# what the flags move between: fused and separate multiply-adds, the special-function unit (MUFU.EX2, .SIN,
# .RCP: hardware approximations), the IEEE division's range check (FCHK), and calls into slow paths
MATH_OPCODES = ("FFMA", "FMUL", "FADD", "MUFU", "FCHK", "CALL")


def _count(ops, key: str) -> int:
    return sum(n for op, n in ops.items() if op == key or op.startswith(key + "."))


def _mufu(ops) -> str:
    """The special-function unit's instructions by function ("EX2 4, SIN 4"): which approximations a build uses."""
    return ", ".join(f"{op.split('.', 1)[1]} {n}" for op, n in sorted(ops.items()) if op.startswith("MUFU.")) or "0"


def opcode_table(source: str, kernel: str, flag_sets=None, arch: str = "sm_90", opcodes=MATH_OPCODES) -> list:
    """One row per flag set: the number of each of ``opcodes`` in ``kernel``'s machine code (static count:
    instructions in the code, not executed ones), the MUFU ones by function, and the registers. No GPU needed.

    Raises FileNotFoundError where no disassembler is installed (course.sass_of says which package has one).
    """
    from ._compile import compile_for_arch, sass_of, sass_opcodes
    rows = []
    for name, flags in (flag_sets or FLAG_SETS).items():
        prog = compile_for_arch(source, arch, options=flags, name=f"{kernel}.cu")
        ops = sass_opcodes(sass_of(prog.cubin), modifiers=True).get(kernel)
        if ops is None:
            raise KeyError(f"no kernel {kernel!r} in the compiled source; it has {', '.join(prog.kernel_names)}")
        row = {"flags": name, **{op: _mufu(ops) if op == "MUFU" else _count(ops, op) for op in opcodes}}
        row["registers"] = prog.resources[kernel].registers
        rows.append(row)
    return rows


def builds(source: str, kernel: str, flag_sets=None) -> dict:
    """``{flag set name: course.Kernel}``: ``source`` compiled for this GPU once per flag set."""
    from ._launch import compile as compile_
    return {name: compile_(source, options=flags, name=f"{kernel}.cu").kernel(kernel)
            for name, flags in (flag_sets or FLAG_SETS).items()}


def relative_error(got, want64, scale64) -> dict:
    """How far a float32 result is from the float64 one, per element ``|got - want64| / scale64``, where
    ``scale64`` is the sum of the magnitudes of what was added (so a sum that cancels to near zero is judged by
    the size of its terms, not by its small total). Returns ``max``, ``median`` and ``p99`` of that ratio, and
    ``ulp``: the max as a multiple of float32's unit roundoff, 2^-24."""
    import numpy as np
    err = np.abs(np.asarray(got, dtype=np.float64) - want64) / np.maximum(scale64, np.finfo(np.float64).tiny)
    return {"max": float(err.max()), "median": float(np.median(err)), "p99": float(np.quantile(err, 0.99)),
            "ulp": float(err.max() / 2.0 ** -24)}
