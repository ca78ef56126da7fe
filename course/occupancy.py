"""Occupancy from the hardware rules: how many blocks of a kernel fit on one SM, and what stops more.

`predict` works everywhere (no GPU): it applies the allocation rules of the CUDA occupancy calculator to
per-compute-capability limits, so a lesson can explain the number the CUDA occupancy API gives
(`Kernel.occupancy`, compared by `measured` and `compare`). `widget` draws blocks per SM against block size.
"""
from __future__ import annotations

__all__ = ["LIMITS", "LIMITERS", "predict", "limiter_of", "sweep", "measured", "compare", "widget", "fits",
           "table_cc"]

# Per-SM limits from the CUDA C++ Programming Guide, "Technical Specifications per Compute Capability"
# (maximum resident blocks, warps and registers per SM, shared memory per SM and per block), and the
# allocation rules of the CUDA occupancy calculator (cuda_occupancy.h): registers are handed out per warp
# in units of 256, within 4 sub-partitions; shared memory in units of 256 bytes (7.x) or 128 bytes (8.0+),
# and from 8.0 on the runtime reserves 1 KB of every block's shared memory for itself.
# smem_per_sm is the largest carveout: the driver picks the carveout, and the occupancy API assumes the
# largest one a kernel's shared memory needs.
LIMITS = {
    (7, 5): dict(max_warps=32, max_blocks=16, regs_per_sm=65536, max_regs_per_thread=255,
                 smem_per_sm=64 * 1024, smem_per_block=64 * 1024, smem_unit=256, smem_reserved=0),
    (8, 0): dict(max_warps=64, max_blocks=32, regs_per_sm=65536, max_regs_per_thread=255,
                 smem_per_sm=164 * 1024, smem_per_block=163 * 1024, smem_unit=128, smem_reserved=1024),
    (8, 6): dict(max_warps=48, max_blocks=16, regs_per_sm=65536, max_regs_per_thread=255,
                 smem_per_sm=100 * 1024, smem_per_block=99 * 1024, smem_unit=128, smem_reserved=1024),
    (8, 9): dict(max_warps=48, max_blocks=24, regs_per_sm=65536, max_regs_per_thread=255,
                 smem_per_sm=100 * 1024, smem_per_block=99 * 1024, smem_unit=128, smem_reserved=1024),
    (9, 0): dict(max_warps=64, max_blocks=32, regs_per_sm=65536, max_regs_per_thread=255,
                 smem_per_sm=228 * 1024, smem_per_block=227 * 1024, smem_unit=128, smem_reserved=1024),
}
_WARP = 32
_REG_UNIT = 256            # registers are allocated per warp, rounded up to 256
_SUB_PARTITIONS = 4        # each SM's register file is split in 4; a warp's registers live in one quarter
_MAX_THREADS_PER_BLOCK = 1024

# When several resources allow the same number of blocks, the limit named first wins: the fixed hardware
# caps (which no code change moves) before the resources a kernel can spend less of.
LIMITERS = ("warps", "blocks", "registers", "shared memory")


def _limits(cc) -> dict:
    cc = tuple(int(x) for x in cc)
    if cc not in LIMITS:
        known = ", ".join(f"{a}.{b}" for a, b in LIMITS)
        raise ValueError(f"no occupancy table for compute capability {cc[0]}.{cc[1]}; the course has {known}. "
                         "Pass the closest one with cc=(major, minor).")
    return LIMITS[cc]


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def limiter_of(limits: dict) -> str:
    """The name of the smallest block limit in ``limits`` (limiter name -> blocks per SM), ties as `LIMITERS`."""
    known = {k: v for k, v in limits.items() if v is not None}
    if not known:
        return ""
    low = min(known.values())
    return next((k for k in LIMITERS if known.get(k) == low), min(known, key=known.get))


