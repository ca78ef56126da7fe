"""Chapter 13's pictures (Hopper GEMM): what wgmma reads from a TMA-swizzled tile, who holds its result, and
how a ring of mbarrier-guarded slots keeps the tensor cores fed.

Every picture is drawn from the course's models, never by hand: `course.tma.swizzled` says where the copy
engine puts each 16-byte chunk, `course.access.bank_access` how many wavefronts eight of them cost,
`course.wgmma.descriptor` how a tile's layout is packed into 64 bits and `course.wgmma.accumulator_coords`
which thread holds each FP32 result (the latter two checked on an H200 by tests/library/test_wgmma.py).
`pipeline_schedule` is this module's own model of the producer/consumer loop (its rules are in its docstring);
it explains the shape of the timeline, not its microseconds. Each plot returns the figure and the numbers it
drew, so that a test checks the picture against the model.
"""
from __future__ import annotations

import numpy as np

from ..access import bank_access
from ..plots import timeline
from ..tma import SWIZZLES, swizzled
from ..wgmma import accumulator_coords, descriptor

__all__ = ["descriptor_fields", "plot_core_matrices", "plot_swizzle_banks", "plot_accumulator",
           "pipeline_schedule", "plot_pipeline"]

_FIELDS = {"address": 0, "lbo": 16, "sbo": 32}     # field -> lowest bit; each is 14 bits of bytes / 16


def descriptor_fields(desc: int) -> dict:
    """The fields of a packed wgmma descriptor, read back from its bits (the inverse of `descriptor`)."""
    out = {name: (desc >> bit) & 0x3FFF for name, bit in _FIELDS.items()}
    out["mode"] = desc >> 62
    return out


