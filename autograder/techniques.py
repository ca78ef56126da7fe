"""Technique checks: does a student's kernel use the technique its exercise teaches?

A spec names checks in ``techniques`` (a failure withholds the exercise's speed points: the kernel is right,
so its correctness points stand) or in ``required_techniques`` (a failure fails the exercise, as
``required_sass`` always has). Each check is evaluated where its evidence is:

* ``"sass"``: from the graded kernel's machine code (nvdisasm, no GPU) and ptxas's resource report, in the
  compile child. Only the graded kernel's own function is read, with the device functions it calls, never
  the other kernels of the module.
* ``"log"``: from the compiler's own log (ptxas's notes in NVRTC's program log), in the compile child: what
  ptxas did to the graded kernel, e.g. serializing its wgmma instructions. No disassembler needed.
* ``"counters"``: from Nsight Compute counters, read once every size case has passed, by profiling the
  student's kernel in a grader-owned process under ncu (autograder/counters.py; `counter_verdict` turns the
  counters into a verdict). Where ncu is missing or may not read the counters they give a note, never a
  failure, so they may not be required.

Spellings are the ones nvdisasm prints for sm_75, sm_80 and sm_90 (tests/autograder/test_techniques.py
compiles small kernels for each and checks both outcomes).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable

from .spec import did_you_mean

__all__ = ["Check", "Verdict", "CHECKS", "kernel_instructions", "evaluate",
           "counter_verdict", "validate", "withheld_reason"]

SHOWN = 4   # offending SASS lines quoted in a message

@dataclasses.dataclass(frozen=True)
class Verdict:
    """One check on one kernel: ``passed`` None means not checked (``message`` says why)."""

    name: str
    passed: bool | None
    message: str = ""
    required: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Check:
    """A named technique: a one-line description for students and how it is decided.

    ``sass(instructions, resources, arch, kernel)`` returns ``''`` when the technique is there, else the
    failure message; None when it cannot be decided on this arch (with ``unknown`` saying why).
    ``log(text, arch, kernel)`` the same from the compiler's log. ``counters(metrics)`` does the same from a
    dict of ncu metric values (``metrics`` names them).
    """

    name: str
    description: str
    where: str                         # "sass", "log" or "counters"
    sass: Callable | None = None
    log: Callable | None = None
    metrics: tuple = ()
    counters: Callable | None = None
    min_cc: tuple = (7, 0)             # the oldest GPU the technique exists on
    unknown: str = ""


# -- the graded kernel's instructions ---------------------------------------------------------------

_SECTION = re.compile(r"\.text\.(\w+)")


def _mnemonic(line: str) -> str | None:
    """The opcode with its modifiers (``LDG.E.128``) of an instruction line, through course's one parser."""
    from course import sass_opcodes
    ops = sass_opcodes(".text._\n" + line, modifiers=True).get("_")
    return next(iter(ops)) if ops else None


def _sections(sass: str) -> tuple:
    """({function: [(mnemonic, line)]}, {function: is a kernel entry})."""
    funcs, entry, current = {}, {}, None
    for line in sass.splitlines():
        op = _mnemonic(line) if current is not None else None
        if op is not None:
            funcs[current].append((op, " ".join(line.split())))  # "/*0080*/ LDG.E R2, [R2.64] ;"
            continue
        m = _SECTION.search(line)
        if m:
            current = m.group(1)
            funcs.setdefault(current, [])
            entry.setdefault(current, False)
        elif current is not None and "STO_CUDA_ENTRY" in line:
            entry[current] = True
    return funcs, entry


def kernel_instructions(sass: str, kernel: str) -> list | None:
    """[(mnemonic, line)] of ``kernel`` in a disassembly, with the device functions it calls; None when the
    disassembly has no such kernel. ``kernel`` is the C name (an extern "C" symbol, or found in a mangled one)."""
    funcs, entry = _sections(sass)
    name = kernel if kernel in funcs else next(
        (f for f in funcs if entry.get(f) and f.startswith(f"_Z{len(kernel)}{kernel}")), None)
    if name is None:
        return None
    seen, todo, out = {name}, [name], []
    while todo:  # a kernel's own code, then each device function a CALL of it names
        f = todo.pop(0)
        out += funcs[f]
        for op, line in funcs[f]:
            if op.startswith("CALL"):
                for callee in funcs:
                    if callee not in seen and not entry.get(callee) and re.search(rf"\b{re.escape(callee)}\b", line):
                        seen.add(callee)
                        todo.append(callee)
    return out