def predict(threads: int, regs_per_thread: int, smem_per_block: int = 0, cc=(9, 0)) -> dict:
    """Resident blocks per SM for a block of ``threads`` threads from the hardware rules of ``cc``.

    ``smem_per_block`` is the block's static plus dynamic shared memory in bytes (without the 1 KB the
    runtime adds from 8.0 on; that is added here). Returns ``blocks_per_sm``, ``warps_per_sm``,
    ``occupancy`` (resident warps / the SM's maximum, 0-1), ``limiter`` (one of `LIMITERS`), each
    resource's own block count (``by_warps``, ``by_blocks``, ``by_registers``, ``by_shared_memory``) and
    the per-block allocations behind them (``regs_per_block``, ``smem_allocated``). A block that cannot
    run at all gives 0 blocks, and ``limiter`` names the resource it exceeds.

    Raises
    ------
    ValueError
        For a block size outside 1..1024 or more than 255 registers per thread (no launch can ask that).
    """
    lim = _limits(cc)
    threads, regs, smem = int(threads), int(regs_per_thread), int(smem_per_block)
    if not 1 <= threads <= _MAX_THREADS_PER_BLOCK:
        raise ValueError(f"a block has 1 to {_MAX_THREADS_PER_BLOCK} threads; got {threads}")
    if not 0 <= regs <= lim["max_regs_per_thread"]:
        raise ValueError(f"a thread uses 0 to {lim['max_regs_per_thread']} registers; got {regs}")
    if smem < 0:
        raise ValueError(f"shared memory per block cannot be negative; got {smem}")
    warps = -(-threads // _WARP)
    by_warps = lim["max_warps"] // warps
    by_blocks = lim["max_blocks"]

    regs_per_warp = _round_up(regs * _WARP, _REG_UNIT)
    regs_per_block = regs_per_warp * warps
    if regs_per_warp == 0:
        by_regs = by_blocks
    # the launch check assumes a block's warps spread over all 4 sub-partitions (cuda_occupancy.h)
    elif regs_per_warp * _round_up(warps, _SUB_PARTITIONS) > lim["regs_per_sm"]:
        by_regs = 0
    else:
        per_partition = (lim["regs_per_sm"] // _SUB_PARTITIONS) // regs_per_warp
        by_regs = per_partition * _SUB_PARTITIONS // warps

    smem_alloc = _round_up(smem + lim["smem_reserved"], lim["smem_unit"])
    if smem > lim["smem_per_block"]:
        by_smem = 0
    elif smem_alloc == 0:
        by_smem = by_blocks
    else:
        by_smem = lim["smem_per_sm"] // smem_alloc

    limits = {"warps": by_warps, "blocks": by_blocks, "registers": by_regs, "shared memory": by_smem}
    blocks = min(limits.values())
    low = [k for k in LIMITERS if limits[k] == blocks]
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": blocks * warps / lim["max_warps"], "limiter": low[0], "limiters": low,
            "by_warps": by_warps, "by_blocks": by_blocks, "by_registers": by_regs, "by_shared_memory": by_smem,
            "regs_per_block": regs_per_block, "smem_allocated": smem_alloc, "cc": tuple(cc)}


def sweep(regs_per_thread: int, smem_per_block: int = 0, cc=(9, 0), sizes=None) -> list:
    """`predict` for every block size in ``sizes`` (default 32, 64, ..., 1024): rows for a table or plot."""
    sizes = sizes or range(_WARP, _MAX_THREADS_PER_BLOCK + 1, _WARP)
    rows = []
    for t in sizes:
        p = predict(t, regs_per_thread, smem_per_block, cc)
        rows.append({"threads": t, "blocks/SM": p["blocks_per_sm"], "warps/SM": p["warps_per_sm"],
                     "occupancy %": round(100 * p["occupancy"], 1), "limiter": p["limiter"]})
    return rows


def measured(kernel, threads: int, smem: int = 0) -> dict:
    """What the CUDA occupancy API says for ``kernel`` (a `course.Kernel`) with ``threads`` per block and
    ``smem`` bytes of dynamic shared memory: ``blocks_per_sm``, ``warps_per_sm``, ``occupancy`` (0-1), and
    ``registers`` and ``smem_per_block`` (static + dynamic), the inputs `predict` needs to explain it."""
    from ._env import device_info
    info = device_info()
    blocks = kernel.occupancy(int(threads), int(smem))
    warps = -(-int(threads) // _WARP)
    regs, total_smem = kernel.resources.registers, (kernel.resources.static_smem or 0) + int(smem)
    return {"blocks_per_sm": blocks, "warps_per_sm": blocks * warps,
            "occupancy": blocks * warps * _WARP / info.max_threads_per_sm, "registers": regs,
            "smem_per_block": total_smem}


def compare(kernel, sizes=(64, 128, 256, 512, 1024), smem: int = 0) -> list:
    """Rows of predicted against the occupancy API's blocks per SM for ``kernel`` over block ``sizes``.

    Where they differ, the prediction's table (`LIMITS`) or rules miss something about this GPU: the
    ``match`` column says so rather than hiding it.
    """
    cc = _default_cc()
    rows = []
    for t in sizes:
        m = measured(kernel, t, smem)
        p = predict(t, m["registers"], m["smem_per_block"], cc)
        rows.append({"threads": t, "registers": m["registers"], "smem/block": m["smem_per_block"],
                     "predicted": p["blocks_per_sm"], "occupancy API": m["blocks_per_sm"], "limiter": p["limiter"],
                     "match": p["blocks_per_sm"] == m["blocks_per_sm"]})
    return rows


def table_cc(cc) -> tuple:
    """``cc`` where `LIMITS` has its table, else (9, 0): the rules shown for a GPU the course has no table for."""
    cc = tuple(int(x) for x in cc)
    return cc if cc in LIMITS else (9, 0)


def fits(smem_per_block: int) -> bool:
    """May a block reserve ``smem_per_block`` bytes of shared memory on this GPU (64 KiB on sm_75, 99 KiB on
    sm_86 and sm_89, 227 KiB on sm_90)? True without a GPU, where only recordings are shown."""
    from ._env import device_info, gpu_available
    return not gpu_available() or smem_per_block <= device_info().smem_per_block_optin


def _default_cc():
    from ._env import device_info, gpu_available
    if not gpu_available():
        return (9, 0)
    cc = tuple(device_info().cc)
    if table_cc(cc) != cc:
        print(f"No occupancy table for this GPU's compute capability {cc[0]}.{cc[1]}; showing sm_90's rules.")
    return table_cc(cc)


def _draw(ax, regs: int, smem: int, cc, threads: int):
    rows = sweep(regs, smem, cc)
    xs = [r["threads"] for r in rows]
    ax.step(xs, [r["blocks/SM"] for r in rows], where="mid", label="blocks per SM")
    ax2 = ax.twinx()
    ax2.plot(xs, [r["occupancy %"] for r in rows], color="tab:orange", lw=1, alpha=0.7, label="occupancy %")
    ax2.set_ylim(0, 105)
    ax2.set_ylabel("occupancy % (resident warps / max)")
    p = predict(threads, regs, smem, cc)
    ax.scatter([threads], [p["blocks_per_sm"]], color="black", zorder=3)
    ax.annotate(f"{threads} threads: {p['blocks_per_sm']} blocks, {100 * p['occupancy']:.0f}%, "
                f"limited by {p['limiter']}", (threads, p["blocks_per_sm"]), textcoords="offset points",
                xytext=(6, 6), fontsize=8)
    ax.set_xlabel("threads per block")
    ax.set_ylabel("resident blocks per SM")
    ax.set_title(f"sm_{cc[0]}{cc[1]}: {regs} registers/thread, {smem} B shared memory/block", fontsize=10)
    ax.grid(True, alpha=0.3)
    return ax


def widget(cc=None, threads: int = 256, regs: int = 32, smem: int = 0):
    """Sliders for block size, registers per thread and shared memory per block, and the plot of blocks per
    SM against block size with the limiter named. Without ipywidgets, prints the table for the given values."""
    cc = tuple(cc) if cc else _default_cc()
    lim = _limits(cc)
    try:
        import ipywidgets as W
    except ImportError:  # a plain terminal or a stripped-down kernel: the same numbers as a table
        from ._table import print_table
        print(f"ipywidgets is not available, so here is the table for sm_{cc[0]}{cc[1]}, {regs} registers and "
              f"{smem} bytes of shared memory per block:")
        print_table(sweep(regs, smem, cc))
        return None
    import matplotlib.pyplot as plt
    out = W.Output()
    s_threads = W.IntSlider(value=threads, min=_WARP, max=_MAX_THREADS_PER_BLOCK, step=_WARP,
                            description="threads", continuous_update=False)
    s_regs = W.IntSlider(value=regs, min=16, max=lim["max_regs_per_thread"], step=8, description="registers",
                         continuous_update=False)
    s_smem = W.IntSlider(value=smem // 1024, min=0, max=lim["smem_per_block"] // 1024, step=1,
                         description="smem KiB", continuous_update=False)

    def redraw(*_):
        with out:
            out.clear_output(wait=True)
            _fig, ax = plt.subplots(figsize=(7, 3.8))
            _draw(ax, s_regs.value, s_smem.value * 1024, cc, s_threads.value)
            plt.show()
    for s in (s_threads, s_regs, s_smem):
        s.observe(redraw, names="value")
    redraw()
    return W.VBox([s_threads, s_regs, s_smem, out])

