"""Chapter 14's pictures (flash attention): how one pass over a row of scores computes its softmax, why every
softmax subtracts the max, what the fused kernel saves in DRAM traffic and memory, and which tiles it runs.

Every picture is drawn from this module's NumPy models (rules in their docstrings): `online_softmax_steps`,
the running max and sum a FlashAttention query row keeps; `attention_traffic`, the DRAM bytes of one forward
pass with and without the N x N scores in memory; `tile_schedule`, which (query block, key tile) pairs a fused
kernel skips, runs, or runs masked. Each plot returns the figure and the numbers it drew, for a test to check.
"""
from __future__ import annotations

import numpy as np

__all__ = ["online_softmax_steps", "plot_online_softmax", "overflow_table", "attention_traffic", "plot_traffic",
           "tile_schedule", "plot_tiles"]

HBM_GB = {"H100": 80, "H200": 141}      # as sold (1 GB = 1e9 B); the driver and CUDA context keep a little
_KINDS = ("skipped", "full", "masked")   # the codes 0, 1, 2 of a tile_schedule grid


def online_softmax_steps(x, block: int, v=None):
    """One row of scores ``x`` consumed ``block`` at a time, the way a query row meets its K tiles.

    After each block: ``m`` the running max, ``l`` the running sum of exp(x - m), and ``factor`` =
    exp(m_old - m_new), which rescales the old sum (and the output accumulator) to the new max: exactly 1 where
    the max did not grow (``grew`` False), 0 at the first block (m_old = -inf, nothing summed yet). ``ends`` is
    the index after each block; with values ``v`` (len(x) x d), ``o`` is the running sum of exp(x - m) v.
    Returns (steps, m, l): softmax(x) = exp(x - m) / l and softmax(x) @ v = o[-1] / l, from one read of x."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 1 or not x.size or block < 1 or not np.isfinite(x).all():
        raise ValueError(f"x is a non-empty 1-D row of finite scores and block >= 1; got {x.shape}, {block}")
    ends = np.minimum(np.arange(block, x.size + block, block), x.size)
    m, l, o = -np.inf, 0.0, None if v is None else np.zeros(np.shape(v)[1:])
    steps = {"m": [], "l": [], "factor": [], "grew": []} | ({} if v is None else {"o": []})
    for start, end in zip(np.r_[0, ends[:-1]], ends):
        m_new = max(m, x[start:end].max())
        factor = np.exp(m - m_new)
        p = np.exp(x[start:end] - m_new)
        l = l * factor + p.sum()
        if v is not None:
            o = o * factor + p @ np.asarray(v, dtype=np.float64)[start:end]
            steps["o"].append(o)
        for key, val in zip(("m", "l", "factor", "grew"), (m_new, l, factor, m_new > m)):
            steps[key].append(val)
        m = m_new
    return {**{k: np.array(s) for k, s in steps.items()}, "ends": ends}, float(m), float(l)


def plot_online_softmax(x, block: int = 4):
    """`online_softmax_steps` drawn: top, the scores (bars) in blocks (dotted) under the running max, red where it
    grew; bottom, the running sum l, red where the old l was rescaled (factor written). Returns (fig, steps)."""
    import matplotlib.pyplot as plt
    steps, m, l = online_softmax_steps(x, block)
    fig, (ax, az) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    ax.bar(np.arange(steps["ends"][-1]), x, color="0.75")
    for b, (s, e) in enumerate(zip(np.r_[0, steps["ends"][:-1]], steps["ends"])):
        grew = b > 0 and bool(steps["grew"][b])     # the first block only sets the max: nothing to rescale
        for a, key in ((ax, "m"), (az, "l")):
            a.hlines(steps[key][b], s - 0.5, e - 0.5, color="tab:red" if grew else "tab:blue", lw=2.5)
        if grew:
            az.text((s + e - 1) / 2, steps["l"][b], f"old l x {steps['factor'][b]:.3g}", ha="center",
                    va="bottom", fontsize=7)
    for a in (ax, az):
        a.vlines(steps["ends"][:-1] - 0.5, 0, 1, transform=a.get_xaxis_transform(), colors="k", ls=":")
    ax.set_ylabel("score x; line: running max m")
    az.set(xlabel="position in the row", ylabel="running sum l of exp(x - m)")
    ax.set_title(f"{steps['ends'][-1]} scores, blocks of {block}: after the first block the max grew "
                 f"{steps['grew'][1:].sum()} time(s), rescaling l; softmax = exp(x - {m:.3g}) / {l:.4g}", size=9)
    return fig, steps


def overflow_table(vectors=((1, 2, 3), (80, 81, 82), (100, 101, 102), (1000, 1001, 1002))) -> list:
    """Why softmax subtracts the max: per score vector, the FP32 softmax naively, exp(x) / sum exp(x), and with
    the max subtracted; then per format the largest x whose exp is finite (as "scores"). BF16 keeps FP32's 8
    exponent bits, so the same 88.7 (its largest value is a hair smaller); FP16's 5 overflow past 11.1. With the
    max subtracted every exponent is <= 0: each exp is in (0, 1], the sum in [1, len(x)], whatever the scores."""
    rows = []
    for scores in vectors:
        x = np.asarray(scores, dtype=np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            e = np.exp(x)
            naive = e / e.sum()
        safe = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
        rows.append({"format": "FP32", "scores": list(scores), "exp(max x)": float(e.max()),
                     "naive": [round(float(p), 4) for p in naive],
                     "max subtracted": [round(float(p), 4) for p in safe],
                     "note": "fine" if np.isfinite(naive).all() else "exp overflows to inf: inf / inf = nan"})
    largest = {"FP32": (float(np.finfo(np.float32).max), "8 exponent bits"),
               "BF16": ((2 - 2.0 ** -7) * 2.0 ** 127, "FP32's 8 exponent bits: the same range"),
               "FP16": (float(np.finfo(np.float16).max), "5 exponent bits")}
    for fmt, (big, why) in largest.items():
        rows.append({"format": fmt, "scores": float(np.log(big)), "exp(max x)": big, "naive": None,
                     "max subtracted": None, "note": f"largest x with exp(x) finite; {why}"})
    return rows


def attention_traffic(n, bh: int = 64, d: int = 128, br: int = 128, elem: int = 2) -> dict:
    """DRAM bytes of one attention forward pass, ``bh`` heads of ``n`` x ``d`` Q, K, V (``elem`` bytes each)
    and an FP32 O; ``n`` a scalar or an array. Naive: S = Q K^T reads Q, K, writes S (FP32, n x n); the softmax
    reads S, writes P (FP32); P V reads P, V, writes O. Fused: each of the ceil(n / br) query blocks reads its Q
    rows once and streams all of K and V: an upper bound, as blocks running together share K, V tiles in L2.
    Both grow as n^2, so the ratio tends to 8 br / (d elem); what fusion removes for good is ``s_bytes``."""
    n = np.asarray(n, dtype=np.float64)
    qkv, o = n * d * elem, n * d * 4.0
    naive = bh * (3 * qkv + 4 * (4.0 * n * n) + o)       # S and P cross DRAM twice each: 16 B a score
    flash = bh * (qkv + 2 * np.ceil(n / br) * qkv + o)
    return {"naive": naive, "flash": flash, "s_bytes": bh * 4.0 * n * n, "ratio": naive / flash}


def plot_traffic(ns, bh: int = 64, d: int = 128, br: int = 128):
    """`attention_traffic` against sequence length, log-log, with the naive pass's S (dashed) against the H100's
    and H200's memory: right of the dotted lines S alone no longer fits. Returns (figure, info): the traffic
    dict, ``n`` and ``fits`` (per GPU, the largest n whose S fits)."""
    import matplotlib.pyplot as plt
    ns = np.atleast_1d(ns).astype(np.float64)
    t = attention_traffic(ns, bh, d, br)
    fits = {gpu: int(np.sqrt(gb * 1e9 / (4 * bh))) for gpu, gb in HBM_GB.items()}
    fig, ax = plt.subplots(figsize=(9, 5.5))
    ax.loglog(ns, t["naive"] / 1e9, "o-", color="tab:red", label="naive: S and P through DRAM")
    ax.loglog(ns, t["flash"] / 1e9, "s-", color="tab:blue", label=f"fused: K, V once per {br}-row block (bound)")
    ax.loglog(ns, t["s_bytes"] / 1e9, "--", color="black", label="naive's footprint: S alone (FP32)")
    for (gpu, gb), color in zip(HBM_GB.items(), ("tab:purple", "tab:green")):
        ax.axhline(gb, color=color, lw=1)
        ax.axvline(fits[gpu], color=color, ls=":", lw=1)
        ax.text(ns[0], gb * 1.15, f"{gpu}: {gb} GB, S fits up to n = {fits[gpu]}", color=color, fontsize=8)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="sequence length n", ylabel="GB (1e9 bytes)")
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(f"one forward pass, {bh} heads x d = {d}, BF16 in, FP32 out: at n = {int(ns[-1])} naive moves "
                 f"{t['ratio'][-1]:.1f}x the fused bound", fontsize=9)
    return fig, {"n": ns, **t, "fits": fits}


def tile_schedule(n: int, br: int, bc: int, causal: bool):
    """Which tiles an ``n`` x ``n`` attention runs: rows are query blocks of ``br``, columns key tiles of ``bc``.
    0 = skipped (causal, and every key of the tile is past every query of the block), 1 = run without a mask,
    2 = run with the element-wise mask: the tile crosses the diagonal (causal), or it is the last key tile and
    holds keys >= n (when bc does not divide n). Returns (grid, counts, fraction): counts per kind, and the
    tiles run over all tiles: for causal, with bc dividing br dividing n, (n/br + 1) / (2 n/br), -> 1/2."""
    if min(n, br, bc) < 1:
        raise ValueError(f"n, br and bc are at least 1; got {n}, {br}, {bc}")
    q0, k0 = np.arange(-(-n // br))[:, None] * br, np.arange(-(-n // bc))[None, :] * bc
    q1, k1 = np.minimum(q0 + br, n) - 1, np.minimum(k0 + bc, n) - 1
    masked = (k0 + bc > n) | (causal & (k1 > q0))
    grid = np.where(causal & (k0 > q1), 0, np.where(masked, 2, 1))
    counts = {kind: int((grid == code).sum()) for code, kind in enumerate(_KINDS)}
    return grid, counts, float((grid > 0).mean())


def plot_tiles(n: int = 1024, br: int = 128, bc: int = 64, causal: bool = True):
    """`tile_schedule` as a grid in element units (queries down, keys across), the diagonal key = query drawn,
    the tile boundaries white. Returns (figure, info): ``grid``, ``counts`` and ``fraction``."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    grid, counts, fraction = tile_schedule(n, br, bc, causal)
    colors = ("#eeeeee", "#6baed6", "#fd8d3c")
    (rows, cols), (h, w) = grid.shape, (grid.shape[0] * br, grid.shape[1] * bc)
    fig, ax = plt.subplots(figsize=(7, 7 * h / w + 0.8))
    ax.imshow(grid, cmap=ListedColormap(colors), vmin=0, vmax=2, extent=(0, w, h, 0), interpolation="nearest")
    ax.vlines(np.arange(cols + 1) * bc, 0, h, color="white", lw=0.8)
    ax.hlines(np.arange(rows + 1) * br, 0, w, color="white", lw=0.8)
    ax.plot([0, n], [0, n], color="black", lw=1.2)
    ax.axvline(n, color="black", ls=":", lw=1)         # past it, the last key tile's columns hold no key
    ax.legend([Patch(fc=c) for c in colors] + [plt.Line2D([], [], color="black")],
              [f"{k} ({counts[k]})" for k in _KINDS] + ["key = query"], fontsize=8, loc="upper right")
    ax.set(xlabel=f"key index ({cols} tiles of {bc})", ylabel=f"query index ({rows} blocks of {br})")
    ax.set_title(f"{'causal' if causal else 'full'} attention, n = {n}: {grid.size - counts['skipped']} of "
                 f"{grid.size} tiles run ({fraction:.0%})", fontsize=9)
    return fig, {"grid": grid, "counts": counts, "fraction": fraction}