def _base(op: str) -> str:
    return op.split(".", 1)[0]


def _quote(lines, total: int | None = None) -> str:
    total = len(lines) if total is None else total
    shown = "\n".join(f"    {ln}" for ln in lines[:SHOWN])
    more = f"\n    ... and {total - SHOWN} more" if total > SHOWN else ""
    return shown + more


def _found(text: str) -> str:
    """``text`` closed with a full stop, unless it ends with quoted SASS lines (a stop there reads as code)."""
    return text if text.rsplit("\n", 1)[-1].startswith("    ") else text + "."


# -- the checks -------------------------------------------------------------------------------------

def _no_local_memory(instrs, res, arch, kernel) -> str:
    local = [line for op, line in instrs if _base(op) in ("LDL", "STL")]
    spills = res is not None and bool(res.spill_stores or res.spill_loads)
    if not local and not spills:
        return ""
    seen = []
    if local:
        seen.append(f"its machine code (SASS, {arch}) has {len(local)} local-memory instruction"
                    f"{'s' * (len(local) != 1)} (LDL loads, STL stores), for example:\n{_quote(local)}")
    if spills:
        seen.append(f"ptxas reports register spills ({res.spill_stores} bytes stored, {res.spill_loads} bytes "
                    f"loaded per thread)")
    return (f"Expected: {kernel} keeps every value in registers or shared memory, with no local memory (a per-thread "
            f"stack in DRAM, behind the caches). Found: {_found('; and '.join(seen))}\nTo try: an array indexed with a "
            "value known only at run time lives in local memory, so index it with constants (fixed-count loops with "
            "#pragma unroll) or move it to shared memory; spills mean too many values live at once: keep fewer per "
            "thread, or relax a tight __launch_bounds__.")


_VECTOR_LOADS = ("LDG", "LD", "LDGSTS")


def _vector_loads_128(instrs, res, arch, kernel) -> str:
    def wide(op):
        mods = op.split(".")[1:]
        return _base(op) in _VECTOR_LOADS and any(m in ("128", "256", "ENL2") for m in mods)
    if any(wide(op) for op, _ in instrs):
        return ""
    loads = [line for op, line in instrs if _base(op) in _VECTOR_LOADS]
    found = (f"its machine code (SASS, {arch}) reads global memory with narrower loads only, for example:\n"
             f"{_quote(loads)}" if loads else f"its machine code (SASS, {arch}) has no global loads at all")
    return (f"Expected: {kernel} reads global memory with 128-bit loads (a float4 or int4 per thread and "
            f"instruction: LDG.E.128 in SASS). Found: {_found(found)}\nTo try: read through a vector pointer, "
            "reinterpret_cast<const float4*>(x)[i], where the address is a multiple of 16 bytes, and handle the "
            "elements left over at the end with scalar loads; the compiler does not merge four float loads into one.")


_TENSOR = re.compile(r"(HMMA|IMMA|BMMA|DMMA|[HIQB]GMMA|UTC\w*MMA)")


def _tensor_cores(instrs, res, arch, kernel) -> str:
    if any(_TENSOR.fullmatch(_base(op)) for op, _ in instrs):
        return ""
    math = [line for op, line in instrs if _base(op) in ("FFMA", "FMUL", "FADD", "HFMA2", "HMUL2", "DFMA", "IDP")
            and "MMA" not in op]
    found = (f"no tensor-core instruction (HMMA, IMMA, HGMMA...) in its machine code (SASS, {arch}); the math "
             f"is done on the CUDA cores instead, for example:\n{_quote(math)}" if math else
             f"no tensor-core instruction (HMMA, IMMA, HGMMA...) in its machine code (SASS, {arch})")
    return (f"Expected: {kernel} multiplies on the tensor cores. Found: {_found(found)}\nTo try: use WMMA fragments "
            "(mma.h: wmma::mma_sync) or mma.sync PTX as the chapter shows, and check that that path is really "
            "compiled in and reached, not left behind an #if or a branch the compiler removed.")


_GENERIC = ("LD", "ST", "ATOM", "RED")


def _on_sm90(arch) -> bool:
    """Whether ``arch`` (sm_90 or sm_90a) is the GPU whose SASS spellings the sm_90 checks know."""
    from course import arch_cc
    return arch_cc(arch) == (9, 0)


