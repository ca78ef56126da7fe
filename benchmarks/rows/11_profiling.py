"""Chapter 11 rows: the profiler against the course's timer, the gallery of bad benchmarks, occupancy.

1. Chapter 04's coalesced float4 scale on 2^28 floats, timed with events (`course.benchmark`, useful bytes)
   and profiled once under ncu without clock locking (DRAM bytes read and written over the kernel's
   duration). The issue's goal is agreement within 5% on the H100: two rows hold the one ratio, one with a
   target of at least 0.95 and one of at most 1.05, the anchor being the event-timed figure of the same run.
   Where ncu is missing or may not read counters, only the event-timed row is written and the note says why.
2. The gallery: each wrong number (`value`) against the right one of the same run (`anchor_value`); no
   targets: the ratio is the lesson.
3. Occupancy: blocks per SM from the hardware rules against the CUDA occupancy API (every configuration must
   agree: a target of 1 on the share that does), and the GB/s of chapter 04's one-float scale at each
   configuration against the same kernel at full occupancy.
"""
from __future__ import annotations

CHAPTER = "11_profiling"


def _bandwidth_rows(ctx, ch11) -> list:
    r = ch11.bandwidth_vs_events()
    title = "ch04 scale_vec4_grid, 2^28 floats"
    event = ctx.row(f"{title}, event-timed (useful bytes)", r["event_gbps"], "GB/s", anchor="D2D copy, same run",
                    anchor_value=ctx.copy_gbps, note=f"median {r['event_ms']:.3f} ms, IQR {100 * r['event_iqr']:.1f}%")
    if r["ratio"] is None:
        event.note += f"; no ncu rows: {r['profile'].reason}"
        return [event]
    note = (f"ncu, --clock-control none: {r['dram_bytes'] / 1e9:.3f} GB moved in {r['ncu_us']:.1f} us "
            f"(useful {r['useful_bytes'] / 1e9:.3f} GB)")
    anchor = "event-timed GB/s of the same kernel, same run"
    return [event,
            ctx.row(f"{title}, ncu DRAM GB/s (not below 0.95 x events)", r["ncu_gbps"], "GB/s", anchor=anchor,
                    anchor_value=r["event_gbps"], target=1 - ch11.BANDWIDTH_TOLERANCE, note=note),
            ctx.row(f"{title}, ncu DRAM GB/s (not above 1.05 x events)", r["ncu_gbps"], "GB/s", anchor=anchor,
                    anchor_value=r["event_gbps"], target=1 + ch11.BANDWIDTH_TOLERANCE, higher_is_better=False,
                    note=note)]


def _gallery_rows(ctx, disc) -> list:
    return [ctx.row(f"gallery: {g['case']}, {g['wrong way']}", g["wrong"], g["unit"],
                    anchor=f"{g['right way']}, same run", anchor_value=g["right"], note=g["why"])
            for g in disc.gallery()]


def _occupancy_rows(ctx, disc) -> list:
    pts = disc.occupancy_table()
    full = next(p for p in pts if p["block"] == 256 and p["smem"] == 0)
    agree = sum(p["predicted"] == p["api"] for p in pts)
    out = [ctx.row("occupancy: configurations where the hardware rules give the API's blocks per SM", agree,
                   "configs", anchor="configurations tried", anchor_value=len(pts), target=1.0,
                   note="; ".join(f"{p['block']} threads, {p['smem'] >> 10} KiB: {p['predicted']} vs {p['api']}"
                                  for p in pts if p["predicted"] != p["api"]) or "all agree")]
    out += [ctx.row(f"occupancy: scale_scalar, block {p['block']}, {p['smem'] >> 10} KiB shared", p["gbps"], "GB/s",
                    anchor="block 256, no shared memory, same run", anchor_value=full["gbps"],
                    note=f"{p['api']} blocks/SM ({p['limiter']}), occupancy {p['occupancy']:.0%}, "
                         f"{p['registers']} registers") for p in pts]
    return out


def rows(ctx) -> list:
    import cupy
    from course.lessons import ch11, ch11_discipline
    out = []
    for section in (lambda: _bandwidth_rows(ctx, ch11), lambda: _gallery_rows(ctx, ch11_discipline),
                    lambda: _occupancy_rows(ctx, ch11_discipline)):
        out += section()
        cupy.get_default_memory_pool().free_all_blocks()
    return out
