"""Properties every reference kernel in solutions/ must have, checked on the CPU (NVRTC and the source text).

- Wide accesses (solutions/*.cu and every `%%cuda` cell of chapters/*.ipynb): a scalar pointer parameter
  that a kernel reads or writes as a vector (a `reinterpret_cast` to `float4` or another 8- or 16-byte
  vector, or the source operand of a `cp.async`), directly, through a local alias (`float* out = C + ...`)
  or through a `__device__` helper (every pointer parameter named in the helper's argument counts), must be
  tested for alignment in the kernel, as chapter 06 does (`(reinterpret_cast<unsigned long long>(x) & 15)
  == 0`), with a scalar path for the rest; or a comment line must name it with the words '16-byte aligned'
  as the kernel's contract. A parameter declared as a vector (`const float4* x`) states its alignment in
  its type and is not checked. The grader's arrays come from cudaMalloc (256-byte aligned), so only a test
  like this one, or a GPU launch on a view (tests marked `gpu` below), can catch a missing check.
- Launch bounds: `__launch_bounds__(T, B)` must admit every launch the spec makes of the reference, and every
  block size a student's LAUNCH line may choose when the bound sits in the stub's signature; T x B must be a
  residency an SM can have (2,048 threads on sm_80 and sm_90), or the bound squeezes registers for nothing.
- No local memory: a reference that spills is slower than it need be (NVRTC, sm_80 and sm_90).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from repo_helpers import REPO, chapter_notebooks, cuda_cells, fail_on, import_course, rel

SOLUTIONS = sorted((REPO / "solutions").rglob("*.cu"))
MAX_THREADS_PER_SM = 2048          # sm_80 and sm_90
VECTOR = r"(?:float4|int4|uint4|float2|int2|uint2|double2|longlong2|ulonglong2)"
ALIGN_CAST = r"reinterpret_cast\s*<\s*(?:unsigned\s+long\s+long|(?:std::)?uintptr_t|size_t)\s*>\s*\(\s*{}\s*\)"
ALIGN_TEST = r"[^;]*?(?:&\s*(?:15|0xf|0xF|7)\b|%\s*(?:16|8)\b)"


def _code(path: Path) -> str:
    return import_course().source.strip_comments(path.read_text(encoding="utf-8"))


def _body(text: str, open_brace: int) -> str:
    depth = 0
    for i in range(open_brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_brace:i + 1]
    return text[open_brace:]


def _args(text: str, open_paren: int) -> list[str]:
    """The top-level comma-separated arguments of the call whose '(' is at ``open_paren``."""
    depth, start, out = 0, open_paren + 1, []
    for i in range(open_paren, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
                return out
        elif ch == "," and depth == 1:
            out.append(text[start:i])
            start = i + 1
    return out


def _lead(expr: str) -> str | None:
    m = re.match(r"\s*\(?\s*([A-Za-z_]\w*)", expr)
    return m.group(1) if m else None


def _aliases(body: str) -> dict[str, str]:
    """Local pointers defined from another (`float* out = C + ...` maps out to C)."""
    return {m.group(1): m.group(2) for m in re.finditer(
        r"\*\s*(?:__restrict__\s+)?(?:const\s+)?([A-Za-z_]\w*)\s*=\s*\(?\s*([A-Za-z_]\w*)\s*[+;)]", body)}


def _follow(name: str, alias: dict[str, str]) -> str:
    seen = set()
    while name in alias and name not in seen:
        seen.add(name)
        name = alias[name]
    return name


def vector_names(body: str, shared: set[str]) -> set[str]:
    """Names of pointers that ``body`` reads or writes through a vector cast or copies with cp.async,
    aliases followed back (`float* out = C + ...; reinterpret_cast<float4*>(out)` names C)."""
    alias = _aliases(body)
    found = set()
    for m in re.finditer(rf"reinterpret_cast\s*<\s*(?:const\s+)?{VECTOR}\s*\*\s*>\s*\(\s*(&?)\s*([A-Za-z_]\w*)",
                         body):
        name = m.group(2)
        if m.group(1) and name in shared:
            continue                    # a shared array: its alignment is declared (__align__)
        name = _follow(name, alias)
        if name not in shared:
            found.add(name)
    # cp.async's global source is the first "l" (64-bit) operand of its asm statement (which ends where the
    # next asm begins: the PTX string holds semicolons); a 16-byte copy needs a 16-byte aligned source
    for m in re.finditer(r"cp\.async\.c[ag]\.", body):
        src = re.search(r'"l"\s*\(\s*([A-Za-z_]\w*)', re.split(r"\basm\b", body[m.end():], maxsplit=1)[0])
        if src:
            found.add(_follow(src.group(1), alias))
    return found


def vector_params(code: str, kernel: str, params: list[str]) -> set[str]:
    """The pointer parameters of ``kernel`` it accesses as vectors, directly or through a __device__ helper."""
    shared = set(re.findall(r"__shared__[^;]*?([A-Za-z_]\w*)\s*\[", code))
    helpers = {}
    for m in re.finditer(r"__device__[^;{}]*?\b([A-Za-z_]\w*)\s*\(([^()]*)\)\s*\{", code):
        names = [_lead(p.split("=")[0].split()[-1].lstrip("*&")) or "" for p in m.group(2).split(",") if p.strip()]
        used = vector_names(_body(code, m.end() - 1), shared)
        helpers[m.group(1)] = {i for i, n in enumerate(names) if n in used}
    m = re.search(rf"__global__[^;{{}}]*?\b{kernel}\s*\([^{{]*\)\s*\{{", code)
    body = _body(code, m.end() - 1)
    found, alias = vector_names(body, shared), _aliases(body)
    for name, positions in helpers.items():
        for call in re.finditer(rf"\b{name}\s*\(", body):
            args = _args(body, call.end() - 1)
            # every name in the argument: `ok ? A + k : A` hands the helper A
            found |= {_follow(n, alias) for i in positions if i < len(args) for n in re.findall(r"[A-Za-z_]\w*", args[i])}
    return found & set(params)


def _declared_aligned(text: str, name: str) -> bool:
    """Does a comment line of the file state, as the kernel's contract, that ``name`` is 16-byte aligned?"""
    return any("16-byte aligned" in line and re.search(rf"\b{re.escape(name)}\b", line)
               for line in text.splitlines() if line.lstrip().startswith("//"))