def _distributed_shared(instrs, res, arch, kernel) -> str | None:
    if not _on_sm90(arch):
        return None
    # sm_90 has no opcode of its own for distributed shared memory: mapa puts the block's rank into the top
    # byte of a shared-window address (PRMT/UPRMT with selector 0x654, the window from SR_SWINHI), and the
    # access is a generic load, store or atomic on it. A kernel without clusters builds neither.
    mapa = any(_base(op) in ("PRMT", "UPRMT") and re.search(r",\s*0x654\s*,", line) for op, line in instrs)
    window = any("SR_SWINHI" in line for _, line in instrs)
    generic = [line for op, line in instrs if _base(op) in _GENERIC]
    if mapa and window and generic:
        return ""
    shared = [line for op, line in instrs if _base(op) in ("LDS", "STS", "ATOMS", "REDS")]
    found = ("its machine code (SASS, sm_90) never reaches another block's shared memory (no address mapped to "
             "a block of the cluster: mapa, PRMT ..., 0x654 in SASS, used by a generic LD, ST, ATOM or RED)")
    if shared:
        found += f"; its shared-memory accesses are all to its own block's, for example:\n{_quote(shared)}"
    return (f"Expected: {kernel} uses distributed shared memory, the shared memory of the other blocks of its "
            f"thread-block cluster. Found: {_found(found)}\nTo try: launch with a cluster (__cluster_dims__), get the "
            "owner's copy with cluster.map_shared_rank(bins, owner) (cooperative_groups::this_cluster()), and "
            "add into it with atomicAdd through that pointer, between cluster.sync() calls.")


_GMMA = re.compile(r"[HIQB]GMMA")   # the warpgroup forms among _TENSOR's


def _wgmma(instrs, res, arch, kernel) -> str | None:
    if not _on_sm90(arch):
        return None
    if any(_GMMA.fullmatch(_base(op)) for op, _ in instrs):
        return ""
    mma = [line for op, line in instrs if _base(op) in ("HMMA", "IMMA", "DMMA", "BMMA")]
    math = [line for op, line in instrs if _base(op) in ("FFMA", "FMUL", "HFMA2", "DFMA") and "MMA" not in op]
    if mma:
        found = (f"its machine code (SASS, {arch}) multiplies with the warp-level tensor-core instruction of older "
                 f"GPUs (HMMA: mma.sync or WMMA, one warp and registers only), for example:\n{_quote(mma)}")
    elif math:
        found = (f"no tensor-core instruction in its machine code (SASS, {arch}); the math runs on the CUDA cores, "
                 f"for example:\n{_quote(math)}")
    else:
        found = f"no warpgroup MMA (HGMMA) in its machine code (SASS, {arch})"
    return (f"Expected: {kernel} multiplies with Hopper's warpgroup MMA (wgmma.mma_async: HGMMA in SASS): the four "
            f"warps of a warpgroup issue one tensor-core operation that reads its tiles from shared memory. Found: "
            f"{_found(found)}\nTo try: issue wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 from all 128 threads "
            "of a warpgroup, with shared-memory descriptors of the A and B tiles (64-bit values the kernel builds "
            "from each tile's shared address, as chapter 13's desc_sw128 does; course.wgmma.descriptor shows the "
            "bits), between "
            "wgmma.fence.sync.aligned and wgmma.commit_group / wgmma.wait_group, as chapter 13 does; check that the "
            "path is compiled in (the exercise compiles for sm_90a) and reached.")


def _tma_load(op) -> bool:
    # UTMALDG: a tensor copy global -> shared; UBLKCP.S.G: a bulk copy into shared (UBLKCP.G.S is a store)
    return _base(op) == "UTMALDG" or (_base(op) == "UBLKCP" and op.split(".")[1:2] == ["S"])


