"""Diagrams of how a kernel cuts its work into tiles: a GEMM's block, warp, thread and K-slice levels, a
tile transpose through shared memory, and a convolution thread's sliding window of registers.

The drawings take every size and position as arguments; the lesson modules read those from the kernels
themselves (their ``#define``s, shared declarations and index formulas), so a picture cannot show a tiling
the kernel does not use. Only matplotlib is needed: no GPU, no CUDA.
"""
from __future__ import annotations

__all__ = ["gemm_tiling", "register_window", "tile_transpose"]


def _grid(ax, x0, y0, w, h, step_x, step_y, **kw):
    for x in range(0, w + 1, step_x):
        ax.plot([x0 + x, x0 + x], [y0, y0 + h], **kw)
    for y in range(0, h + 1, step_y):
        ax.plot([x0, x0 + w], [y0 + y, y0 + y], **kw)


def gemm_tiling(block: tuple, bk: int, warp_tile: tuple, warp_origins: list, unit_tile: tuple, unit_origins: list,
                *, unit: str = "thread", title: str = "", pick: tuple = (1, 1)):
    """Two panels: the block's C tile between its K-slices of A and B, split into warp tiles; and one warp tile
    split into its units (threads' output tiles, or WMMA fragments).

    ``block`` = (BM, BN); ``warp_origins``: (row, col) of each warp's (WM, WN) tile inside the block;
    ``unit_origins``: (row, col) of each unit's tile inside a warp tile, in lane (or fragment) order;
    ``pick`` = (warp, unit) highlighted, with the rows of A and columns of B that unit reads at one k.
    Returns the figure.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    bm, bn = block
    wm, wn = warp_tile
    um, un = unit_tile
    fig, (ax, az) = plt.subplots(1, 2, figsize=(13, 5.6), gridspec_kw={"width_ratios": [1.25, 1]})
    gap = max(bm, bn) // 16
    # panel 1: A slice (left), B slice (top), C block (bottom right); y grows downwards like a matrix
    ax.add_patch(Rectangle((0, bk + gap), bk, bm, fc="tab:blue", alpha=0.15, ec="tab:blue"))
    ax.add_patch(Rectangle((bk + gap, 0), bn, bk, fc="tab:green", alpha=0.15, ec="tab:green"))
    cx, cy = bk + gap, bk + gap
    ax.add_patch(Rectangle((cx, cy), bn, bm, fc="none", ec="black", lw=1.5))
    for w, (r, c) in enumerate(warp_origins):
        ax.add_patch(Rectangle((cx + c, cy + r), wn, wm, fc="tab:orange" if w == pick[0] else "none",
                               alpha=0.35 if w == pick[0] else 1, ec="gray", lw=0.6))
        ax.text(cx + c + wn / 2, cy + r + wm / 2, f"warp {w}", ha="center", va="center", fontsize=7)
    wr, wc = warp_origins[pick[0]]
    ur, uc = unit_origins[pick[1]]
    r, c = wr + ur, wc + uc
    ax.add_patch(Rectangle((cx + c, cy + r), un, um, fc="tab:red", ec="tab:red"))
    ax.add_patch(Rectangle((0, cy + r), bk, um, fc="tab:red", alpha=0.6, lw=0))      # the A rows it reads
    ax.add_patch(Rectangle((cx + c, 0), un, bk, fc="tab:red", alpha=0.6, lw=0))      # the B columns it reads
    ax.text(-gap / 3, cy + bm / 2, f"A slice {bm} x {bk}", ha="right", va="center", rotation=90, fontsize=8)
    ax.text(cx - gap / 3, bk / 2, f"B slice\n{bk} x {bn}", ha="right", va="center", fontsize=8)
    ax.text(cx + bn / 2, cy + bm + gap / 2, f"block tile of C: {bm} x {bn}, {len(warp_origins)} warps of "
            f"{wm} x {wn}", ha="center", va="top", fontsize=9)
    ax.set_xlim(-1.5 * gap, cx + bn + gap)
    ax.set_ylim(cy + bm + 2.5 * gap, -gap)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"block -> warps; K advances {bk} at a time (red: what {unit} {pick[1]} of warp {pick[0]} "
                 "reads and writes)", fontsize=9)
    # panel 2: the picked warp's tile and its units
    az.add_patch(Rectangle((0, 0), wn, wm, fc="tab:orange", alpha=0.2, ec="black", lw=1.5))
    for i, (r0, c0) in enumerate(unit_origins):
        az.add_patch(Rectangle((c0, r0), un, um, fc="tab:red" if i == pick[1] else "none", alpha=0.5 if i == pick[1]
                               else 1, ec="gray", lw=0.6))
        az.text(c0 + un / 2, r0 + um / 2, str(i), ha="center", va="center", fontsize=7 if len(unit_origins) > 8 else 9)
    if um * un <= 64:
        _grid(az, uc, ur, un, um, 1, 1, color="tab:red", lw=0.3)
    az.set_xlim(-1, wn + 1)
    az.set_ylim(wm + 1, -1)
    az.set_aspect("equal")
    az.axis("off")
    az.set_title(f"warp {pick[0]}: {wm} x {wn} outputs = {len(unit_origins)} {unit}s of {um} x {un}",
                 fontsize=9)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def tile_transpose(tile: tuple, row_words: int, block: tuple, *, banks: int = 32, title: str = ""):
    """Three panels: a warp reading rows of the input tile, the shared tile coloured by bank (the column the
    warp reads back outlined, with its banks), and the warp writing that column as a row of the output.

    ``tile`` = (rows, cols) of the tile; ``row_words`` the shared array's row length in 4-byte words (cols, or
    cols + padding); ``block`` = (x, y) threads: a warp is one threadIdx.y, and each thread moves
    rows / y elements, ``y`` rows apart. Returns (figure, the banks of the column read back).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    tr, tc = tile
    bx, by = block
    steps = list(range(0, tr, by))        # the rows warp 0 moves: its threadIdx.y plus k
    col_banks = [(r * row_words) % banks for r in range(tr)]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    cmap = plt.get_cmap("hsv")
    for ax, name in zip(axes, ("input tile (rows r0.., cols c0..)", f"shared tile[{tr}][{row_words}], colour = bank",
                               "output tile (rows c0.., cols r0..)")):
        ax.set_xlim(-0.5, max(tc, row_words) + 0.5)
        ax.set_ylim(tr + 0.5, -0.5)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(name, fontsize=9)
    a_in, a_sh, a_out = axes
    a_in.add_patch(Rectangle((0, 0), tc, tr, fc="none", ec="black"))
    a_out.add_patch(Rectangle((0, 0), tr, tc, fc="none", ec="black"))
    for r in range(tr):
        for c in range(row_words):
            pad = c >= tc
            a_sh.add_patch(Rectangle((c, r), 1, 1, fc="white" if pad else cmap(((r * row_words + c) % banks) / banks),
                                     alpha=0.55, hatch="///" if pad else None, ec="gray", lw=0.2))
    for k in steps:
        a_in.add_patch(Rectangle((0, k), min(bx, tc), 1, fc="tab:orange", alpha=0.8))
        a_out.add_patch(Rectangle((0, k), min(bx, tr), 1, fc="tab:orange", alpha=0.8))
    a_sh.add_patch(Rectangle((0, 0), 1, tr, fc="none", ec="black", lw=2))
    for r in range(0, tr, max(1, tr // 8)):
        a_sh.text(-0.7, r + 0.5, str(col_banks[r]), ha="right", va="center", fontsize=6)
    distinct = len(set(col_banks))
    a_in.set_xlabel(f"warp 0 (threadIdx.y = 0) reads rows {', '.join(map(str, steps))}: {bx} floats each, coalesced",
                    fontsize=8)
    a_sh.set_xlabel(f"column 0 read back by warp 0: {distinct} distinct banks ({tr // distinct}-way "
                    "conflict)" if distinct < tr else f"column 0 read back: {distinct} distinct banks, no conflict",
                    fontsize=8)
    a_out.set_xlabel(f"... and writes columns {', '.join(map(str, steps))} of the tile as rows of the output",
                     fontsize=8)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig, col_banks


def _window_trace(taps: int, r: int) -> dict:
    """Replay the tap loop of chapter 09's ``conv_reg`` for one thread, on sample offsets from its first output
    ``i0``: what ``a[0..r-1]`` holds at each tap, which x it loads next, and the loads and FMAs it issues."""
    a = list(range(r))                    # the prologue: a[q] = x[i0 + q]
    x_loads, w_loads, fmas, rows = r, 0, 0, []
    for j0 in range(0, taps, r):
        for k in range(r):
            j = j0 + k
            w_loads += 1                  # wj = c_taps[j]
            window = tuple(a)
            fmas += r                     # acc[q] = fmaf(a[q], wj, acc[q])
            a = a[1:] + [None]            # the slide a[q] = a[q + 1]
            new = r + j if j + 1 < taps else None
            if new is not None:
                a[r - 1] = new
                x_loads += 1
            rows.append({"tap": j, "window": window, "new": new})
    return {"x_loads": x_loads, "w_loads": w_loads, "fmas": fmas, "rows": rows}


def register_window(taps: int, outputs: int, step: int = 0, *, steps: int = 4, title: str = ""):
    """Consecutive taps of a convolution thread that computes ``outputs`` (R) results from a sliding window
    of R registers, as chapter 09's ``conv_reg`` does: per tap, the samples ``a[0..R-1]`` hold, the tap
    ``w[j]`` they are multiplied by, the outputs they feed, and the one sample loaded for the next tap.

    ``taps`` (G) must be a multiple of R, as the kernel's loop of R taps per trip assumes; ``step`` is the
    first tap drawn. The counts come from replaying the kernel's loop, not from a formula. Returns (figure,
    trace): the trace has ``x_loads``, ``w_loads`` and ``fmas`` of the whole loop, ``per_tap`` (loads per
    FMA at one tap) and ``rows``, one per drawn tap: ``tap``, ``window`` (offsets from the thread's first
    output) and ``new`` (the offset loaded for the next tap, None at the last).
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba
    from matplotlib.patches import Rectangle
    r, g = int(outputs), int(taps)
    if r < 1 or g < 1 or g % r:
        raise ValueError(f"register_window needs R >= 1 outputs and a tap count that is a multiple of R (the "
                         f"kernel's tap loop takes R taps per trip); got {g} taps and R = {r}")
    if not 0 <= step < g or steps < 1:
        raise ValueError(f"step is the first tap drawn, 0 to {g - 1}, and steps at least 1; got step {step}, "
                         f"steps {steps}")
    trace = _window_trace(g, r)
    rows = trace["rows"][step:step + steps]
    first = rows[0]
    track = first["window"][-1]                         # the newest sample at the first tap, followed down
    uses = sum(track in row["window"] for row in trace["rows"])
    trace.update(rows=rows, per_tap=(1 + (first["new"] is not None)) / r)
    lo = first["window"][0]                             # the leftmost sample drawn
    ncols = max(row["window"][-1] if row["new"] is None else row["new"] for row in rows) - lo + 1
    fig, ax = plt.subplots(figsize=(0.55 * ncols + 6, 1.0 + 0.6 * (len(rows) + 3)))
    blue, new_c, red = "tab:blue", "tab:orange", "tab:red"
    for k in range(lo, lo + ncols):
        ax.text(k - lo + 0.5, -0.3, str(k), ha="center", va="bottom", fontsize=7, color="gray")
    ax.text(-0.3, -0.3, "x[i0 + k], k =", ha="right", va="bottom", fontsize=8, color="gray")
    for s, row in enumerate(rows):
        y0 = s * 1.25
        for q, k in enumerate(row["window"]):
            ax.add_patch(Rectangle((k - lo, y0), 1, 1, fc=to_rgba(blue, 0.25), ec=red if k == track else "gray",
                                   lw=2 if k == track else 0.5))
            ax.text(k - lo + 0.5, y0 + 0.5, f"a[{q}]", ha="center", va="center", fontsize=6)
        if row["new"] is not None:
            ax.add_patch(Rectangle((row["new"] - lo, y0), 1, 1, fc=new_c, alpha=0.6, ec="gray", lw=0.5))
            ax.text(row["new"] - lo + 0.5, y0 + 0.5, "load", ha="center", va="center", fontsize=6)
        loads = f"w[{row['tap']}]" + (f" and x[i0 + {row['new']}]" if row["new"] is not None else " (last tap: no x)")
        ax.text(-0.3, y0 + 0.5, f"tap j = {row['tap']}", ha="right", va="center", fontsize=8)
        ax.text(ncols + 0.3, y0 + 0.5, f"acc[q] += a[q] * w[{row['tap']}], q = 0..{r - 1}: {r} FMAs\nloads {loads}",
                ha="left", va="center", fontsize=7)
    # the outputs: acc[q] is y[i0 + q] for every tap; red marks those the tracked sample feeds, with its tap
    y0 = len(rows) * 1.25 + 0.35
    fed = {track - row["window"][0]: row["tap"] for row in rows if track in row["window"]}
    for q in range(r):
        ax.add_patch(Rectangle((q, y0), 1, 1, fc=to_rgba(red, 0.35) if q in fed else "white", ec="black", lw=0.6))
        ax.text(q + 0.5, y0 + 0.5, f"acc[{q}]" + (f"\nw[{fed[q]}]" if q in fed else ""), ha="center",
                va="center", fontsize=6)
    ax.text(-0.3, y0 + 0.5, "acc[q] = y[i0 + q]", ha="right", va="center", fontsize=8)
    total = (trace["x_loads"] + trace["w_loads"]) / trace["fmas"]
    x_first = int(first["new"] is not None)
    ax.text(0, y0 + 1.35, f"blue: the registers a[0..{r - 1}]; orange: the sample loaded for the next tap; red: "
            f"x[i0 + {track}], loaded once, feeds {len(fed)} FMAs here ({uses} over the whole loop), one output per "
            f"tap.\nAt tap {first['tap']}: {r} FMAs for {x_first} load of x and 1 of w, {trace['per_tap']:.3g} loads "
            f"per FMA (variants 3 and 4: 2). Whole loop, {g} taps: {trace['x_loads']} loads of x ({r} to fill the "
            f"window, then one per tap but the last),\n{trace['w_loads']} of w, {trace['fmas']:,} FMAs: "
            f"{total:.3g} loads per FMA.", ha="left", va="top", fontsize=8)
    ax.set_xlim(-4.5, ncols + 7.5)
    ax.set_ylim(y0 + 2.6, -0.8)
    ax.axis("off")
    ax.set_title(title or f"one thread's register window: R = {r} outputs, G = {g} taps (taps {rows[0]['tap']} "
                 f"to {rows[-1]['tap']})", fontsize=10)
    fig.tight_layout()
    return fig, trace