_ALIGN_MASK = r"(?:&\s*(?:15|0xf|0xF|7)\b|%\s*(?:16|8)\b)"


def _tests_alignment(code: str, name: str) -> bool:
    """Is ``name``'s address, or that of a pointer derived from it (``const float* row = name + r * cols``),
    tested against 16 or 8 bytes: in the cast's own statement or through the integer it was cast to?"""
    aliases = re.findall(rf"\*\s*(?:const\s+)?(\w+)\s*=\s*{re.escape(name)}\b", code)
    for n in (name, *aliases):
        cast = ALIGN_CAST.format(re.escape(n))
        if re.search(cast + ALIGN_TEST, code):
            return True
        if any(re.search(rf"\b{var}\b\s*\)?\s*{_ALIGN_MASK}", code)
               for var in re.findall(rf"(\w+)\s*=\s*{cast}", code)):
            return True
    return False


def unchecked_vector_params(text: str, where: str) -> list[str]:
    course = import_course()
    code = course.source.strip_comments(text)
    problems = []
    for kernel, params in course.source.parse_kernels(code).items():
        pointers = [p.name for p in params if p.pointer]
        for name in sorted(vector_params(code, kernel, pointers)):
            if not (_tests_alignment(code, name) or _declared_aligned(text, name)):
                problems.append(
                    f"{where}: {kernel} accesses `{name}` as a vector (float4 or the like) but never tests "
                    f"its alignment. A view such as {name} + 1 is 4-byte aligned only, and a float4 access to it "
                    f"faults. Test `(reinterpret_cast<unsigned long long>({name}) & 15) == 0` once at the start "
                    f"(the same answer in every thread) and take the scalar path when it fails, as chapter 06 "
                    f"does; or, where no scalar path makes sense (cp.async), state the contract in a comment "
                    f"line naming `{name}` and the words '16-byte aligned'.")
    return problems