def _tma(instrs, res, arch, kernel) -> str | None:
    if not _on_sm90(arch):
        return None
    if any(_tma_load(op) for op, _ in instrs):
        return ""
    stores = [line for op, line in instrs if _base(op) in ("UTMASTG", "UBLKCP")]
    loads = [line for op, line in instrs if _base(op) in ("LDG", "LDGSTS", "LD")]
    found = f"no TMA load (UTMALDG, or a bulk copy UBLKCP.S.G) in its machine code (SASS, {arch})"
    if stores:
        found += f"; its TMA copies are stores to global memory, which load nothing:\n{_quote(stores)}"
    elif loads:
        found += f"; its threads load global memory themselves, for example:\n{_quote(loads)}"
    return (f"Expected: {kernel} loads its tiles with the Tensor Memory Accelerator: one thread asks the copy engine "
            f"for a whole box through the tensor map (cp.async.bulk.tensor: UTMALDG in SASS). Found: {_found(found)}"
            "\nTo try: from one thread, `cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes "
            "[smem], [map, {col, row}], [bar];` with the address of the const __grid_constant__ map parameter, after "
            "`mbarrier.arrive.expect_tx` of the box's bytes on that barrier; the other threads wait on the barrier's "
            "phase (mbarrier.try_wait.parity) before reading the tile.")


_SERIALIZED = re.compile(r"^ptxas\b.*Potential Performance Loss: wgmma\.mma_async instructions are serialized due "
                         r"to (.*?)(?: in the function '([^'\n]*)')?\.?[ \t]*$")
# the module's kernels, from the PTX the compiler wrote: never from the log, whose front-end diagnostics quote
# text the student chose (a `#warning Compiling entry function '_Z6helperv'` would otherwise pass for ptxas)
_PTX_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$.]+)", re.M)


def ptx_entries(ptx: str) -> frozenset:
    """The names of the kernels (``.entry``) a module's PTX defines."""
    return frozenset(_PTX_ENTRY.findall(ptx or ""))
_SERIALIZED_ADVICE = (
    ("crossing function boundary", "a wgmma and its commit and wait must sit in one function: declare every helper "
     "that issues wgmma, or touches the accumulators in between, __forceinline__ (a call to a __noinline__ one, "
     "or one the compiler did not inline, ends the pipeline)"),
    ("Extern calls", "a call to a function outside the kernel (printf, assert, a __noinline__ helper) in a kernel "
     "with wgmma serializes them all: take it out of the kernel, or out of the main loop at least"),
    ("insufficient register resources", "from a wgmma to its wait_group its accumulators are the tensor core's and "
     "must stay in registers: do not read, write or copy them in between (initialise before the first "
     "wgmma.fence, read after wgmma.wait_group), and keep the accumulator tile within what each thread may hold "
     "(__launch_bounds__, and setmaxnreg.inc for the consumer warpgroups)"),
    ("defining accumulator registers", "between wgmma.fence and wgmma.wait_group nothing but wgmma may write its "
     "accumulators: zero them before the fence (or use the scale-d 0 form), and scale or store them after the "
     "wait"),
    ("defining input registers", "a wgmma that takes A from registers needs them unchanged until its wait_group: "
     "load the next fragment into other registers, or wait first"),
    ("ill formed pipeline stage", "every wgmma.mma_async needs wgmma.fence.sync.aligned before it and "
     "wgmma.commit_group / wgmma.wait_group after it, on the same path for all 128 threads of the warpgroup"),
)


def _no_wgmma_serialization(log, arch, kernel, entries=frozenset()) -> str:
    """Decided from ptxas's notes in NVRTC's log (compiled with -Xptxas=-v, as every grading is): ptxas says
    "(C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to <why> in the
    function '<name>'" for the kernel itself, or for a device function it calls that was not inlined. A note
    about another kernel of the module (``entries``, from its PTX) is not the graded kernel's; with no PTX to
    tell them apart, every note counts."""
    found = []   # (why, the log's line) for the graded kernel, or a device function (not another kernel)
    for line in log.splitlines():
        m = _SERIALIZED.search(line)
        fn = m and m.group(2)
        if m and (not fn or fn == kernel or fn.startswith(f"_Z{len(kernel)}{kernel}") or fn not in entries):
            found.append((m.group(1).strip(), " ".join(line.split())))
    if not found:
        return ""
    lines = [line for _, line in found]
    tips = [tip for key, tip in _SERIALIZED_ADVICE if any(key in why for why, _ in found)]
    tip = "; and ".join(tips) if tips else (
        "ptxas serializes wgmma when its pipeline is broken: keep each wgmma, its fence, commit and wait in one "
        "function on one path, and leave the accumulators alone between the wgmma and its wait")
    return (f"Expected: {kernel}'s wgmma instructions run as a pipeline, each issued while the ones before it are "
            f"still computing. Found: ptxas serialized them (each waits for the one before), as its log says:"
            f"\n{_quote(lines)}\nTo try: {tip}.")


_CONFLICTS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
              "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
