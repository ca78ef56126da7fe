"""Refuse kernel sources that would make the grader's compiler read anything but CUDA's own headers,
and scrub compile logs before a student sees them.

Why: NVRTC resolves ``#include`` against the grader's working directory and include folders. A
submission could include the reference solution (full marks), or wrap any file the grader can read
(/etc/passwd, /proc/self/environ, another student's submission) in a stringizing macro inside a failing
``static_assert`` or a ``__device__`` string, and read it back in the compile log or in its printf
output. The grader calls `check_source` before anything else, so the compiler never sees such a source,
and passes every compile log through `scrub_log`, so no absolute path of the grading machine leaks.

`check_source` reads the source the way the compiler does (line splices, comments, literals, digraphs;
see `course._signature.lexer`) in time linear in its length, and refuses every include-like directive
that names anything but an allowed header, wherever it is, inside ``#if 0`` too: a skipped group
costs a student nothing to delete, and the check needs no preprocessor of its own. Where compilers could
disagree (gcc's lenient splices and CR line ends, NVRTC reading 1'000 as a number then a character
literal inside ``#if 0``), it reads the source each way and refuses what any reading shows.
"""
from __future__ import annotations

import bisect
import functools
import os
import re
import site
import sys
import tempfile

from course.source import lexer, original_offset, strip_comments, unsplice

__all__ = ["MAX_SOURCE_BYTES", "ALLOWED_HEADERS", "ALLOWED_FOLDERS", "check_source", "header_allowed",
           "strip_comments", "scrub_log"]

MAX_SOURCE_BYTES = 256 * 1024  # the largest course kernel is a few KiB; more is pasted data or an attack

# Headers a course kernel may include: CUDA's and CCCL's own, found in course.include_dirs(), so
# including one shows nothing of the grader's. Left out: cuda.h (driver API, host only; NVRTC cannot
# compile it), crt/* and sm_*_intrinsics.h (internal, and NVRTC declares the intrinsics anyway), and
# the C/C++ standard headers (NVRTC resolves none of them; _HINTS names the cuda/std/ equivalent).
ALLOWED_HEADERS = frozenset({
    "cuda_runtime.h", "cuda_runtime_api.h", "device_launch_parameters.h", "vector_types.h",
    "vector_functions.h", "math_constants.h",
    "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h",
    "mma.h", "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cuda_awbarrier.h",
    "cuda_awbarrier_primitives.h", "cooperative_groups.h",
    "cuda/annotated_ptr", "cuda/atomic", "cuda/barrier", "cuda/bit", "cuda/cmath", "cuda/functional",
    "cuda/latch", "cuda/numeric", "cuda/pipeline", "cuda/ptx", "cuda/semaphore", "cuda/type_traits",
    "cuda/warp",
})
# whole CCCL / cooperative-groups folders: every file in them is NVIDIA's
ALLOWED_FOLDERS = ("cooperative_groups/", "cuda/std/", "cub/")

_EXAMPLES = ("CUDA's own headers, such as <cuda_fp16.h>, <cuda_bf16.h>, <mma.h>, <cooperative_groups.h>, "
             "<cuda/pipeline> or <cuda/std/...> (the full list is ALLOWED_HEADERS in autograder/source_check.py)")
_STD = "NVRTC has no C or C++ standard library; "
_HINTS = {
    **dict.fromkeys(("stdint.h", "cstdint"), _STD + "use <cuda/std/cstdint> (cuda::std::uint32_t ...)."),
    **dict.fromkeys(("stddef.h", "cstddef"), _STD + "use <cuda/std/cstddef>."),
    **dict.fromkeys(("limits.h", "climits"), _STD + "use <cuda/std/climits>."),
    **dict.fromkeys(("float.h", "cfloat"), _STD + "use <cuda/std/cfloat>."),
    **dict.fromkeys(("assert.h", "cassert"), _STD + "use <cuda/std/cassert>."),
    **dict.fromkeys(("math.h", "cmath"), "Math functions (sqrtf, expf, fmaxf, ...) are built into CUDA: "
                    "delete this line."),
    **dict.fromkeys(("stdio.h", "cstdio"), "printf works in a kernel without any include: delete this line."),
    "limits": _STD + "use <cuda/std/limits>.", "type_traits": _STD + "use <cuda/std/type_traits>.",
    "utility": _STD + "use <cuda/std/utility>.", "array": _STD + "use <cuda/std/array>.",
    "cuda.h": "cuda.h is the host-side driver API; a kernel needs nothing from it: delete this line.",
}