def test_vector_params_are_found():
    """Does the scan find vector accesses made directly, through an alias and through a helper, and leave
    shared arrays and pointers that are only read element by element alone?"""
    code = """
    __device__ float4 get4(const float* p, int i) { const float* q = p + i; return *reinterpret_cast<const float4*>(q); }
    extern "C" __global__ void k(const float* a, const float* b, float* c, const float* d, int n) {
        __shared__ __align__(16) float s[64];
        float4 v = get4(b, 0);
        float* out = c + 4;
        *reinterpret_cast<float4*>(out) = v;
        *reinterpret_cast<float4*>(&s[0]) = *reinterpret_cast<const float4*>(a + 4);
        c[0] = d[0];
    }"""
    assert vector_params(code, "k", ["a", "b", "c", "d"]) == {"a", "b", "c"}
    # chapter 07's gemm_wmma: a helper copies 16 bytes with cp.async, its source chosen by a condition
    staged = """
    __device__ void copy16(float* dst, const float* src, bool ok) {
        unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(src), "r"(ok ? 16 : 0));
    }
    extern "C" __global__ void g(const float* A, const float* B, int n) {
        __shared__ __align__(16) float s[64];
        const bool ok = threadIdx.x < n;
        copy16(&s[4 * threadIdx.x], ok ? A + 4 * threadIdx.x : A, ok);
        s[0] = B[0];
    }"""
    assert vector_params(staged, "g", ["A", "B"]) == {"A"}


def test_unchecked_vector_access_is_reported():
    """Is a float4 access without an alignment test reported, and the same kernel passed once it tests the
    pointers, or once a comment states their alignment as its contract?"""
    bad = ('extern "C" __global__ void k(const float* x, float* y, int n) {\n'
           '    int i = threadIdx.x; if (4 * i + 3 < n) reinterpret_cast<float4*>(y)[i] = '
           'reinterpret_cast<const float4*>(x)[i];\n}\n')
    problems = unchecked_vector_params(bad, "bad.cu")
    assert len(problems) == 2 and "`x`" in problems[0] and "`y`" in problems[1], problems
    tested = bad.replace("int i = threadIdx.x;", "int i = threadIdx.x; if (((reinterpret_cast<unsigned long long>(x) | "
                         "reinterpret_cast<unsigned long long>(y)) & 15) != 0) return;")
    assert unchecked_vector_params(tested, "tested.cu") == []
    assert unchecked_vector_params("// x and y must be 16-byte aligned\n" + bad, "contract.cu") == []
    assert len(unchecked_vector_params("// x must be 16-byte aligned\n" + bad, "half.cu")) == 1
    # a pointer derived from the parameter, cast to an integer that a later line tests (chapter 11's row_means)
    derived = bad.replace("int i = threadIdx.x;", "int i = threadIdx.x; const float* row = x + n; float* o = y; "
                          "const unsigned long long a = reinterpret_cast<unsigned long long>(row); "
                          "const unsigned long long b = reinterpret_cast<unsigned long long>(o); "
                          "if ((a & 15) || (b & 15)) return;")
    assert unchecked_vector_params(derived, "derived.cu") == []
    untested = derived.replace("if ((a & 15) || (b & 15)) return;", "if (a == b) return;")
    assert len(unchecked_vector_params(untested, "untested.cu")) == 2


def test_vector_accesses_test_alignment():
    """Does every reference kernel that reads or writes a pointer parameter as float4 (or another vector)
    test that pointer's alignment (issue #22: bias_relu, sgemm_regtile and sgemm_bias_relu did not), or state
    it as the kernel's contract?"""
    fail_on([p for path in SOLUTIONS for p in unchecked_vector_params(path.read_text(encoding="utf-8"), rel(path))])


def test_lesson_vector_accesses_test_alignment():
    """Does every kernel of a chapter's `%%cuda` cells that reads or writes a pointer parameter as float4 (or
    another vector, or through cp.async) test its alignment or state it as its contract, as the chapters
    teach (issue #22: chapter 06's vec_add4 did neither)?"""
    fail_on([p for nb in chapter_notebooks() for i, source in enumerate(cuda_cells(nb.stem), 1)
             for p in unchecked_vector_params(source, f"{rel(nb)}, %%cuda cell {i}")])


# --- launch bounds ------------------------------------------------------------------------------