_SHARED_INSTS = ("smsp__sass_inst_executed_op_shared_ld.sum", "smsp__sass_inst_executed_op_shared_st.sum")
# extra wavefronts per shared-memory instruction tolerated: the profiler counts a few on conflict-free code,
# and one 2-way conflict per instruction already reads 1.0
CONFLICTS_PER_INSTRUCTION = 0.1


def _no_bank_conflicts(metrics: dict) -> str:
    conflicts = sum(float(metrics.get(m) or 0.0) for m in _CONFLICTS)
    insts = sum(float(metrics.get(m) or 0.0) for m in _SHARED_INSTS)
    if insts <= 0 or conflicts <= CONFLICTS_PER_INSTRUCTION * insts:
        return ""
    return (f"Expected: shared-memory accesses without bank conflicts (one wavefront per instruction). Found: "
            f"{conflicts:,.0f} extra wavefronts over {insts:,.0f} shared-memory instructions "
            f"({conflicts / insts:.1f} per instruction; a 32-way conflict costs 31).\nTo try: pad a tile's rows by "
            "one element ([32][33]) or swizzle the column index (col ^ row), so the 32 lanes of a warp reading a "
            "column land in 32 different banks.")


CHECKS = {c.name: c for c in (
    Check("no_local_memory", "no local memory: no LDL/STL instructions in the kernel's SASS and no register spills",
          "sass", sass=_no_local_memory),
    Check("vector_loads_128", "128-bit global loads (float4/int4: LDG.E.128 in SASS)", "sass",
          sass=_vector_loads_128),
    Check("tensor_cores", "tensor-core instructions in the kernel's SASS (HMMA, IMMA, HGMMA and their kin)", "sass",
          sass=_tensor_cores),
    Check("distributed_shared", "distributed shared memory: accesses to another cluster block's shared memory "
          "(cluster.map_shared_rank)", "sass", sass=_distributed_shared, min_cc=(9, 0),
          unknown="its SASS form is known for sm_90 only"),
    Check("wgmma", "Hopper's warpgroup MMA (wgmma.mma_async: HGMMA in the kernel's SASS)", "sass", sass=_wgmma,
          min_cc=(9, 0), unknown="its SASS form is known for sm_90 (sm_90a) only"),
    Check("tma", "tiles loaded by the Tensor Memory Accelerator (cp.async.bulk.tensor: UTMALDG, or a bulk copy "
          "UBLKCP, in the kernel's SASS; TMA stores alone do not count)", "sass", sass=_tma, min_cc=(9, 0),
          unknown="its SASS form is known for sm_90 (sm_90a) only"),
    Check("no_wgmma_serialization", "wgmma instructions that ptxas did not serialize (its 'Potential Performance "
          "Loss: wgmma.mma_async instructions are serialized' note, in the compile log)", "log",
          log=_no_wgmma_serialization, min_cc=(9, 0)),
    Check("no_bank_conflicts", "no shared-memory bank conflicts (Nsight Compute's l1tex bank-conflict counters)",
          "counters", metrics=_CONFLICTS + _SHARED_INSTS, counters=_no_bank_conflicts),
)}


def _opcodes_check(ops) -> Check:
    """``required_sass``: each opcode must appear in the kernel's SASS (the message of its first release)."""
    def run(instrs, res, arch, kernel):
        missing = [o for o in ops if not any(re.search(rf"\b{re.escape(o)}\b", line) for _, line in instrs)]
        if not missing:
            return ""
        return (f"This exercise must use {', '.join(ops)} instructions, and the machine code (SASS) of your kernel "
                f"has no {', '.join(missing)}. Check that the intended path (e.g. WMMA / mma.sync for HMMA) is "
                "really compiled in and not behind a disabled branch.")
    return Check("required_sass", f"SASS opcodes {', '.join(ops)}", "sass", sass=run)


# -- evaluation and spec validation ------------------------------------------------------------------

