"""A cuBLAS call written as data (chapter 10): a student writes the arguments of ``cublasSgemm`` as a dict.

A call is a dict with cuBLAS's own parameter names::

    {"transa": "N", "transb": "N", "m": "n", "n": "m", "k": "k",
     "A": "b", "lda": "ldb", "B": "a", "ldb": "lda", "ldc": "ldc"}

``transa``/``transb`` are "N" or "T"; ``A`` and ``B`` name the problem's row-major buffers; ``m``, ``n``,
``k`` and the leading dimensions are names of the problem's sizes (or plain ints). Nothing the student
writes is executed: `parse_call_cell` reads the dict with ast, `check_call` checks it without a GPU, and
`run_case` makes the one cuBLAS call it describes on fresh inputs with padded rows (leading dimensions
larger than the row length) and a poisoned output. The `%%cublas` magic runs one small case; the grader's
driver (`drivers.cublas_calls`) runs hidden ones in its own process.

Problems (row-major, the way NumPy, CuPy and PyTorch store matrices; every row of a buffer is ``ld``
elements apart, ``ld`` >= the row length):

- ``sgemm_rowmajor``: c (m x n) = a (m x k) @ b (k x n), with leading dimensions lda, ldb, ldc.
- ``linear_rowmajor``: y (m x n) = x (m x k) @ w^T, where w is stored (n x k) as a linear layer's weight,
  with leading dimensions ldx, ldw, ldy.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ._sources import cell_literal

__all__ = ["PROBLEMS", "TRY_SIZES", "FIELDS", "CallDataError", "parse_call_cell", "check_call", "resolve_call",
           "sgemm_call", "run_case", "make_case"]

FIELDS = ("transa", "transb", "m", "n", "k", "A", "lda", "B", "ldb", "ldc")
_OPS = {"N": 0, "T": 1}  # CUBLAS_OP_N, CUBLAS_OP_T


@dataclasses.dataclass(frozen=True)
class Problem:
    """A row-major product: the operands' names and shapes (over m, n, k), the output and its ld."""

    name: str
    operands: dict         # buffer name -> (rows, cols, ld name), row-major
    out: str
    out_ld: str
    formula: str

    @property
    def size_names(self) -> tuple:
        return ("m", "n", "k") + tuple(ld for _, _, ld in self.operands.values()) + (self.out_ld,)

    def reference(self, arrays: dict) -> np.ndarray:
        a, b = (arrays[nm].astype(np.float64) for nm in self.operands)
        return a @ (b.T if self.name == "linear_rowmajor" else b)


PROBLEMS = {
    "sgemm_rowmajor": Problem("sgemm_rowmajor", {"a": ("m", "k", "lda"), "b": ("k", "n", "ldb")}, "c", "ldc",
                              "c = a @ b"),
    "linear_rowmajor": Problem("linear_rowmajor", {"x": ("m", "k", "ldx"), "w": ("n", "k", "ldw")}, "y", "ldy",
                               "y = x @ w.T"),
}


# a small case with padded rows for trying a call (the %%cublas magic): a call that takes a row length
# for a row pitch goes wrong here
TRY_SIZES = {
    "sgemm_rowmajor": {"m": 37, "n": 50, "k": 29, "lda": 32, "ldb": 53, "ldc": 51},
    "linear_rowmajor": {"m": 37, "n": 50, "k": 29, "ldx": 32, "ldw": 31, "ldy": 51},
}


def _problem(name: str) -> Problem:
    if name not in PROBLEMS:
        raise ValueError(f"unknown problem {name!r}; known: {', '.join(PROBLEMS)}")
    return PROBLEMS[name]


class CallDataError(ValueError):
    """A call cell that is not a literal dict of the call's arguments; the message says what to write."""


def parse_call_cell(source: str, exercise: str) -> dict:
    """A call's arguments, read with ast (never run) from a ``%%cublas --name EXERCISE`` cell: a literal dict
    of str keys and str or int values, bare or assigned to ``CALL``. Raises `CallDataError` saying what to
    write."""
    example = '{"transa": "N", "transb": "N", "m": "n", ...}'
    call = cell_literal(source, exercise, what="call", names={"CALL", f"{exercise.upper()}_CALL"},
                        example=example, fill="the remaining arguments", error=CallDataError)
    if not isinstance(call, dict) or not all(isinstance(k, str) and (isinstance(v, str) or type(v) is int)
                                             for k, v in call.items()):
        raise CallDataError((f"the {exercise} call should be a dict of strings and ints, such as {example}; "
                             f"got {call!r}")[:400])
    return {str(k): (str(v) if isinstance(v, str) else int(v)) for k, v in call.items()}