def _value(expr: str, defines: dict[str, str], depth: int = 0) -> int | None:
    """An integer macro expression (`128`, `(32 * WARPS_M * WARPS_N)`) evaluated through ``defines``."""
    if depth > 8:
        return None
    parts = []
    for token in re.findall(r"[A-Za-z_]\w*|\d+|[-+*/()]|\S", expr):
        if token[0].isalpha() or token[0] == "_":
            value = _value(defines.get(token, "?"), defines, depth + 1)
            if value is None:
                return None
            token = str(value)
        elif not re.fullmatch(r"\d+|[-+*/()]", token):
            return None
        parts.append("//" if token == "/" else token)
    try:
        return int(eval("".join(parts), {"__builtins__": {}}))   # digits and + - * / ( ) only
    except (SyntaxError, ZeroDivisionError, TypeError):
        return None


def launch_bounds(code: str, kernel: str) -> tuple[int, int | None, bool] | None:
    """(max threads, min blocks or None, the first argument is a literal) of ``kernel``'s bound, or None
    where it has none (or one this test cannot evaluate)."""
    m = re.search(rf"__launch_bounds__\s*\(\s*(\w+)\s*(?:,\s*(\w+)\s*)?\)\s*\w*\s*\b{kernel}\s*\(", code)
    if not m:
        return None
    defines = {}
    for d in re.finditer(r"^\s*#\s*define\s+(\w+)\s+(.+?)\s*$", code, re.M):
        defines.setdefault(d.group(1), d.group(2))          # the default of an #ifndef block comes first
    threads = _value(m.group(1), defines)
    blocks = None if m.group(2) is None else _value(m.group(2), defines)
    if threads is None or (m.group(2) is not None and blocks is None):
        return None
    return threads, blocks, m.group(1).isdigit()


def _threads(block) -> int:
    return int(np.prod(block)) if isinstance(block, tuple) else int(block)


def _kernel_exercises():
    from autograder.loader import chapters, load_chapter
    for chapter in chapters():
        for ex in load_chapter(chapter):
            source = getattr(ex, "source_file", None)
            if source and source.endswith(".cu") and getattr(ex, "launch", None):
                yield chapter, ex, REPO / "solutions" / chapter / source


def launch_bound_problems(ex, code: str, where: str) -> list[str]:
    """What is wrong with the __launch_bounds__ of ``ex``'s kernel in ``code`` (its comments stripped)."""
    bound = launch_bounds(code, ex.kernel)
    if bound is None:
        return []
    threads, blocks, literal = bound
    where = f"{where} (__launch_bounds__({threads}{'' if blocks is None else f', {blocks}'}))"
    problems = []
    if blocks and threads * blocks > MAX_THREADS_PER_SM:
        problems.append(f"{where}: asks for {blocks} blocks of {threads} threads per SM, more than the "
                        f"{MAX_THREADS_PER_SM} threads an SM holds; the register cap buys no occupancy")
    for case in ex.sizes:
        sizes = ex.resolve_sizes(case, 50 << 20)
        used = _threads(ex.launch(dict(sizes), dict(ex.launch_defaults))[1])
        if used > threads:
            problems.append(f"{where}: the spec launches {used} threads per block at {case}; that launch fails")
    # the bound's literal sits in the stub's signature, so students inherit it with every block they may choose
    if literal and isinstance(ex.launch_defaults.get("block"), int):
        size = ex.resolve_sizes(ex.sizes[-1], 50 << 20)
        for block in range(32, 1025, 32):
            try:
                used = _threads(ex.launch(dict(size), {**ex.launch_defaults, "block": block})[1])
            except (ValueError, TypeError):
                continue                 # the spec refuses this block size
            if used > threads:
                problems.append(f"{where}: a LAUNCH line may choose block = {block}, which this bound refuses "
                                f"at launch; raise the bound's first argument to the largest block the spec "
                                f"accepts")
                break
    return problems


def test_launch_bounds_fit_the_launches():
    """Does each reference kernel's __launch_bounds__ admit the spec's launches (and the LAUNCH block sizes a
    student may choose, where the bound is a literal in the signature), asking for a residency an SM has?"""
    import_course()
    fail_on([p for _, ex, path in _kernel_exercises() for p in launch_bound_problems(ex, _code(path), rel(path))])


