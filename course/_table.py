"""Aligned text tables for notebooks and scripts (no pandas needed)."""
from __future__ import annotations

__all__ = ["print_table", "format_value"]


def format_value(v, floatfmt: str | None = None) -> str:
    """A cell's text: floats with ``floatfmt`` (default: 4 significant digits, scientific when tiny or
    huge), None as blank, anything else with ``str``."""
    if isinstance(v, float):
        if floatfmt:
            return floatfmt.format(v)
        return f"{v:.3e}" if v and (abs(v) < 1e-2 or abs(v) >= 1e5) else f"{v:.4g}"
    return "" if v is None else str(v)


def print_table(rows: list, columns=None, floatfmt: str | None = None) -> None:
    """Print a list of dicts as an aligned table of ``columns`` (default: the first row's keys)."""
    if not rows:
        print("(no rows)")
        return
    columns = list(columns or rows[0])
    cells = [[format_value(r.get(c), floatfmt) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[j]) for row in cells)) for j, c in enumerate(columns)]
    print(" | ".join(c.ljust(w) for c, w in zip(columns, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in cells:
        print(" | ".join(v.ljust(w) for v, w in zip(row, widths)))