_INCLUDES = frozenset({"include", "include_next", "import", "embed"})
# they answer whether a file exists on the grading machine: one bit of its file system per use
_PROBES = frozenset({"__has_include", "__has_include_next", "__has_embed"})
# a relative path of plain names: no leading "/", no "." or ".." segment, no backslash, no blank
_HEADER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*")


def header_allowed(name: str) -> bool:
    """Whether ``#include <name>`` (or ``"name"``) is allowed: an allowed header, or a plain relative
    path inside an allowed folder."""
    if not _HEADER_NAME.fullmatch(name):
        return False
    return name in ALLOWED_HEADERS or name.startswith(ALLOWED_FOLDERS)


def _shown(text: str, limit: int = 80) -> str:
    """Student text quoted in a message: one line, no control characters, not too long."""
    text = re.sub(r"[\x00-\x1f\x7f]", " ", text).strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _header_problem(ln: int, directive: str, header: str, quoted: bool) -> str:
    spelled = _shown(f"#{directive} " + (f'"{header}"' if quoted else f"<{header}>"))
    if directive != "include":
        return (f"line {ln}: `{spelled}`: the grader accepts only plain #include lines, of {_EXAMPLES}. "
                f"Write `#include <{_shown(header)}>` if it is one of them; otherwise delete the line.")
    if header_allowed(header):
        return ""
    if header.startswith(("/", "\\")) or "\\" in header or re.search(r"(?:^|/)\.\.?(?:/|$)", header):
        return (f"line {ln}: `{spelled}` reaches outside your source (absolute paths, '..' and backslashes are "
                f"refused). The grader compiles only the code you submit, which may include only {_EXAMPLES}. "
                "Delete the line and write what you need in your own source.")
    hint = _HINTS.get(header) or "Delete the line and write what you need in your own source."
    return (f"line {ln}: `{spelled}` is not allowed: the grader compiles your kernel on its own, and it may "
            f"include only {_EXAMPLES}. {hint}")


@functools.lru_cache(maxsize=2)
def _directive_regexes(lenient: bool) -> tuple:
    eol = r"\r\n" if lenient else r"\n"
    # what may stand between "#", the directive name and its operand: blanks, invisible characters and
    # comments (phase 3 turns each comment into one space, so "# /*x*/ include" is an #include)
    gap = rf"(?:[^\w\x21-\x7e{eol}]|/\*.*?(?:\*/|\Z))*"
    head = re.compile(gap + r"(?P<name>[^\W\d]\w*|\\)?", re.S)
    # header names are read before comments are: in "#include <a/*b>" the "/*" is part of the name
    operand = re.compile(gap + rf'(?:<(?P<angle>[^>{eol}]*)>|"(?P<quote>[^"{eol}]*)")?(?P<rest>[^{eol}]*)', re.S)
    hidden = re.compile(rf"^[^\w\x21-\x7e\n]*(?:\#|%:)[^\w\x21-\x7e\n]*(?P<name>{'|'.join(sorted(_INCLUDES))})\b",
                        re.M)
    return head, operand, hidden