def test_launch_bound_problems_can_fail():
    """Would a bound below the blocks the spec accepts, or above an SM's residency, be reported?"""
    import_course()
    _, ex, path = next(a for a in _kernel_exercises() if a[1].name == "reduce_sum")
    code = _code(path)
    assert launch_bounds(code, "reduce_sum") == (1024, 2, True)
    assert launch_bound_problems(ex, code, "reduce_sum.cu") == []
    for bound, words in (("(256, 8)", "may choose block = 288"), ("(1024, 4)", "more than the 2048 threads")):
        planted = code.replace("__launch_bounds__(1024, 2) reduce_sum", f"__launch_bounds__{bound} reduce_sum")
        problems = launch_bound_problems(ex, planted, "planted")
        assert any(words in p for p in problems), (bound, problems)


# --- resources ----------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_no_reference_uses_local_memory(arch):
    """Does every reference kernel compile (NVRTC) without local memory, so no register cap spills?"""
    course = import_course()
    problems = []
    for path in SOLUTIONS:
        text = path.read_text(encoding="utf-8")
        target = course.target_for(arch, course.declared_arch(text))
        if target is None:
            continue            # newer, or an arch-specific target (sm_90a) that builds for its own GPU only
        for kernel, res in course.compile_for_arch(text, target, name=path.name).resources.items():
            if res.local_bytes or res.spill_stores or res.spill_loads:
                problems.append(f"{rel(path)}: {kernel} on {arch}: {res.summary(explain=False)}")
    fail_on(problems, "reference kernels that use local memory (spills cost speed; check __launch_bounds__ "
                      "and arrays indexed at run time):")


# --- GPU: the scalar paths run on misaligned views ------------------------------------------------

def _compile(chapter: str, name: str):
    course = import_course()
    return course.compile((REPO / "solutions" / chapter / f"{name}.cu").read_text()).kernel(name)


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_bias_relu_on_views(offset):
    """Is bias_relu exact on a matrix that starts 0-3 floats past a 16-byte boundary?"""
    import cupy
    k = _compile("10_cublas", "bias_relu")
    rng = np.random.default_rng(offset)
    for m, n in ((1, 1), (37, 1009), (300, 4099)):
        ch = rng.standard_normal(m * n + offset).astype(np.float32)
        bh = rng.standard_normal(n).astype(np.float32)
        c = cupy.asarray(ch)
        k((min(-(-n // 128), 32), min(-(-m // 8), 4096)), (32, 8), c[offset:], cupy.asarray(bh), m, n)
        want = np.maximum(ch[offset:].reshape(m, n) + bh, np.float32(0))
        assert np.array_equal(c[offset:].get().reshape(m, n), want), (m, n, offset)
        assert np.array_equal(c[:offset].get(), ch[:offset]), "wrote before the view"


@pytest.mark.gpu
@pytest.mark.parametrize("chapter,name", [("07_staged_gemm", "sgemm_regtile"), ("10_cublas", "sgemm_bias_relu")])
@pytest.mark.parametrize("offset", [0, 1, 2])
def test_sgemm_on_views(chapter, name, offset):
    """Does the register-tiled SGEMM (and its fused epilogue) give the right C when A, B and C start 0-2
    floats past a 16-byte boundary, with K and N multiples of 4 (where the float4 path would be taken)?"""
    import cupy
    course = import_course()
    k = _compile(chapter, name)
    rng = np.random.default_rng(offset)
    m, n, kk = 130, 260, 132
    a = cupy.asarray(rng.standard_normal(m * kk + offset).astype(np.float32))
    b = cupy.asarray(rng.standard_normal(kk * n + offset).astype(np.float32))
    bias = cupy.asarray(rng.standard_normal(n).astype(np.float32))
    c = cupy.full(m * n + offset, cupy.nan, dtype=cupy.float32)
    av, bv, cv = a[offset:], b[offset:], c[offset:]
    args = (av, bv, bias, cv) if name == "sgemm_bias_relu" else (av, bv, cv)
    k((-(-n // 128), -(-m // 128)), 256, *args, m, n, kk)
    want = av.reshape(m, kk).astype(cupy.float64) @ bv.reshape(kk, n).astype(cupy.float64)
    if name == "sgemm_bias_relu":
        want = cupy.maximum(want + bias, 0)
    course.assert_close(cv.reshape(m, n), want.astype(cupy.float32), rtol=1e-4, atol=1e-3, name=f"{name} C")
