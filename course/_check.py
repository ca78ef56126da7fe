"""Compare an output with its reference the way the course and the grader do."""
from __future__ import annotations

import dataclasses

import numpy as np

from ._errors import CheckError

__all__ = ["CheckResult", "check", "assert_close", "default_tolerance"]

# (rtol, atol relative to the reference's scale): float32 sums of O(k) terms land far under 1e-4
_TOL = {np.dtype(np.float64): (1e-10, 1e-12), np.dtype(np.float32): (1e-4, 1e-5),
        np.dtype(np.float16): (5e-3, 1e-3)}
BF16_TOL = (2e-2, 1e-2)


def default_tolerance(dtype) -> tuple:
    """(rtol, atol_scale) for ``dtype``; integers and booleans are exact (0, 0).

    ``atol_scale`` is multiplied by the reference's largest magnitude, so a result whose values are
    all around 1e6 is not held to an absolute error meant for values around 1.
    """
    dt = np.dtype(dtype)
    if dt.kind in "iub":
        return 0.0, 0.0
    return _TOL.get(dt, (1e-3, 1e-4))


def _on_device(a) -> bool:
    return type(a).__module__.startswith("cupy") and hasattr(a, "__cuda_array_interface__")


def _host(a):
    if hasattr(a, "get") and not isinstance(a, np.ndarray):
        return a.get()
    return np.asarray(a)


def _arrays(out, ref) -> tuple:
    """(array module, out, ref): CuPy when both already live on the GPU, so that a check of hundreds of MiB
    costs milliseconds there instead of seconds of NumPy; NumPy otherwise. Each comparison below is one
    elementwise operation rounded once, on either side (no fused multiply-add), so the verdicts agree."""
    if _on_device(out) and _on_device(ref):
        import cupy
        return cupy, out, ref
    return np, _host(out), _host(ref)


@dataclasses.dataclass
class CheckResult:
    """Outcome of `check`; truthy when the output matches."""

    ok: bool
    name: str
    n_bad: int = 0
    n_total: int = 0
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    message: str = ""
    first_bad: list = dataclasses.field(default_factory=list)  # (index tuple, yours, expected)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self.message


def _fmt_index(idx) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def check(out, ref, *, rtol: float | None = None, atol: float | None = None, name: str = "output",
          max_report: int = 5) -> CheckResult:
    """Compare ``out`` with ``ref`` elementwise.

    Passes where ``|out - ref| <= atol + rtol * |ref|``, with ``atol`` defaulting to the dtype's
    absolute term times the largest ``|ref|``. NaN and Inf must sit at the same places in both (NaN
    where the reference is finite never passes). Integer outputs must match exactly. Shapes must match.

    Returns
    -------
    CheckResult
        ``.message`` lists the first mismatches with indices, "yours" vs "expected", and the fraction
        wrong, ready to show a student.
    """
    xp, o, r = _arrays(out, ref)
    if o.shape != r.shape:
        return CheckResult(False, name, message=(
            f"{name}: shape {o.shape} differs from the expected {r.shape}. Check how the output is "
            "allocated and reshaped."), n_total=int(r.size))
    if r.size == 0:
        return CheckResult(True, name, message=f"{name}: empty, nothing to compare")
    d_rtol, d_atol_scale = default_tolerance(r.dtype)
    if o.dtype.kind in "iub" and r.dtype.kind in "iub":
        bad = o != r
        abs_err = xp.abs(o.astype(xp.float64) - r.astype(xp.float64))
        rel = xp.zeros_like(abs_err)
    else:
        of, rf = o.astype(xp.float64), r.astype(xp.float64)
        rtol = d_rtol if rtol is None else rtol
        finite_ref = xp.isfinite(rf)
        scale = float(xp.max(xp.abs(rf[finite_ref]))) if finite_ref.any() else 1.0
        atol = d_atol_scale * max(scale, 1e-30) if atol is None else atol
        with np.errstate(invalid="ignore", over="ignore"):
            abs_err = xp.abs(of - rf)
            close = abs_err <= atol + rtol * xp.abs(rf)
            # non-finite values must agree exactly: same NaN positions, same signed infinities
            nonfinite = ~finite_ref | ~xp.isfinite(of)
            same_nonfinite = (xp.isnan(of) & xp.isnan(rf)) | (xp.isinf(of) & (of == rf))
            bad = xp.where(nonfinite, ~same_nonfinite, ~close)
            denom = xp.where(xp.abs(rf) > 0, xp.abs(rf), 1.0)
            rel = xp.where(xp.abs(rf) > 0, abs_err / denom, abs_err)
    n_bad = int(bad.sum())
    finite_err = abs_err[xp.isfinite(abs_err)]
    max_abs = float(finite_err.max()) if finite_err.size else float("inf")
    finite_rel = rel[xp.isfinite(rel)]
    max_rel = float(finite_rel.max()) if finite_rel.size else float("inf")
    if n_bad == 0:
        return CheckResult(True, name, 0, int(r.size), max_abs, max_rel,
                           f"{name}: all {r.size} values match (max abs error {max_abs:.3g})")
    idx = [tuple(int(i) for i in ix) for ix in _host(xp.argwhere(bad)[:max_report])]
    first = [(ix, o[ix].item(), r[ix].item()) for ix in idx]
    lines = [f"{name}: {n_bad} of {r.size} values wrong ({100.0 * n_bad / r.size:.3g}%)."]
    for ix, yv, ev in first:
        lines.append(f"  at {_fmt_index(ix)}: yours {yv!r}, expected {ev!r}")
    if n_bad > len(first):
        lines.append(f"  ... and {n_bad - len(first)} more")
    nan_out = int(xp.isnan(o).sum()) if o.dtype.kind == "f" else 0
    if nan_out and nan_out == n_bad:
        lines.append("  Every wrong value is NaN: those elements were probably never written "
                     "(check the bounds test and the grid size).")
    elif o.dtype.kind not in "iub":
        lines.append(f"  Tolerance: |yours - expected| <= {atol:.3g} + {rtol:.3g} * |expected|.")
    return CheckResult(False, name, n_bad, int(r.size), max_abs, max_rel, "\n".join(lines), first)


def assert_close(out, ref, **kw) -> CheckResult:
    """`check`, raising `CheckError` with the same message when the output does not match."""
    res = check(out, ref, **kw)
    if not res:
        raise CheckError(res.message)
    return res
