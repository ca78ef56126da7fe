"""Parse the parameter lists of `__global__` functions, so launches can convert and check arguments.

CuPy passes a Python int as a 64-bit value whatever the kernel declares; a kernel taking `int n`
then reads garbage or the wrong half. Knowing the declared types lets `Kernel` convert for the student
and name the parameter when an array of the wrong dtype is passed.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

__all__ = ["Param", "parse_kernels", "CTYPES"]

# C scalar type (after removing const/volatile/restrict) -> NumPy dtype
CTYPES = {
    "bool": np.bool_, "char": np.int8, "signed char": np.int8, "unsigned char": np.uint8,
    "int8_t": np.int8, "uint8_t": np.uint8, "short": np.int16, "unsigned short": np.uint16,
    "int16_t": np.int16, "uint16_t": np.uint16, "int": np.int32, "signed": np.int32,
    "unsigned": np.uint32, "unsigned int": np.uint32, "int32_t": np.int32, "uint32_t": np.uint32,
    "long": np.int64, "unsigned long": np.uint64, "long long": np.int64,
    "unsigned long long": np.uint64, "int64_t": np.int64, "uint64_t": np.uint64,
    "size_t": np.uint64, "ptrdiff_t": np.int64, "float": np.float32, "double": np.float64,
    "half": np.float16, "__half": np.float16,
    # CuPy has no bfloat16 dtype; the course stores bf16 as its 16 raw bits
    "__nv_bfloat16": np.uint16, "nv_bfloat16": np.uint16,
}
# pointees that accept arrays of these itemsizes too (vector types are views of the scalar arrays)
VECTOR_TYPES = {"float2": (np.float32, 2), "float4": (np.float32, 4), "int2": (np.int32, 2),
                "int4": (np.int32, 4), "uint4": (np.uint32, 4), "double2": (np.float64, 2),
                "half2": (np.float16, 2), "__half2": (np.float16, 2), "uchar4": (np.uint8, 4),
                "__nv_bfloat162": (np.uint16, 2)}

_QUALIFIERS = re.compile(r"\b(const|volatile|__restrict__|__restrict|restrict|struct)\b")
_KERNEL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
    r"([A-Za-z_]\w*)\s*\(([^)]*)\)", re.S)


@dataclasses.dataclass(frozen=True)
class Param:
    """One kernel parameter: its C type, name, whether it is a pointer, and the NumPy dtype if known."""

    ctype: str
    name: str
    pointer: bool
    dtype: object  # numpy scalar type or None for unknown (structs, templates)
    vector: int = 1
    decl: str = ""  # the declaration as written, for messages

    def describe(self) -> str:
        return self.decl or f"{self.ctype}{'*' if self.pointer else ''} {self.name}"


def _strip_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", "", src)


def _parse_param(text: str, index: int) -> Param:
    text = " ".join(text.split())
    text = re.sub(r"\s*=.*$", "", text)  # default arguments
    decl = text
    pointer = "*" in text or "[" in text
    core = _QUALIFIERS.sub(" ", text.replace("*", " ").replace("&", " "))
    core = re.sub(r"\[[^\]]*\]", " ", core)
    words = core.split()
    if len(words) >= 2:
        name, ctype = words[-1], " ".join(words[:-1])
    else:  # unnamed parameter
        name, ctype = f"arg{index}", " ".join(words)
    ctype = ctype.replace("std::", "")
    vec = 1
    if ctype in CTYPES:
        dtype = CTYPES[ctype]
    elif ctype in VECTOR_TYPES:
        dtype, vec = VECTOR_TYPES[ctype]
    else:
        dtype = None
    return Param(ctype=ctype, name=name, pointer=pointer, dtype=dtype, vector=vec, decl=decl)


def parse_kernels(source: str) -> dict:
    """Map each `__global__` function name in ``source`` to its list of `Param`.

    Template kernels are listed too; their template-dependent parameters get ``dtype=None`` and are
    passed through unchecked.
    """
    out = {}
    for m in _KERNEL.finditer(_strip_comments(source)):
        name, plist = m.group(1), m.group(2).strip()
        params = []
        if plist and plist != "void":
            depth, cur, parts = 0, "", []
            for ch in plist:  # split on commas outside template brackets
                if ch == "<":
                    depth += 1
                elif ch == ">":
                    depth -= 1
                if ch == "," and depth == 0:
                    parts.append(cur)
                    cur = ""
                else:
                    cur += ch
            parts.append(cur)
            params = [_parse_param(p, i) for i, p in enumerate(parts)]
        out[name] = params
    return out