class _Scan:
    """One reading of a source (strict or lenient splices, with or without digit separators)."""

    def __init__(self, source: str, lenient: bool, digit_separators: bool):
        self.source, self.lenient = source, lenient
        self.text, self.splices = unsplice(source, lenient=lenient)
        self.lex = lexer(lenient=lenient, digit_separators=digit_separators)
        self.head, self.operand, self.hidden = _directive_regexes(lenient)
        self.defines = {}  # macro -> [pastes tokens?, identifiers in its body], for the ## check
        self.conditions = []  # (identifier, offset) read in #if / #elif lines

    def line(self, pos: int) -> int:
        return self.source.count("\n", 0, original_offset(self.splices, pos)) + 1

    def run(self) -> str:
        text, n, pos = self.text, len(self.text), 0
        breaks = "\r\n" if self.lenient else "\n"
        line_start, directive, macro, hash_end = True, None, None, -1
        while pos < n:
            m = self.lex.match(text, pos)
            kind, end = m.lastgroup, m.end()
            if kind == "nl":
                line_start, directive, macro = True, None, None
            elif kind == "block":
                if any(b in m.group() for b in breaks):
                    # NVRTC takes a "#" after a multi-line comment as a directive even when code came
                    # before the comment; and what a comment hides is checked too (see _hidden)
                    line_start = True
                    problem = self._hidden(m.start(), m.group())
                    if problem:
                        return problem
            elif kind == "hash":
                if line_start:
                    problem, end, directive = self._directive(end)
                    if problem:
                        return problem
                elif directive == "define" and m.start() == hash_end and macro in self.defines:
                    self.defines[macro][0] = True  # "##" or "%:%:"
                hash_end, line_start = end, False
            elif kind == "id":
                word = m.group()
                if word in _PROBES:
                    return (f"line {self.line(m.start())}: `{word}` asks whether a file exists on the machine that "
                            "compiles your code, and the grader does not let a kernel probe its files. Remove it "
                            "(and the #if around it): the headers you may include are always there.")
                if directive == "define":
                    if macro is None:
                        macro = word
                        self.defines.setdefault(word, [False, set()])
                    else:
                        self.defines[macro][1].add(word)
                elif directive in ("if", "elif"):
                    self.conditions.append((word, m.start()))
                line_start = False
            elif kind == "raw":
                problem = self._raw(m.start(), end)
                if problem:
                    return problem
                line_start = False
            elif kind != "ws":
                line_start = False
            pos = end
        return self._pasted_conditions()

    def _directive(self, pos: int) -> tuple:
        """(problem, where lexing goes on, directive name) for a directive whose "#" ends at ``pos``."""
        h = self.head.match(self.text, pos)
        name = h.group("name") or ""
        if name == "\\":
            return (f"line {self.line(pos)}: a directive name is written with a backslash escape (such as "
                    "#\\u0069nclude). Write directive names plainly, e.g. #define.", h.end(), name)
        if name not in _INCLUDES:
            return "", h.end(), name
        o = self.operand.match(self.text, h.end())
        quoted = o.group("quote") is not None
        header = o.group("quote") if quoted else o.group("angle")
        if header is None:
            return (f"line {self.line(pos)}: `#{name}` must be followed by a header name written out, such as "
                    f"<cuda_fp16.h>; here it is followed by `{_shown(o.group('rest')) or 'nothing'}`. The grader "
                    "does not expand macros in #include lines, so it cannot tell which file they would open: "
                    "write the header name itself.", o.end(), name)
        rest_at = o.start("rest")
        return _header_problem(self.line(pos), name, header, quoted), rest_at, name

    def _hidden(self, start: int, comment: str) -> str:
        """An include-like line inside a multi-line comment names a header that is not allowed.

        Readers that disagree about where a comment starts (NVRTC's #if 0 groups do: see
        course._signature.lexer) would see such a line as a directive; refusing it is the backstop for a
        disagreement nobody has found yet. Commented-out includes of allowed headers pass.
        """
        if self.lenient:
            comment = comment.replace("\r", "\n")
        for h in self.hidden.finditer(comment):
            o = self.operand.match(comment, h.end())
            header = o.group("quote") if o.group("quote") is not None else o.group("angle")
            if h.group("name") == "include" and header is not None and header_allowed(header):
                continue
            return (f"line {self.line(start + h.start())}: the comment that starts on line {self.line(start)} "
                    f"holds `{_shown(comment[h.start():o.end()])}`. Compilers can disagree about where a comment "
                    f"ends, so the grader refuses a commented-out #include too unless it names one of {_EXAMPLES}: "
                    "delete the line.")
        return ""

    def _raw(self, start: int, end: int) -> str:
        """A line splice inside a raw string literal: C++ undoes splices there, so the literal may end
        elsewhere than in the spliced text this scan reads."""
        offsets = self.splices[0]
        i = bisect.bisect_right(offsets, start)
        if i == len(offsets) or offsets[i] >= end:
            return ""
        return (f"line {self.line(offsets[i]) - 1}: a raw string literal (R\"...\") has a backslash at the end "
                "of a line. Compilers disagree about where such a string ends, so the grader refuses it: remove the "
                "backslash or use an ordinary string.")

    def _pasted_conditions(self) -> str:
        """An #if / #elif uses a macro that pastes tokens (##), directly or through other macros: pasting
        can spell __has_include ("__has_inc ## lude") past the check of identifiers above."""
        users, tainted = {}, set()
        for name, (pastes, body) in self.defines.items():
            if pastes:
                tainted.add(name)
            for word in body:
                users.setdefault(word, []).append(name)
        todo = list(tainted)
        while todo:
            for user in users.get(todo.pop(), ()):
                if user not in tainted:
                    tainted.add(user)
                    todo.append(user)
        for word, pos in self.conditions:
            if word in tainted:
                return (f"line {self.line(pos)}: this #if uses the macro {word}, which pastes tokens together with "
                        "##. The grader refuses token pasting in #if conditions, because it can spell "
                        f"__has_include and probe the grader's files: write the condition without {word}.")
        return ""


