"""Chapter 06, the single-pass scan: decoupled look-back modelled on the CPU.

`simulate` plays a small, deterministic schedule: blocks take tiles by ticket, scan them, publish an
aggregate (A), look back one window of predecessors per time step, and publish an inclusive prefix (P).
The notebook draws it (`plot_timeline`), walks one tile's look-back (`walk`), shows the warp's view of one
window (`window`: what `__ballot_sync`, `__ffs` and `__shfl_xor_sync` compute) and, with float totals,
shows that the prefixes depend on the schedule. No GPU is involved.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["EXAMPLE_STEPS", "Lookback", "simulate", "plot_timeline", "walk", "window", "butterfly"]

X, A, P = 0, 1, 2              # a status word's flag: not published, aggregate, inclusive prefix
NAMES = "XAP"
EXAMPLE_STEPS = (5, 2, 3, 2, 3, 2, 3, 2, 4, 2, 3, 2)  # time steps each tile's scan takes, in ticket order


@dataclass
class Lookback:
    """What `simulate` played: per tile its start, the steps at which A and P became visible, the prefix
    it published and the tile whose P ended its look-back, and every window a look-back read as (time,
    tile, tiles read, flags seen, what it did)."""
    totals: np.ndarray
    start: list = field(default_factory=list)
    stopped_at: list = field(default_factory=list)
    a_at: list = field(default_factory=list)
    p_at: list = field(default_factory=list)
    prefix: np.ndarray = None
    reads: list = field(default_factory=list)


def butterfly(values) -> list:
    """Every lane's value after each round of ``v += __shfl_xor_sync(full, v, off)`` for off = n/2 .. 1 (a
    power-of-two lane count): lane l adds lane l ^ off, so after log2(n) rounds every lane holds the total.

    >>> [r.tolist() for r in butterfly([1, 2, 3, 4])]
    [[1, 2, 3, 4], [4, 6, 4, 6], [10, 10, 10, 10]]
    """
    v = np.asarray(values)
    if v.size & (v.size - 1):
        raise ValueError(f"a butterfly needs a power-of-two number of lanes; got {v.size}")
    rounds, off = [v.copy()], v.size // 2
    while off:
        v = v + v[np.arange(v.size) ^ off]
        rounds.append(v.copy())
        off //= 2
    return rounds


def window(flags, values) -> dict:
    """One look-back window as a warp computes it, lane l holding the flag and value of tile (newest - l):
    ``ready`` and ``prefix`` are the two `__ballot_sync` masks, ``stop`` the nearest P (`__ffs(prefix) - 1`,
    the last lane when there is none), ``go`` whether every lane up to ``stop`` has published, and ``part``
    the butterfly sum of the values up to ``stop`` (what every lane holds after `__shfl_xor_sync`). Flags
    are 0, 1, 2 or the letters "X", "A", "P"."""
    flags = [NAMES.index(f) if isinstance(f, str) else int(f) for f in flags]
    ready = sum(1 << i for i, f in enumerate(flags) if f != X)
    prefix = sum(1 << i for i, f in enumerate(flags) if f == P)
    stop = (prefix & -prefix).bit_length() - 1 if prefix else len(flags) - 1
    needed = (1 << (stop + 1)) - 1
    kept = np.where(np.arange(len(flags)) <= stop, np.asarray(values), 0).astype(np.asarray(values).dtype)
    return {"ready": ready, "prefix": prefix, "stop": stop, "needed": needed, "go": ready & needed == needed,
            "part": butterfly(kept)[-1][0]}


def simulate(totals, steps=EXAMPLE_STEPS, resident: int = 6, lanes: int = 4) -> Lookback:
    """Play decoupled look-back over ``len(totals)`` tiles: ``resident`` blocks at a time, tile t's scan
    taking ``steps[t]`` time steps, one window of ``lanes`` predecessors read per step. A publication is
    visible from the step after it is made; a block that publishes P leaves, and a waiting tile starts."""
    totals = np.asarray(totals)
    n = totals.size
    if len(steps) < n or resident < 1 or lanes < 1 or lanes & (lanes - 1):
        raise ValueError(f"need a scan time per tile, resident >= 1 and a power-of-two lane count; got "
                         f"{len(steps)} times for {n} tiles, resident={resident}, lanes={lanes}")
    sim = Lookback(totals, start=[None] * n, stopped_at=[None] * n, a_at=[None] * n, p_at=[None] * n,
                   prefix=np.zeros_like(totals))
    status = [[] for _ in range(n)]          # (visible from, flag, value)
    sums = {}                                # tile -> [next tile to read, running prefix]
    busy, ticket, t = 0, 0, 0
    while any(p is None for p in sim.p_at):
        while busy < resident and ticket < n:   # free blocks draw the next tickets
            sim.start[ticket], busy, ticket = t, busy + 1, ticket + 1
        for tile in range(ticket):
            if sim.p_at[tile] is not None:
                continue
            if t == sim.start[tile] + steps[tile]:           # scan done: publish, start looking back
                flag = P if tile == 0 else A
                status[tile].append((t + 1, flag, totals[tile]))
                if tile == 0:
                    sim.p_at[0], sim.prefix[0], busy = t + 1, totals[0], busy - 1
                else:
                    sim.a_at[tile], sums[tile] = t + 1, [tile - 1, totals.dtype.type(0)]
            elif tile in sums and t >= sim.a_at[tile]:        # one window per step
                newest, run = sums[tile]
                tiles = list(range(newest, newest - lanes, -1))
                seen = [max((s for s in status[k] if s[0] <= t), default=(0, X, 0))[1:] if k >= 0 else (P, 0)
                        for k in tiles]
                flags = [f for f, _ in seen]
                w = window(flags, np.array([v for _, v in seen], dtype=totals.dtype))
                what = f"P at tile {tiles[w['stop']]}" if w["prefix"] else "no P: next window"
                sim.reads.append((t, tile, tiles, flags, what if w["go"] else "wait"))
                if not w["go"]:
                    continue
                run = run + w["part"]
                if w["prefix"]:
                    sim.prefix[tile], sim.stopped_at[tile] = run + totals[tile], tiles[w["stop"]]
                    status[tile].append((t + 1, P, sim.prefix[tile]))
                    sim.p_at[tile], busy = t + 1, busy - 1
                    del sums[tile]
                else:
                    sums[tile] = [newest - lanes, run]
        t += 1
    return sim


def walk(sim: Lookback, tile: int) -> list:
    """The look-back of ``tile`` as lines of text, one per step."""
    if not 0 < tile < sim.totals.size:
        raise ValueError(f"`tile` should be 1..{sim.totals.size - 1} (tile 0 has no look-back); got {tile}")
    out = [f"tile {tile}: ticket {tile}, starts at step {sim.start[tile]}, scans its tile (total "
           f"{sim.totals[tile]}), A visible from step {sim.a_at[tile]}"]
    run = 0
    for t, k, tiles, flags, what in sim.reads:
        if k != tile:
            continue
        shown = " ".join(f"{j}:{NAMES[f]}" for j, f in zip(tiles, flags) if j >= 0)
        if what == "wait":
            out.append(f"  step {t}: reads [{shown}]  a tile before the nearest P is X: read again")
            continue
        stop = next((i for i, f in enumerate(flags) if f == P), len(flags) - 1)
        vals = [sim.prefix[j] if f == P else sim.totals[j] for j, f in zip(tiles[:stop + 1], flags)]
        run += sum(vals)
        out.append(f"  step {t}: reads [{shown}]  adds {' + '.join(str(v) for v in vals)}: {what}")
    out.append(f"  step {sim.p_at[tile]}: P = {run} + {sim.totals[tile]} = {sim.prefix[tile]} visible; "
               "the block writes its outputs")
    return out


def plot_timeline(sim: Lookback | None = None, focus: int | None = None, ax=None):
    """Tiles (rows) over time steps: scanning, A published while looking back, P published; a cross marks
    a look-back step that had to read again, rings the tiles each step of ``focus``'s look-back read."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    sim = sim if sim is not None else simulate(np.arange(1, len(EXAMPLE_STEPS) + 1))
    n, end = sim.totals.size, max(sim.p_at) + 1
    if ax is None:
        _fig, ax = plt.subplots(figsize=(9, 0.38 * n + 1.6), layout="constrained")
    colors = {"scanning": "0.8", "A published, looking back": "tab:orange", "P published": "tab:green"}
    for k in range(n):
        a = sim.a_at[k] if sim.a_at[k] is not None else sim.p_at[k]
        for (lo, hi), c in zip(((sim.start[k], a), (a, sim.p_at[k]), (sim.p_at[k], end)), colors.values()):
            ax.barh(k, hi - lo, left=lo, color=c, edgecolor="white", height=0.7)
    for t, k, tiles, _flags, what in sim.reads:
        if what == "wait":
            ax.plot(t + 0.5, k, marker="x", color="black", ms=6)
        if k == focus:   # the tiles this step read: a line up from the reader, a ring on each
            read = [j for j in tiles if j >= 0]
            ax.plot([t + 0.5] * 2, [k, min(read)], color="tab:blue", lw=1)
            ax.plot([t + 0.5] * len(read), read, "o", mfc="none", mec="tab:blue", ms=8)
    ax.set(xlim=(0, end), ylim=(n - 0.5, -0.5), xlabel="time step", ylabel="tile (= ticket)")
    ax.set_yticks(range(n))
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(f"Decoupled look-back, {n} tiles: A = own total, P = sum up to and including the tile; "
                 "x = read again" + (f"; rings: what tile {focus} read" if focus else ""), fontsize=9)
    ax.legend(handles=[Patch(color=c, label=lab) for lab, c in colors.items()], fontsize=8, ncol=3,
              loc="upper center", bbox_to_anchor=(0.5, -0.12))
    return ax
