"""TMA tensor-map params and arch-specific targets: what chapter 13's Hopper kernels need from the grader.

A `TensorMap` param is an array the grader owns exactly as it owns an `In` (role "in": drawn from the secret
seed, guarded, checked unchanged after every run, fresh for every timed launch, handed to the NumPy reference)
or an `Out` (role "out": poisoned before every run, checked). Only the kernel's *argument* differs: the 128-byte
TMA map of that array (`course.tma.tensor_map`), passed by value, which the kernel declares
``const __grid_constant__ TensorMap name``. So `TensorMap(...)` builds a subclass of `In` or of `Out`, and
every path that moves inputs and outputs (buffers, the harness, timing, the counters child) handles it
unchanged; `argument` turns the array into its map where the arguments are made (`device.kernel_args`), from
the very device view the kernel's run uses (the guarded one in the correctness runs), with the box resolved
from that kernel's own launch configuration.

`Exercise.arch` pins an arch-specific target such as ``sm_90a`` (wgmma and setmaxnreg exist only there): both
kernels are compiled for exactly it, and it runs on a GPU of that compute capability only, so any other GPU
skips the exercise as `min_cc` does.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import re
from typing import Any

import numpy as np

from .spec import POISON_DEFAULT, In, Out, SpecError, did_you_mean, names_in

__all__ = ["TensorMap", "TensorMapIn", "TensorMapOut", "MAP_TYPES", "HostMap", "argument", "maps_of",
           "validate", "launch_problem", "param_problem", "ptx_problem", "prepare_driver", "runs_on",
           "arch_requirement"]

MAP_TYPES = ("TensorMap", "CUtensorMap")   # the struct a kernel may declare a map parameter as
# what the skip message says an arch-specific target needs (others get a sentence made from the arch)
# arch -> (what the skip message says it needs, the GPUs to regrade on); others get sentences made from the arch
_ARCH_WORDS = {"sm_90a": ("an sm_90 GPU (H100, H200): wgmma and TMA exist only in the sm_90a target",
                          "an H100 or H200")}


def _build(name, dtype, shape, box=None, swizzle="none", role="in", gen=None, fill=POISON_DEFAULT):
    if role == "in":
        if fill != POISON_DEFAULT:
            raise SpecError(f"TensorMap {name!r}: fill is for role='out' (an output poisoned or filled before "
                            "every run); an input is drawn with gen")
        return TensorMapIn(name, dtype, shape, gen=gen, box=box, swizzle=swizzle)
    if role == "out":
        if gen is not None:
            raise SpecError(f"TensorMap {name!r}: gen is for role='in' (an input drawn with the secret seed); an "
                            "output is poisoned before every run, or filled with fill=")
        return TensorMapOut(name, dtype, shape, fill=fill, box=box, swizzle=swizzle)
    raise SpecError(f"TensorMap {name!r}: role should be 'in' (an input the kernel reads through the map, checked "
                    f"unchanged) or 'out' (an output it writes with TMA stores); got {role!r}")


class _MapKind(type):
    # `TensorMap(...)` returns a TensorMapIn or a TensorMapOut: an In or an Out that is also a TensorMap, so the
    # grader's isinstance(p, In) paths treat it as the array it is; the subclasses construct as dataclasses
    def __call__(cls, *args, **kwargs):
        if cls is not TensorMap:
            return super().__call__(*args, **kwargs)
        sig = inspect.signature(_build)
        try:
            sig.bind(*args, **kwargs)
        except TypeError as exc:
            bad = next((k for k in kwargs if k not in sig.parameters), "")
            raise SpecError(f"TensorMap: {exc}.{did_you_mean(bad, sig.parameters) if bad else ''} It takes "
                            "TensorMap(name, dtype, shape, box, swizzle='none', role='in', gen=None, fill=...)"
                            ) from None
        return _build(*args, **kwargs)


class TensorMap(metaclass=_MapKind):
    """``TensorMap(name, dtype, shape, box, swizzle="none", role="in", gen=None, fill="poison")``: a 2-D array
    the kernel reaches only through its TMA map, passed by value (``const __grid_constant__ TensorMap name``).

    ``box = (rows, cols)``: the elements one TMA copy moves, each an int or the name of a ``launch_defaults``
    key, read from the launch configuration the kernel runs with (the student's LAUNCH may change it).
    ``swizzle``: one of ``course.tma.SWIZZLES``. ``role``: "in" (an `In`) or "out" (an `Out`).
    """

    def box_for(self, cfg: dict) -> tuple:
        """The box in elements under launch configuration ``cfg``."""
        return tuple(int(cfg[b]) if isinstance(b, str) else int(b) for b in self.box)

    def c_decl(self) -> str:
        """The parameter as the kernel declares it, for messages."""
        return f"const __grid_constant__ TensorMap {self.name}"


@dataclasses.dataclass(frozen=True)
class TensorMapIn(In, TensorMap):
    box: Any = None
    swizzle: str = "none"


@dataclasses.dataclass(frozen=True)
class TensorMapOut(Out, TensorMap):
    box: Any = None
    swizzle: str = "none"


def maps_of(ex) -> list:
    return [p for p in ex.params if isinstance(p, TensorMap)]


# -- the kernel argument -------------------------------------------------------------------------------

class HostMap(np.ndarray):
    """The CPU tier's stand-in for a map (no driver to encode one): 128 zero bytes of `course.tma.map_dtype`,
    carrying the array it describes (``.array``, the same buffer the grader checks), its ``.box`` and
    ``.swizzle``, so a fake kernel reads and writes the array as a TMA copy would."""

    def __new__(cls, array, box, swizzle):
        from course.tma import map_dtype
        m = np.zeros((), dtype=map_dtype()).view(cls)
        m.array, m.box, m.swizzle = array, tuple(box), swizzle
        return m


def argument(p, array, cfg: dict):
    """The kernel argument of map param ``p`` whose array is ``array`` (the device view the run uses)."""
    box = p.box_for(cfg)
    if isinstance(array, np.ndarray):
        return HostMap(array, box, p.swizzle)
    from course.tma import tensor_map
    return tensor_map(array, box, swizzle=p.swizzle)


def prepare_driver(ex) -> None:
    """Load cuda-python's driver bindings in a run child before its file system closes (the maps are encoded
    by the driver, after confinement); nothing for an exercise without maps."""
    if maps_of(ex):
        from course.tma import load_driver
        load_driver()


# -- arch-specific targets ------------------------------------------------------------------------------

def runs_on(ex, cc) -> bool:
    """Whether a GPU of compute capability ``cc`` can grade ``ex`` (its ``min_cc``, and its ``arch``'s one cc)."""
    from course import arch_runs_on
    arch = getattr(ex, "arch", None)
    return tuple(int(x) for x in cc) >= tuple(ex.min_cc) and (not arch or arch_runs_on(arch, cc))


def arch_requirement(arch: str) -> tuple:
    """(what the target needs, which GPUs to regrade on), for the skip message."""
    from course import arch_cc
    major, minor = arch_cc(arch)
    return _ARCH_WORDS.get(arch, (f"an sm_{major}{minor} GPU: the {arch} target it is compiled for runs on that "
                                  "compute capability only", f"an sm_{major}{minor} GPU"))


# -- spec validation --------------------------------------------------------------------------------------

def validate(ex) -> tuple | None:
    """(field, what is wrong) for ``arch`` and the `TensorMap` params of an `Exercise`, or None."""
    problem = _validate_arch(ex)
    if problem:
        return problem
    for p in maps_of(ex):
        why = _map_problem(ex, p)
        if why:
            return "params", f"TensorMap {p.name!r}: {why}"
    return None


def _validate_arch(ex) -> tuple | None:
    arch = getattr(ex, "arch", None)
    if arch is None:
        return None
    from course import arch_cc, normalize_arch
    try:
        ok = isinstance(arch, str) and normalize_arch(arch) == arch and arch.endswith("a")
    except ValueError:
        ok = False
    if not ok:
        return "arch", (f"should be an arch-specific target such as 'sm_90a' (what wgmma and setmaxnreg need: both "
                        f"kernels are compiled for it, and only a GPU of its compute capability grades the exercise); "
                        f"got {arch!r}. For a minimum GPU without arch-specific instructions, set min_cc instead")
    if tuple(ex.min_cc) > arch_cc(arch):
        need = arch_cc(arch)
        return "min_cc", (f"{tuple(ex.min_cc)} asks for a newer GPU than {arch} runs on (compute capability "
                          f"{need[0]}.{need[1]} only); leave min_cc out, arch decides")
    return None


def _map_problem(ex, p) -> str:
    from course.tma import SWIZZLES, box_problem, data_type
    if ex.pipeline is not None:
        return "the pipeline driver passes arrays, not tensor maps; drop the pipeline or use In/Out"
    shape = p.shape
    if not (isinstance(shape, (tuple, list)) and len(shape) == 2):
        return (f"a map here is 2-D (rows, cols), row-major; got shape {shape!r}. Write it as a pair, e.g. "
                "('m', 'k')")
    try:
        data_type(p.np_dtype)
    except ValueError as exc:
        return str(exc)
    if p.swizzle not in SWIZZLES:
        return (f"swizzle should be one of {', '.join(map(repr, SWIZZLES))}; got {p.swizzle!r}."
                + did_you_mean(p.swizzle, SWIZZLES))
    box = p.box
    if not (isinstance(box, (tuple, list)) and len(box) == 2):
        return (f"box should be (rows, cols): the tile one TMA copy moves, each an int or a launch_defaults key "
                f"such as ('bm', 'bk'); got {box!r}")
    for b in box:
        if isinstance(b, str) and b not in ex.launch_defaults:
            return (f"box names {b!r}, which is not a launch_defaults key.{did_you_mean(b, ex.launch_defaults)} "
                    f"Keys: {', '.join(ex.launch_defaults) or 'none'}")
        if isinstance(b, str) and type(ex.launch_defaults[b]) is not int:
            return f"box names {b!r}, whose launch_defaults value {ex.launch_defaults[b]!r} is not an int"
        if not isinstance(b, str) and type(b) is not int:
            return f"box entries should be ints or launch_defaults keys; got {b!r}"
    why = box_problem(p.box_for(ex.launch_defaults), p.np_dtype.itemsize, p.swizzle)
    if why:
        return f"with launch_defaults {ex.launch_defaults}, {why}"
    return _pitch_problem(ex, p)


def _pitch_problem(ex, p) -> str:
    """TMA reads rows 16-byte aligned: the last dimension times the element size is a multiple of 16 at every
    allowed size, which a size's ``size_multiples`` unit guarantees (public and hidden sizes keep to it)."""
    item = p.np_dtype.itemsize
    need = 16 // math.gcd(16, item)
    last = p.shape[1]
    if isinstance(last, (int, np.integer)):
        if int(last) % need:
            return f"a row of {last} x {item} bytes is not a multiple of 16 bytes, which TMA needs of the row pitch"
        return ""
    if not (isinstance(last, str) and re.fullmatch(r"[A-Za-z_]\w*", last.strip()) and names_in(last) == {last.strip()}):
        return (f"its last dimension {last!r} should be one size name (with size_multiples) or a number, so that "
                "the grader can tell the row pitch is a multiple of 16 bytes at every size, as TMA needs")
    name = last.strip()
    unit = int(ex.size_multiples.get(name, 1) or 1)
    if unit % need:
        return (f"TMA needs a row pitch that is a multiple of 16 bytes, and a row of {p.name} is {name} x {item} "
                f"bytes, so {name} must be a multiple of {need} at every size: set size_multiples={{{name!r}: "
                f"{need}}} (or a multiple of {need}; now {unit}), and keep the public sizes and tile to it")
    return ""


def launch_problem(ex, cfg: dict) -> str:
    """'' when every map's box is valid under the student's launch configuration ``cfg``, else why not."""
    from course.tma import box_problem
    for p in maps_of(ex):
        try:
            box = p.box_for(cfg)
        except (KeyError, TypeError, ValueError):
            bad = [b for b in p.box if isinstance(b, str) and not isinstance(cfg.get(b), int)]
            return (f"the TMA box of {p.name} is {p.box!r}, so LAUNCH must give "
                    f"{' and '.join(f'{b} as an int (got {cfg.get(b)!r})' for b in bad) or 'ints'}")
        why = box_problem(box, p.np_dtype.itemsize, p.swizzle)
        if why:
            keys = [b for b in p.box if isinstance(b, str)]
            return (f"the grader encodes the TMA map of {p.name} with the box {tuple(p.box)!r} = {box} from your "
                    f"LAUNCH, and {why}. Choose {' and '.join(keys) or 'the tile'} so that the box fits "
                    f"(the reference uses {p.box_for(ex.launch_defaults)}).")
    return ""


# -- the signature check ------------------------------------------------------------------------------------

def param_problem(i: int, p, theirs, source: str, expected: str) -> str:
    """'' when parameter ``i`` (a course.source Param) declares map param ``p`` the way a TMA copy needs it."""
    want = p.c_decl()
    struct = "struct alignas(64) TensorMap { unsigned long long opaque[16]; };"
    words = [w for w in theirs.ctype.split() if w != "__grid_constant__"]
    if theirs.pointer or "&" in theirs.decl or len(words) != 1 or words[0] not in MAP_TYPES:
        return (f"parameter {i} ({theirs.describe()}) should be the TMA map of {p.name}, passed by value: `{want}`, "
                f"with `{struct}` declared above the kernel. The grader encodes the map of its {p.np_dtype.name} "
                f"array and your kernel reads {p.name} only through TMA copies; expected ({expected})")
    if "__grid_constant__" not in theirs.ctype.split() or not re.search(r"\bconst\b", theirs.decl):
        return (f"parameter {i} is `{theirs.describe()}`; declare it "
                f"`const __grid_constant__ {words[0]} {theirs.name}`. "
                "Without __grid_constant__ (which needs const) the kernel copies the 128-byte map into local memory, "
                "and a TMA copy given that copy's address faults; with it, &" + theirs.name + " is the map the "
                f"grader passed; expected ({expected})")
    if words[0] == "TensorMap" and not _aligned_struct(source):
        return (f"the struct TensorMap of parameter {i} must be 64-byte aligned, as the TMA reads maps: declare it "
                f"`{struct}`")
    return ""


def ptx_problem(ex, ptx: str) -> str:
    """'' when every map parameter of ``ex.kernel`` compiled to exactly the 128 bytes, 64-byte aligned, that the
    grader passes. Decided from the PTX the compiler wrote, after the source's own spelling passed
    `param_problem`: a struct of another size under the same name (a typedef) would make the driver copy that
    many bytes from the grader's process into the kernel's parameters."""
    maps = [(i, p) for i, p in enumerate(ex.kernel_params) if isinstance(p, TensorMap)]
    entry = re.search(rf"\.entry\s+{re.escape(ex.kernel)}\s*\(([^)]*)\)", ptx or "") if maps else None
    for i, p in maps if entry else ():
        m = re.search(rf"\.param\s+(?:\.align\s+(\d+)\s+)?\.(\w+)\s+{re.escape(ex.kernel)}_param_{i}\b(?:\[(\d+)\])?",
                      entry.group(1))
        align, size = (int(m.group(1) or 0), int(m.group(3) or 0)) if m else (0, 0)
        if align < 64 or size != 128:
            return (f"parameter {i} ({p.name}) compiled to {size or 'a scalar of'} bytes aligned to {align}; a TMA map "
                    f"is exactly 128 bytes aligned to 64, which is what the grader passes. Declare "
                    f"`struct alignas(64) TensorMap {{ unsigned long long opaque[16]; }};` and the parameter as "
                    f"`const __grid_constant__ TensorMap {p.name}`.")
    return ""


_ALIGN64 = re.compile(r"\b(?:alignas|__align__)\s*\(\s*64\s*\)")


def _aligned_struct(source: str) -> bool:
    """Whether every definition of ``struct TensorMap {`` in ``source`` is 64-byte aligned; True when the source
    defines none here (a typedef elsewhere is the compiler's to check)."""
    from course.source import strip_comments
    src = strip_comments(source)
    found, done = True, 0
    for m in re.finditer(r"\bTensorMap\s*\{", src):
        # the declaration's head: back to the previous ; { or }, never before the last match (linear overall)
        start = max(src.rfind(c, done, m.start()) for c in ";{}") + 1
        head = src[max(start, done):m.start()]
        done = m.end()
        if re.search(r"\bstruct\b", head):
            found = found and bool(_ALIGN64.search(head))
    return found