def check_source(source: str) -> str:
    """'' when the grader may compile ``source``; else what is wrong, where, and what to do instead.

    Refused: more than `MAX_SOURCE_BYTES`; a NUL byte; an #include (or #include_next, #import, #embed)
    of anything but an allowed header (`header_allowed`), in any spelling the compiler accepts (line
    splices, comments inside the directive, the digraph %:) and in #if 0 groups too; an #include of a
    macro; __has_include and its kin, and #if conditions that could paste them together. Text that only
    looks like a directive, inside a string, character or raw string literal, is not refused.
    """
    if not isinstance(source, str):
        return f"the kernel source should be text; the grader received {type(source).__name__}."
    size = len(source) if len(source) > MAX_SOURCE_BYTES else len(source.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        return (f"your source is {size:,} bytes, and the grader accepts at most {MAX_SOURCE_BYTES:,} "
                f"({MAX_SOURCE_BYTES // 1024} KiB). A course kernel is a few KiB: if you pasted data or generated "
                "code into it, compute the values in the kernel instead.")
    nul = source.find("\0")
    if nul >= 0:
        return (f"line {source.count(chr(10), 0, nul) + 1}: your source holds a NUL byte (character 0), so it is "
                "not plain text. Save it as UTF-8 text and submit again.")
    # Readings that differ from NVRTC's own only matter when the source has what they read differently.
    # Trigraphs (??= for #, ??/ for a backslash) need no reading: C++17, which the course compiles with,
    # removed them, and NVRTC says "support for trigraphs is disabled".
    lenient = (False, True) if re.search(r"\\[ \t\f\v]+(?:\r|\n)|\r(?!\n)|\\\r(?!\n)", source) else (False,)
    separators = (True, False) if re.search(r"\w'", source) else (True,)
    for splices in lenient:
        for digit_separators in separators:
            problem = _Scan(source, splices, digit_separators).run()
            if problem:
                return problem
    return ""


# Logs ----------------------------------------------------------------------------------------------------
# A path segment: anything but a separator, a blank or the punctuation that ends a path in a log line
# ("file.cu(12): error", quotes, brackets, "path:line").
_SEG = r"[^\s/\"'`<>()\[\]{}|;,:*?]"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _roots() -> tuple:
    """(folder, neutral name) for the CUDA include folders and this machine's other telling folders,
    longest first.

    It runs in the sandboxed compile child, so it touches nothing and never raises: no
    tempfile.gettempdir() (it creates a probe file), and a folder that cannot be read is skipped.
    """
    def call(fn, *args):
        try:
            return fn(*args)
        except Exception:
            return None
    from course import include_dirs
    groups = (
        ("<home>", [call(os.path.expanduser, "~")]),
        ("<tmp>", [tempfile.tempdir, os.environ.get("TMPDIR"), "/tmp", "/var/tmp", "/dev/shm"]),
        ("<cwd>", [call(os.getcwd)]),
        ("<python>", [sys.prefix, sys.base_prefix, sys.exec_prefix, *(call(site.getsitepackages) or []),
                      call(site.getusersitepackages)]),
        ("<course>", [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]),
        ("<cuda>", list(call(include_dirs) or ())),
    )
    named = {}
    for label, paths in groups:
        for p in paths:
            for q in {p, call(os.path.realpath, p) if isinstance(p, str) else None}:
                if isinstance(q, str) and q.startswith("/") and len(q.rstrip("/")) > 1:
                    # first name wins, except that an include folder is always <cuda>
                    named[q.rstrip("/")] = label if label == "<cuda>" else named.get(q.rstrip("/"), label)
    return tuple(sorted(named.items(), key=lambda kv: -len(kv[0])))


@functools.lru_cache(maxsize=4)
def _path_regex(roots: tuple) -> re.Pattern:
    known = "|".join(re.escape(r) for r, _ in roots)
    known = rf"(?P<known>{known})(?!{_SEG})(?:/+{_SEG}+)*/?|" if known else ""
    # starts at a "/" that is not inside a word or a relative path (a/b, ./b, ~/b), or right after a
    # one-letter option such as -I/usr/include; a run of "/" is tried once, from its first
    return re.compile(rf"(?:(?<=-[A-Za-z])|(?<![\w.~/-]))(?:{known}/+{_SEG}+(?:/+{_SEG}+)+/?)")


def _neutral(m: re.Match, roots: tuple) -> str:
    path = m.group().rstrip("/")
    for root, label in roots:
        if path == root or path.startswith(root + "/"):
            rest = path[len(root):].lstrip("/")
            if label == "<cuda>":
                return "<cuda>/" + rest if rest else "<cuda>"
            return rest.rsplit("/", 1)[-1] if rest else label
    return path.rsplit("/", 1)[-1] or "<dir>"


def scrub_log(log: str, *, cap: int = 8192) -> str:
    """A compile log fit to show a student: no absolute path of this machine, no control characters
    (except newline and tab), at most about ``cap`` characters.

    A file under a CUDA include folder keeps its path inside it (``<cuda>/crt/mma.h``), which helps and
    reveals nothing; any other absolute path becomes its base name (``/tmp/x/kernel.cu`` -> ``kernel.cu``),
    and a bare known folder its role (``<home>``, ``<tmp>``). A long log keeps its head, where the first
    errors are, and its tail, and says how much was cut between them.
    """
    if not isinstance(log, str):
        log = str(log)
    log = _CONTROL.sub("", log.replace("\r\n", "\n").replace("\r", "\n"))
    roots = _roots()
    log = _path_regex(roots).sub(lambda m: _neutral(m, roots), log)
    cap = max(int(cap), 0)
    if len(log) <= cap:
        return log
    # the note's length depends on the count it prints: size it for the longest count possible
    room = cap - len(f"\n[... {len(log):,} characters of the compiler log cut here ...]\n")
    if room <= 0:
        return log[:cap]
    note = f"\n[... {len(log) - room:,} characters of the compiler log cut here ...]\n"
    keep = cap - len(note)
    head = keep * 2 // 3
    return log[:head] + note + log[len(log) - (keep - head):]