def evaluate(ex, program) -> list:
    """The `Verdict` of every SASS and log check ``ex`` names, for the student's compiled ``program`` (compile
    child). Counter checks are not among them: autograder/counters.py decides those once every size has passed."""
    wanted = [(CHECKS[n], False) for n in ex.techniques] + [(CHECKS[n], True) for n in ex.required_techniques]
    wanted = [(c, required) for c, required in wanted if c.where in ("sass", "log")]
    if ex.required_sass:
        wanted.append((_opcodes_check(tuple(ex.required_sass)), True))
    if not wanted:
        return []
    out, instrs, problem = [], None, ""
    try:
        if any(c.where == "sass" for c, _ in wanted):
            instrs = kernel_instructions(program.sass(), ex.kernel)
            problem = "" if instrs is not None else f"no function {ex.kernel} in the disassembly"
    except (FileNotFoundError, RuntimeError, OSError) as exc:
        problem = f"no SASS to read ({str(exc)[:400]})"
    res = program.resources.get(ex.kernel)
    for check, required in wanted:
        if check.where == "log":   # the compiler's log is there whether or not a disassembler is
            message = check.log(program.log or "", program.arch, ex.kernel, ptx_entries(program.ptx))
            out.append(Verdict(check.name, not message, message, required))
            continue
        if problem:
            out.append(Verdict(check.name, None, f"{check.name} was not checked: {problem}", required))
            continue
        message = check.sass(instrs, res, program.arch, ex.kernel)
        if message is None:
            out.append(Verdict(check.name, None, f"{check.name} was not checked on {program.arch}: {check.unknown}",
                               required))
        else:
            out.append(Verdict(check.name, not message, message, required))
    return out


def counter_verdict(name: str, metrics: dict) -> Verdict:
    """The verdict of counter check ``name`` from ncu metrics measured elsewhere ({metric: value})."""
    check = CHECKS[name]
    missing = [m for m in check.metrics if m not in metrics]
    if missing:
        return Verdict(name, None, f"{name} was not checked: the profile lacks {', '.join(missing)}")
    message = check.counters(metrics)
    return Verdict(name, not message, message)


def _oldest_cc(ex) -> tuple:
    """The oldest GPU that grades ``ex``: its min_cc, or its arch-specific target's (``arch="sm_90a"``: 9.0)."""
    from course import arch_cc
    try:
        return max(tuple(ex.min_cc), arch_cc(ex.arch)) if getattr(ex, "arch", None) else tuple(ex.min_cc)
    except ValueError:   # a malformed arch: tensormaps.validate says what is wrong with it
        return tuple(ex.min_cc)


def validate(ex) -> tuple | None:
    """(field, what is wrong) for the technique fields of an `Exercise`, or None when they are fine."""
    if isinstance(ex.required_sass, str) or not all(isinstance(s, str) for s in ex.required_sass):
        return "required_sass", f"should be a list of SASS opcodes like ['HMMA']; got {ex.required_sass!r}"
    for field in ("techniques", "required_techniques"):
        names = getattr(ex, field)
        if isinstance(names, str) or not isinstance(names, (tuple, list)):
            return field, f"should be a tuple of check names such as ('no_local_memory',); got {names!r}"
        for n in names:
            if n not in CHECKS:
                return field, (f"{n!r} is not a technique check.{did_you_mean(n, CHECKS)} The checks: "
                               f"{', '.join(CHECKS)} (autograder/techniques.py)")
            if CHECKS[n].min_cc > _oldest_cc(ex):
                need = CHECKS[n].min_cc
                return field, f"{n} needs sm_{need[0]}{need[1]} or newer: set min_cc=({need[0]}, {need[1]})"
    both = set(ex.techniques) & set(ex.required_techniques)
    if both:
        return "techniques", f"{', '.join(sorted(both))} is listed in both techniques and required_techniques"
    if ex.techniques and not ex.points.speed:
        return "techniques", ("a failed technique withholds the speed points, and this exercise has none: list the "
                              "check in required_techniques to fail the exercise instead")
    counted = [n for n in ex.required_techniques if CHECKS[n].where == "counters"]
    if counted:
        return "required_techniques", (f"{', '.join(counted)} needs ncu counters, which a grading machine may not "
                                       "let the grader read, so it cannot be required: list it in techniques")
    return None


def withheld_reason(ex, failures, speed=None) -> str:
    """Why the speed points are withheld, from the messages of the failed technique checks."""
    head = (f"Correct at every test size, so the {ex.points.correctness:g} correctness points stand; the "
            f"{ex.points.speed:g} speed points are withheld because this exercise grades how the kernel works, "
            f"and a technique it asks for is missing:")
    timed = (f"\n(Timed anyway: {speed.ratio:.2f}x the reference's speed.)" if speed is not None
             and getattr(speed, "ratio", None) else "")
    return head + "".join(f"\n{m}" for m in failures) + timed