def check_call(problem: str, call) -> str:
    """'' when ``call`` is a well-formed call for ``problem``, else what is wrong (no GPU needed)."""
    p = _problem(problem)
    example = '{"transa": "N", "transb": "N", "m": "n", ...}'
    if not isinstance(call, dict):
        return f"the call should be a dict such as {example}; got {type(call).__name__}"
    missing = [f for f in FIELDS if f not in call]
    extra = [f for f in call if f not in FIELDS]
    if missing or extra:
        return ("the call should have exactly the keys " + ", ".join(FIELDS)
                + (f"; missing: {', '.join(missing)}" if missing else "")
                + (f"; not cuBLAS parameters: {', '.join(map(repr, extra))}" if extra else "") + ".")
    for f in ("transa", "transb"):
        if call[f] not in _OPS:
            return f'{f} should be "N" (use the matrix as stored) or "T" (its transpose); got {call[f]!r}.'
    names = list(p.operands)
    for f in ("A", "B"):
        if call[f] not in names:
            return f"{f} should name one of this problem's inputs ({' or '.join(map(repr, names))}); got {call[f]!r}."
    if call["A"] == call["B"]:
        return f'A and B are both {call["A"]!r}: the product needs each input once.'
    sizes = p.size_names
    for f in ("m", "n", "k", "lda", "ldb", "ldc"):
        v = call[f]
        if type(v) is int:
            if v < 1:
                return f"{f} should be positive; got {v}."
        elif v not in sizes:
            return (f"{f} should be one of the problem's sizes ({', '.join(sizes)}) or a positive int; "
                    f"got {v!r}.")
    return ""


def resolve_call(problem: str, call: dict, sizes: dict) -> dict:
    """The call with every size name replaced by its value in ``sizes``."""
    problem_ = _problem(problem)
    missing = [s for s in problem_.size_names if s not in sizes]
    if missing:
        raise ValueError(f"sizes lack {', '.join(missing)}")
    return {f: (sizes[v] if isinstance(v, str) and f not in ("transa", "transb", "A", "B") else v)
            for f, v in call.items()}


def _operands(r: dict) -> tuple:
    """(cuBLAS name, rows and columns of op(X), ld, op) of A and B in a resolved call."""
    return (("A", r["m"], r["k"], r["lda"], r["transa"]), ("B", r["k"], r["n"], r["ldb"], r["transb"]))


def _reach(op: str, rows: int, cols: int, ld: int) -> tuple:
    """(stored rows, elements cuBLAS reads) of an ``op(X)`` that is ``rows x cols``, X column-major with ld."""
    srows, scols = (rows, cols) if op == "N" else (cols, rows)
    return srows, (scols - 1) * ld + srows


def _bounds_problem(r: dict, lens: dict) -> str:
    """'' when the resolved call stays inside the buffers (lens: name -> elements), else why not."""
    for which, rows, cols, ld, op in _operands(r):
        srows, reach = _reach(op, rows, cols, ld)
        what = f"op({which}) = {'' if op == 'N' else 'the transpose of '}{which}"
        if ld < srows:
            return (f"ld{which.lower()} = {ld} is smaller than the {srows} rows {which} has as cuBLAS stores it "
                    f"({what} is {rows} x {cols}); cuBLAS refuses this (CUBLAS_STATUS_INVALID_VALUE). In "
                    "column-major storage the leading dimension is the distance between columns.")
        name = r[which]
        if reach > lens[name]:
            return (f"with these arguments cuBLAS would read {reach} floats of {which} = {name!r}, which holds "
                    f"{lens[name]}: m, n, k or ld{which.lower()} describe a larger matrix than {name!r} is.")
    if r["ldc"] < r["m"]:
        return (f"ldc = {r['ldc']} is smaller than m = {r['m']}, the rows of cuBLAS's (column-major) C: "
                "cuBLAS refuses this (CUBLAS_STATUS_INVALID_VALUE).")
    if (r["n"] - 1) * r["ldc"] + r["m"] > lens["C"]:
        return (f"with these arguments cuBLAS would write {(r['n'] - 1) * r['ldc'] + r['m']} floats of C, "
                f"which holds {lens['C']}: m, n or ldc describe a larger matrix than the output.")
    return ""


