"""Parse the parameter lists of `__global__` functions, so launches can convert and check arguments.

CuPy passes a Python int as a 64-bit value whatever the kernel declares; a kernel taking `int n`
then reads garbage or the wrong half. Knowing the declared types lets `Kernel` convert for the student
and name the parameter when an array of the wrong dtype is passed.
"""
from __future__ import annotations

import bisect
import dataclasses
import functools
import re

import numpy as np

__all__ = ["Param", "parse_kernels", "CTYPES", "strip_comments", "unsplice", "original_offset", "lexer"]

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
# The parenthesised parts stop at any bracket or statement end, not only at ")": a source full of
# "__global__ void f(" without a ")" would otherwise be rescanned to its end from every occurrence.
# Launch attributes (`__launch_bounds__(256, 2)`, a cluster kernel's `__cluster_dims__(4, 1, 1)`) may stand
# before or after `void`, several at once.
_ATTRS = r"(?:(?:__launch_bounds__|__cluster_dims__)\s*\([^();{}]*\)\s*)*"
_KERNEL = re.compile(
    rf"__global__\s+{_ATTRS}void\s+{_ATTRS}"
    r"([A-Za-z_]\w*)\s*\(([^();{}]*)\)")


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


# Reading C++ source -----------------------------------------------------------------------------
# One lexer serves every reader of kernel source (signatures here, the grader's include check in
# autograder/source_check.py): two readers that disagree about where a comment or a string ends are
# how a directive slips past a check. Every alternative consumes what it matches in linear time, and an
# unterminated comment or raw string runs to the end of the text, so lexing never rescans (the old
# `re.sub(r"/\*.*?\*/")` took 11 s on a comment holding 24,000 "/* ").

_SPLICE = re.compile(r"\\\r?\n")
# gcc also splices a backslash followed by trailing blanks and treats a lone CR as a newline; NVRTC
# does neither ("\ followed by white space is not a line splice"). Checks run both readings.
_SPLICE_LENIENT = re.compile(r"\\[ \t\f\v]*(?:\r\n|\r|\n)")


def unsplice(source: str, *, lenient: bool = False) -> tuple:
    """Translation phase 2: (``source`` without its backslash-newline line splices, splice map).

    The map lets `original_offset` and line numbers refer to the text the student wrote.
    """
    parts, offsets, removed, last, total = [], [], [], 0, 0
    for m in (_SPLICE_LENIENT if lenient else _SPLICE).finditer(source):
        parts.append(source[last:m.start()])
        offsets.append(m.start() - total)  # where, in the spliced text, the splice was
        total += m.end() - m.start()
        removed.append(total)
        last = m.end()
    parts.append(source[last:])
    return "".join(parts), (offsets, removed)


def original_offset(splices: tuple, pos: int) -> int:
    """The offset in the original source of offset ``pos`` of the spliced text."""
    offsets, removed = splices
    i = bisect.bisect_right(offsets, pos)
    return pos + (removed[i - 1] if i else 0)


@functools.lru_cache(maxsize=8)
def lexer(*, lenient: bool = False, digit_separators: bool = True) -> re.Pattern:
    """The token regex for spliced text; ``m.lastgroup`` names the kind of token.

    Kinds: nl, ws, line (// comment), block (/* */ comment), raw (R"d(...)d" literal), str, chr, num
    (a preprocessing number), id, hash (# or the digraph %:), other (one character). ``ws`` is every
    character that is neither a word character nor printable ASCII (blanks, controls, a BOM, Unicode
    spaces), so no invisible character can make a line look as if it did not start with a directive.
    ``digit_separators=False`` reads 1'000 as NVRTC does inside #if 0 groups: a number, then a
    character literal. Trigraphs are not read: C++17 (the course compiles -std=c++17) removed them.
    """
    nl, eol = (r"\r\n|\r|\n", r"\r\n") if lenient else (r"\n", r"\n")
    sep = r"|'\w" if digit_separators else ""
    return re.compile(rf"""
        (?P<nl>{nl})
      | (?P<ws>[^\w\x21-\x7e{eol}]+)
      | (?P<line>//[^{eol}]*)
      | (?P<block>/\*.*?(?:\*/|\Z))
      | (?P<raw>(?:u8|[uUL])?R"(?P<delim>(?:(?![()\\])[!-~]){{0,16}})\((?:.*?\)(?P=delim)"|.*))
      | (?P<str>(?:u8|[uUL])?"(?:[^"\\{eol}]|\\.)*"?)
      | (?P<chr>(?:u8|[uUL])?'(?:[^'\\{eol}]|\\.)*'?)
      | (?P<num>\.?\d(?:[eEpP][+-]{sep}|[\w.])*)
      | (?P<id>[^\W\d]\w*)
      | (?P<hash>%:|\#)
      | (?P<other>.)
    """, re.S | re.X)


def strip_comments(source: str) -> str:
    """``source`` with each // and /* */ comment replaced by a space, in time linear in its length.

    String, character and raw string literals are kept whole (a "//" inside one is not a comment),
    line splices are honoured (a // comment ending in a backslash goes on), and the newlines inside a
    comment are kept, so line numbers stay those of ``source``.
    """
    text, splices = unsplice(source)
    out, last = [], 0
    for m in lexer().finditer(text):
        if m.lastgroup in ("line", "block"):
            a = original_offset(splices, m.start())
            b = original_offset(splices, m.end() - 1) + 1
            out += [source[last:a], " " + "\n" * source.count("\n", a, b)]
            last = b
    out.append(source[last:])
    return "".join(out)


def _parse_param(text: str, index: int) -> Param:
    text = " ".join(text.split())
    text = re.sub(r"\s*=.*$", "", text)  # default arguments
    decl = text
    pointer = "*" in text or "[" in text
    core = _QUALIFIERS.sub(" ", text.replace("*", " ").replace("&", " "))
    core = re.sub(r"\[[^\[\]]*\]", " ", core)  # not [^\]]*: "[[[[..." would rescan from every "["
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
    for m in _KERNEL.finditer(strip_comments(source)):
        name, plist = m.group(1), m.group(2).strip()
        params = []
        if plist and plist != "void":
            depth, start, parts = 0, 0, []
            for i, ch in enumerate(plist):  # split on commas outside template brackets
                if ch == "<":
                    depth += 1
                elif ch == ">":
                    depth -= 1
                elif ch == "," and depth == 0:
                    parts.append(plist[start:i])
                    start = i + 1
            parts.append(plist[start:])
            params = [_parse_param(p, i) for i, p in enumerate(parts)]
        out[name] = params
    return out