def _placement(row_bytes: int, rows: int, swizzle: str) -> np.ndarray:
    """(rows, chunks) array: the physical (line, 16-byte slot) of each logical (row, chunk), as a flat slot."""
    logical = np.arange(rows)[:, None] * row_bytes + 16 * np.arange(row_bytes // 16)[None, :]
    return swizzled(logical, swizzle) // 16


def plot_core_matrices(rows: int = 64, k: int = 64, swizzle: str = "128B", *, address: int = 0):
    """A K-major BF16 tile (``rows`` x ``k``) in shared memory as the TMA wrote it and wgmma reads it.

    One row of the tile is one line of ``2 k`` bytes (the swizzle's span: 128 bytes, 64 values, for 128B);
    eight lines make a swizzle atom (1024 bytes), and the atom is also the step between the 8-row groups of
    core matrices (8 rows x 16 bytes) along M or N: SBO = 8 lines. The XOR already spreads the K chunks
    inside the atom, so LBO is not used (16 bytes, 1 in the field, by convention). Highlighted: the chunks
    the first K step (k 0..15, 32 bytes of each row) reads. Returns (figure, info): info has the packed
    ``descriptor``, its ``fields`` read back from the bits, ``k_steps`` (one descriptor per K step: +2 each)
    and ``read`` (bool rows x chunks, True where the first K step reads a physical slot).
    """
    import matplotlib.pyplot as plt
    span = SWIZZLES[swizzle][0]
    if span is None or 2 * k != span or rows % 8:
        raise ValueError(f"a swizzled K-major tile has rows of exactly the swizzle's span ({span} bytes) and a "
                         f"multiple of 8 rows; got {rows} x {k} BF16 with {swizzle!r}")
    atom, chunks = 8 * span, span // 16
    if address % atom:
        raise ValueError(f"the tile must start on a {atom}-byte boundary (the swizzle repeats every atom)")
    desc = descriptor(address, 16, atom, swizzle)
    steps = [descriptor(address + 32 * j, 16, atom, swizzle) for j in range(k // 16)]
    slot = _placement(span, rows, swizzle)
    logical = np.zeros((rows, chunks), int)         # which logical chunk each physical slot holds
    logical.flat[slot.ravel()] = np.tile(np.arange(chunks), rows)
    read = logical // 2 == 0                        # a K step of 16 BF16 values is two 16-byte chunks
    fig, ax = plt.subplots(figsize=(chunks * 0.9 + 5.5, rows * 0.16 + 1.6))
    ax.imshow(logical // 2, cmap="Pastel1", vmin=0, vmax=8, aspect="auto", alpha=0.6)
    for r, c in zip(*np.nonzero(read)):
        ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fc="tab:red", alpha=0.55, ec="black", lw=0.6))
    for r in range(rows):
        for c in range(chunks):
            ax.text(c, r, f"c{logical[r, c]}", ha="center", va="center", fontsize=5)
    for g in range(0, rows, 8):
        ax.axhline(g - 0.5, color="black", lw=1.2)
        ax.text(chunks - 0.4, g + 3.5, f" rows {g}-{g + 7}: +{g // 8 * atom} B\n (SBO x {g // 8})",
                fontsize=7, va="center")
    f = descriptor_fields(desc)
    ax.text(chunks + 1.6, rows / 2, f"descriptor {desc:#018x}\n"
            f"bits 0-13   address>>4 = {f['address']}\nbits 16-29  LBO>>4 = {f['lbo']} (unused)\n"
            f"bits 32-45  SBO>>4 = {f['sbo']} ({atom} B)\nbits 62-63  mode = {f['mode']} ({swizzle})\n\n"
            f"next K step: +32 B = desc + 2\n" + "\n".join(f"  k {16 * j}-{16 * j + 15}: {s:#018x}"
                                                          for j, s in enumerate(steps)),
            fontsize=7, family="monospace", va="center")
    ax.set_xlim(-0.5, chunks + 7.5)
    ax.set_xticks(range(chunks))
    ax.set_xlabel(f"physical 16-byte slot of the {span}-byte line (label: logical chunk c = k 8c..8c+7)")
    ax.set_ylabel("row of the tile (M or N)")
    ax.set_title(f"{rows} x {k} BF16 tile, {swizzle} swizzle: red = the {rows // 8 * 2} core matrices "
                 f"(8 rows x 16 B) of K step 0", fontsize=9)
    return fig, {"descriptor": desc, "fields": f, "k_steps": steps, "read": read}


def plot_swizzle_banks(swizzle: str = "128B"):
    """One 1024-byte stretch of shared memory, 8 lines x 8 slots of 16 bytes, without and with ``swizzle``.

    A 16-byte slot covers 4 of the 32 banks, so its position in the 128-byte line is its bank group (colour).
    A core matrix is the same logical chunk of 8 consecutive rows: unswizzled that is one bank group eight
    times (an 8-way conflict); swizzled, eight groups, one wavefront. Returns (figure, info): info[mode] has
    the ``degree`` (the worst chunk column, from `course.access.bank_access`) and ``grid`` (8 x 8: the logical
    row * chunks + chunk held by each physical slot).
    """
    import matplotlib.pyplot as plt
    span = SWIZZLES[swizzle][0] or 128
    chunks, rows = span // 16, 1024 // span
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    info = {}
    for ax, mode in zip(axes, ("none", swizzle)):
        slot = _placement(span, rows, mode)
        grid = np.zeros(64, int)
        grid[slot.ravel()] = np.arange(rows * chunks)
        grid = grid.reshape(8, 8)
        degree = max(bank_access(lambda lane, c=c: int(slot[lane, c]), 16, lanes=8).degree for c in range(chunks))
        info[mode] = {"degree": degree, "grid": grid}
        ax.imshow(np.tile(np.arange(8), (8, 1)), cmap="Set2", vmin=0, vmax=7, aspect="auto")
        for p in range(64):
            r, c = divmod(int(grid.flat[p]), chunks)
            text = f"c{c}" if rows == 8 else f"r{r}c{c}"
            bold = c == 0 and r < 8
            ax.text(p % 8, p // 8, text, ha="center", va="center", fontsize=8 if bold else 7,
                    fontweight="bold" if bold else "normal")
            if bold:
                ax.add_patch(plt.Rectangle((p % 8 - 0.5, p // 8 - 0.5), 1, 1, fc="none", ec="black", lw=2))
        ax.set_xticks(range(8), [f"b{4 * g}-{4 * g + 3}" for g in range(8)], fontsize=7)
        ax.set(ylabel="128-byte line", xlabel="16-byte slot of the line = its 4 banks")
        ax.set_title(f"{mode}: chunk 0 of 8 rows (boxed) -> {degree}-way", fontsize=9)
    fig.suptitle(f"The {swizzle} swizzle of one atom: colour = bank group (4 banks of 4 B). Chapter 05 padded "
                 "rows, chapter 08 XORed ldmatrix's addresses by hand; here the TMA writes the XOR", fontsize=9)
    return fig, info


def plot_accumulator(n: int = 64):
    """Who holds each element of the 64 x ``n`` FP32 result of one warpgroup's wgmma.

    Warp w owns rows 16w..16w+15 (left, by colour); inside its band the layout is mma.sync's m16n8
    accumulator (chapter 08) repeated n / 8 times along N, registers 4j..4j+3 in column block j (right: warp
    0's first two blocks, thread and register of every cell). Returns (figure, owner): owner[row, col] =
    (thread, register).
    """
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    coords = accumulator_coords(n)
    owner = np.full((64, n, 2), -1)
    t, r = np.meshgrid(np.arange(128), np.arange(n // 2), indexing="ij")
    owner[coords[..., 0], coords[..., 1]] = np.stack([t, r], axis=-1)
    fig, (ax, az) = plt.subplots(1, 2, figsize=(14, 6.5), gridspec_kw={"width_ratios": [1, 1.1]})
    ax.imshow(owner[..., 0] // 32, cmap=ListedColormap(["#9ecae1", "#fdae6b", "#a1d99b", "#bcbddc"]),
              vmin=0, vmax=3, aspect="auto")
    for x in np.arange(8, n, 8):
        ax.axvline(x - 0.5, color="gray", lw=0.5)
    for w in range(4):
        ax.axhline(16 * w - 0.5, color="black", lw=1)
        ax.text(n / 2, 16 * w + 7.5, f"warp {w}: threads {32 * w}-{32 * w + 31}", ha="center", fontsize=9)
    ax.add_patch(plt.Rectangle((-0.5, -0.5), min(16, n), 16, fc="none", ec="red", lw=2))
    ax.set(xlabel=f"column n (gray lines: the {n // 8} m16n8 blocks)", ylabel="row m")
    ax.set_title(f"m64n{n}k16 FP32 accumulator, {n // 2} registers per thread", fontsize=9)
    zoom = owner[:16, :16]
    az.imshow(zoom[..., 0] % 32, cmap="tab20", vmin=0, vmax=31, aspect="auto", alpha=0.7)
    for (row, col), thread in np.ndenumerate(zoom[..., 0]):
        az.text(col, row, f"t{thread}\nr{zoom[row, col, 1]}", ha="center", va="center", fontsize=5.5)
    az.set(xlabel="column n", ylabel="row m")
    az.set_title("red box: warp 0, two m16n8 blocks (registers 0-3, then 4-7)", fontsize=9)
    return fig, owner


def pipeline_schedule(k_tiles: int, stages: int, load_us: float, mma_us: float, consumers: int = 1,
                      copy_us: float = 0.0) -> list:
    """Per K tile i: (load_start, load_end, mma_start, mma_end) in microseconds, under these rules.

    The producer thread issues loads in order; load i goes into slot i % stages once that slot is empty,
    i.e. once the consumers finished tile i - stages and arrived on the slot's empty barrier. A load lands
    (its full barrier's transaction count completes) ``load_us`` after issue: that is mostly latency, so
    loads in flight overlap, and the ring is what bounds them (at most ``stages``). ``copy_us`` is the time
    one tile's bytes hold this SM's share of bandwidth: loads land at least that far apart. Consumer step i
    starts once load i landed and step i - 1 finished (one stream of wgmmas on the SM's tensor cores). The
    ``consumers`` warpgroups split each tile's rows and wait on the same full barrier; the slot is free when
    all have arrived (the empty barrier's count), so in this model their number changes no time.
    Per tile the loop settles at max((load_us + mma_us) / stages, mma_us, copy_us): a slot's round trip is
    a load and a step; with stages >= 1 + load_us / mma_us (and copy_us <= mma_us) the tensor cores never
    wait after the first load.
    """
    if k_tiles < 1 or stages < 1 or consumers < 1 or min(load_us, mma_us, copy_us) < 0:
        raise ValueError("k_tiles, stages and consumers are at least 1 and the times are not negative; got "
                         f"{k_tiles}, {stages}, {consumers}, times {load_us}, {mma_us}, {copy_us}")
    out, issue, landed, done = [], 0.0, float("-inf"), 0.0
    for i in range(k_tiles):
        issue = max(issue, out[i - stages][3] if i >= stages else 0.0)
        landed = max(issue + load_us, landed + copy_us)
        start = max(landed, done)
        done = start + mma_us
        out.append((issue, landed, start, done))
    return out


def plot_pipeline(stages: int = 4, k_tiles: int = 10, load_us: float = 1.0, mma_us: float = 0.4,
                  consumers: int = 1, copy_us: float = 0.0):
    """`pipeline_schedule` as a timeline: one row per slot (its TMA loads, issue to full barrier) and one per
    consumer warpgroup (its wgmma steps). Each span says its tile and the parity (i // stages) % 2 that the
    consumers pass to ``mbarrier.try_wait.parity`` on the slot's full barrier; the producer waits on the
    empty barrier with the other bit, which a fresh barrier passes at once (its first round needs no wait).
    Returns (figure, schedule).
    """
    import matplotlib.pyplot as plt
    sched = pipeline_schedule(k_tiles, stages, load_us, mma_us, consumers, copy_us)
    spans = [(f"slot {i % stages}", "TMA load", l0, l1, i) for i, (l0, l1, _, _) in enumerate(sched)]
    spans += [(f"consumer wg {c}", "wgmma", m0, m1, i) for c in range(consumers)
              for i, (_, _, m0, m1) in enumerate(sched)]
    fig, ax = plt.subplots(figsize=(11, 0.45 * (stages + consumers) + 1.8))
    timeline([s[:4] for s in spans], ax=ax)
    lanes = list(dict.fromkeys(s[0] for s in spans))
    for lane, _, t0, t1, i in spans:
        ax.text((t0 + t1) / 2, lanes.index(lane), f"{i}\np{(i // stages) % 2}", ha="center", va="center",
                fontsize=6)
    total, bound = sched[-1][3], load_us + (k_tiles - 1) * max(mma_us, copy_us) + mma_us
    ax.set_xlabel("time (µs)")
    ax.set_title(f"{stages}-slot ring, {k_tiles} K tiles (span: tile, parity), empty barriers count {consumers} "
                 f"arrival(s): {total:.1f} µs; one stage would take "
                 f"{k_tiles * (load_us + mma_us):.1f}, a never-starved loop {bound:.1f}", fontsize=9)
    return fig, sched