def sgemm_call(problem: str, call: dict, arrays: dict, out, sizes: dict | None = None) -> None:
    """Make the one ``cublasSgemm`` call that ``call`` describes: alpha = 1, beta = 0, FP32 (no TF32).

    With NumPy arrays instead of CuPy ones, a NumPy model of ``cublasSgemm`` (column-major views of
    the same buffers) computes what cuBLAS would, so a call can be tried without a GPU.

    Parameters
    ----------
    problem : str
        A key of `PROBLEMS`.
    call : dict
        The arguments, as in the module docstring.
    arrays : dict
        The problem's inputs by name: float32 CuPy (or NumPy) arrays, each the flat buffer of a row-major matrix
        whose rows are ``ld`` apart (a 2-D C-contiguous array is its own buffer with ld = its width).
    out : cupy.ndarray
        The output's buffer (float32, C-contiguous).
    sizes : dict, optional
        m, n, k and the leading dimensions; default: read from 2-D C-contiguous ``arrays`` and ``out``.

    Raises
    ------
    ValueError
        When the call is malformed or would make cuBLAS read or write outside the buffers (checked
        before calling, so a wrong call never faults the GPU).
    """
    p = _problem(problem)
    problem_text = check_call(problem, call)
    if problem_text:
        raise ValueError(problem_text)
    if sizes is None:
        sizes = _sizes_of(p, arrays, out)
    bufs = {nm: arrays[nm] for nm in p.operands}
    for nm, x in list(bufs.items()) + [("output", out)]:
        if x.dtype != np.float32 or not x.flags.c_contiguous:
            raise TypeError(f"{nm} should be a C-contiguous float32 CuPy array; got {x.dtype}, "
                            f"c_contiguous={x.flags.c_contiguous}")
    r = resolve_call(problem, call, sizes)
    bad = _bounds_problem(r, {**{nm: x.size for nm, x in bufs.items()}, "C": out.size})
    if bad:
        raise ValueError(bad)
    if isinstance(out, np.ndarray):
        _sgemm_model(r, bufs, out)
        return
    import cupy

    from .cublas import handle
    cublas, h = handle()
    cublas.setStream(h, cupy.cuda.get_current_stream().ptr)
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    cublas.sgemm(h, _OPS[r["transa"]], _OPS[r["transb"]], r["m"], r["n"], r["k"], one.ctypes.data,
                 bufs[r["A"]].data.ptr, r["lda"], bufs[r["B"]].data.ptr, r["ldb"], zero.ctypes.data,
                 out.data.ptr, r["ldc"])


def _colmajor(buf: np.ndarray, rows: int, cols: int, ld: int) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(buf, shape=(rows, cols), strides=(buf.itemsize, ld * buf.itemsize))


def _sgemm_model(r: dict, bufs: dict, out: np.ndarray) -> None:
    """What cublasSgemm computes, on NumPy buffers (bounds already checked), in float64."""
    ops = []
    for which, rows, cols, ld, op in _operands(r):
        srows, scols = (rows, cols) if op == "N" else (cols, rows)
        stored = _colmajor(bufs[r[which]], srows, scols, ld).astype(np.float64)
        ops.append(stored if op == "N" else stored.T)
    _colmajor(out, r["m"], r["n"], r["ldc"])[...] = (ops[0] @ ops[1]).astype(np.float32)


def _sizes_of(p: Problem, arrays: dict, out) -> dict:
    (a_nm, (ar, ac, a_ld)), (b_nm, (br, bc, b_ld)) = p.operands.items()
    a, b = arrays[a_nm], arrays[b_nm]
    if a.ndim != 2 or b.ndim != 2 or out.ndim != 2:
        raise ValueError("pass sizes= for flat buffers; 2-D arrays give their own shapes")
    dims = dict(zip((ar, ac), a.shape))
    for nm, v in zip((br, bc), b.shape):
        if dims.setdefault(nm, v) != v:
            raise ValueError(f"{b_nm} is {b.shape}, which does not fit {a_nm} {a.shape} for {p.formula}")
    if out.shape != (dims["m"], dims["n"]):
        raise ValueError(f"the output is {out.shape}; {p.formula} is {(dims['m'], dims['n'])}")
    return {**dims, a_ld: a.shape[1], b_ld: b.shape[1], p.out_ld: out.shape[1]}


# --- one case: fresh inputs, padded rows, a poisoned output ---------------------------------------

def make_case(problem: str, sizes: dict, seed: int) -> tuple:
    """Fresh inputs for one case: (flat input buffers by name, the matrices they hold, output length).

    Rows are ``ld`` apart; the padding between rows holds random values too, so a call that reads it
    gives a visibly wrong result rather than zeros that might pass.
    """
    p = _problem(problem)
    rng = np.random.default_rng(seed)
    bufs, mats = {}, {}
    for nm, (rows, cols, ld) in p.operands.items():
        r, c, pitch = sizes[rows], sizes[cols], sizes[ld]
        buf = rng.uniform(-1, 1, r * pitch).astype(np.float32)
        bufs[nm], mats[nm] = buf, buf.reshape(r, pitch)[:, :c]
    return bufs, mats, sizes["m"] * sizes[p.out_ld]


def run_case(problem: str, call: dict, sizes: dict, seed: int, *, backend: str = "cupy") -> dict:
    """Run the call once on fresh inputs and check everything: {"status": "passed"|"failed", "message"}.

    Checked: the m x n result against a float64 product (rtol 1e-4 plus 1e-5 x its largest value, as
    for chapter 07's SGEMM), the output's padding between rows still poisoned (NaN), inputs unchanged.
    ``backend="numpy"`` makes the call on the NumPy model of cuBLAS instead (no GPU).
    """
    p = _problem(problem)
    bufs, mats, out_len = make_case(problem, sizes, seed)
    want = p.reference(mats)
    if backend == "numpy":
        xp, to_host = np, np.asarray
    else:
        import cupy as xp
        to_host = xp.asnumpy
    d_bufs = {nm: xp.array(b) for nm, b in bufs.items()}
    out = xp.full(out_len, np.nan, dtype=np.float32)
    try:
        sgemm_call(problem, call, d_bufs, out, sizes)
    except ValueError as exc:
        return {"status": "failed", "message": str(exc)}
    got = to_host(out).reshape(sizes["m"], sizes[p.out_ld])
    for nm, b in bufs.items():
        if not np.array_equal(to_host(d_bufs[nm]), b):
            return {"status": "failed", "message": f"the input {nm!r} changed: cuBLAS wrote into it."}
    n = sizes["n"]
    res = got[:, :n]
    tol = 1e-4 * np.abs(want) + 1e-5 * max(float(np.abs(want).max()), 1.0)
    bad = ~(np.abs(res - want) <= tol)
    if bad.any():
        i, j = map(int, np.argwhere(bad)[0])
        hint = _hint(problem, call)
        return {"status": "failed", "message": (
            f"{int(bad.sum())} of {res.size} results are wrong; first at [{i}][{j}]: expected "
            f"{want[i, j]:.6g}, got {res[i, j]:.6g}. {hint}")}
    pad = got[:, n:]
    if pad.size and not np.isnan(pad).all():
        return {"status": "failed", "message": (
            f"the result is right, but cuBLAS also wrote into the padding at the end of the output's rows "
            f"(columns {n} to {sizes[p.out_ld] - 1}): the call's ldc or m does not match the output's layout.")}
    return {"status": "passed", "message": ""}


def _hint(problem: str, call: dict) -> str:
    p = _problem(problem)
    out_ld = p.out_ld
    if call.get("ldc") != out_ld:
        return f"Check ldc: the output's rows are {out_ld} floats apart."
    return ("cuBLAS reads every buffer column-major: a row-major matrix is the column-major storage of its "
            "transpose, with the row pitch as leading dimension. Write the product cuBLAS should compute in "
            "those terms (the transpose of the output), then read off transa/transb, m, n, k and the lds.")
