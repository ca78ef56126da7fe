"""Chapter 11 (profiling and measurement discipline): what to profile, with which arguments, and the tables.

The kernels profiled here are other chapters' lesson cells, read with `course.lesson_cell` (chapter 04's
scale kernels, chapter 05's transposes, chapter 07's GEMM stages); nothing here holds a kernel. A `Target`
says how one of them is launched for `course.profile` and under which name its profile is recorded, so a
machine without a GPU (or without counter access) shows the recording instead. The measurement-discipline
parts (the gallery of bad benchmarks, first-launch cost, the occupancy sweep) live in `ch11_discipline`.
Nothing here touches CUDA at import.
"""
from __future__ import annotations

import dataclasses

__all__ = [
    "CHAPTER", "N_COPY", "STRIDED_M", "TRANSPOSE", "GEMM", "GEMM_LAUNCH", "Target", "TARGETS", "target",
    "profile_target", "profile_table", "roofline_points", "bandwidth_vs_events", "BANDWIDTH_TOLERANCE",
    "within_tolerance",
]

CHAPTER = "11_profiling"
N_COPY = 1 << 28          # chapter 04's size: 1 GiB per array, twenty times the H100's L2
STRIDED_M = 1 << 22       # elements the strided kernel touches (its input spans 32 times that at stride 32)
TRANSPOSE = 4096          # a square float matrix for chapter 05's transposes (64 MiB)
GEMM = 2048               # M = N = K for chapter 07's stages
# chapter 07's launch geometry (its Stage table): (BM, BN) of C per block, threads per block
GEMM_LAUNCH = {"gemm_coalesced": ((8, 32), (32, 8)), "gemm_reg1d": ((64, 64), 512), "gemm_reg2d": ((128, 128), 256)}
BANDWIDTH_TOLERANCE = 0.05  # the goal: ncu's DRAM bandwidth within 5% of the event-timed figure


@dataclasses.dataclass(frozen=True)
class Target:
    """One kernel to profile: which lesson cell, how to launch it, what its useful work is."""

    key: str                 # the recording's name: benchmarks/results/profiles/<key>-<gpu>.json
    chapter: str
    kernel: str
    title: str
    sections: tuple = ("memory", "compute", "occupancy", "stalls")
    options: tuple = ()

    def compiled(self):
        import course
        return course.lesson_cell(self.chapter, self.kernel).kernel(self.kernel, options=self.options)

    def launch(self):
        """(grid, block, args, useful bytes, FLOPs) with fresh inputs on the GPU."""
        import cupy
        import course
        rng = cupy.random.default_rng(11)
        if self.kernel in ("scale_vec4_grid", "scale_scalar"):
            x = rng.random(N_COPY, dtype=cupy.float32)
            if self.kernel == "scale_scalar":
                return course.grid_for(N_COPY, 256), 256, (x, cupy.empty_like(x), 2.0, N_COPY), 8 * N_COPY, N_COPY
            grid = course.device_info().sm_count * self.compiled().occupancy(256)
            return grid, 256, (x, cupy.empty_like(x), 2.0, N_COPY // 4), 8 * N_COPY, N_COPY
        if self.kernel == "scale_strided":
            stride = 32 if self.key.endswith("32") else 1
            x = rng.random(stride * STRIDED_M + 32, dtype=cupy.float32)
            return (course.grid_for(STRIDED_M, 256), 256, (x, cupy.zeros_like(x), 2.0, STRIDED_M, stride, 0),
                    8 * STRIDED_M, STRIDED_M)
        if self.kernel.startswith("transpose"):
            a = rng.random((TRANSPOSE, TRANSPOSE), dtype=cupy.float32)
            grid = (TRANSPOSE // 32, TRANSPOSE // 32)
            return grid, (32, 32), (a, cupy.empty_like(a), TRANSPOSE, TRANSPOSE), 8 * a.size, 0
        if self.kernel.startswith("gemm"):
            a = rng.random((GEMM, GEMM), dtype=cupy.float32)
            b = rng.random((GEMM, GEMM), dtype=cupy.float32)
            c = cupy.empty_like(a)
            tile, block = GEMM_LAUNCH[self.kernel]
            grid = (GEMM // tile[1], GEMM // tile[0])
            return grid, block, (a, b, c, GEMM, GEMM, GEMM), 12 * GEMM * GEMM, 2 * GEMM ** 3
        raise ValueError(f"no launch is known for {self.kernel!r}")


TARGETS = (
    Target("11-scale-vec4-grid", "04_coalescing", "scale_vec4_grid", "ch04 float4 scale, grid-stride, 2^28 floats"),
    Target("11-scale-scalar", "04_coalescing", "scale_scalar", "ch04 scale, one float a thread, 2^28 floats"),
    Target("11-strided-1", "04_coalescing", "scale_strided", "ch04 scale_strided, stride 1, 2^22 elements"),
    Target("11-strided-32", "04_coalescing", "scale_strided", "ch04 scale_strided, stride 32, 2^22 elements"),
    Target("11-transpose-smem", "05_bank_conflicts", "transpose_smem", "ch05 transpose, tile[32][32]"),
    Target("11-transpose-pad", "05_bank_conflicts", "transpose_pad", "ch05 transpose, tile[32][33]"),
    Target("11-gemm-coalesced", "07_staged_gemm", "gemm_coalesced", "ch07 stage 2, one output a thread"),
    Target("11-gemm-reg1d", "07_staged_gemm", "gemm_reg1d", "ch07 stage 4, 8 outputs a thread"),
    Target("11-gemm-reg2d", "07_staged_gemm", "gemm_reg2d", "ch07 stage 5, 8 x 8 outputs a thread"),
)


def target(key: str) -> Target:
    """The `Target` recorded under ``key`` (KeyError for a key the chapter does not profile)."""
    return {t.key: t for t in TARGETS}[key]


def profile_target(t: Target, clock_control: str = "none", record: bool = True):
    """`course.profile` of ``t``: live with a GPU (recorded under ``t.key``), else its recording. Never raises
    for a missing GPU, ncu or counter permission: the Profile's ``source`` and ``reason`` say what happened."""
    import course
    name = t.key if record else None
    if not course.gpu_available():
        return course.profile(None, None, None, record=t.key)
    grid, block, args, _bytes, _flops = t.launch()
    return course.profile(t.compiled(), grid, block, *args, sections=t.sections, clock_control=clock_control,
                          record=name)


_COLUMNS = {  # derived key -> (header, format)
    "duration_us": ("time us", "{:.1f}"), "dram_gbps": ("DRAM GB/s", "{:.0f}"), "dram_pct": ("DRAM % peak", "{:.0f}"),
    "l2_gbps": ("L2 GB/s", "{:.0f}"), "sectors_per_request_ld": ("sect/req ld", "{:.1f}"),
    "sectors_per_request_st": ("sect/req st", "{:.1f}"), "bank_conflicts": ("bank conflicts", "{:,.0f}"),
    "gflops": ("GFLOP/s", "{:.0f}"), "achieved_occupancy_pct": ("occupancy %", "{:.0f}"),
    "occupancy_limiter": ("limited by", "{}"),
}


def profile_table(profiles: dict, columns) -> list:
    """Print the ``columns`` (keys of `Profile.derived`) of several profiles side by side, with where each
    came from; returns the rows. A profile with nothing live or recorded prints its reason instead."""
    import course
    rows, notes = [], []
    for key, p in profiles.items():
        if not p:
            notes.append(f"{key}: {p.reason or 'no profile'}")
            continue
        row = {"kernel": target(key).title}
        for c in columns:
            head, fmt = _COLUMNS.get(c, (c, "{}"))
            v = p.derived.get(c)
            row[head] = "" if v is None else fmt.format(v)
        row["from"] = "ncu, here" if p.source == "ncu" else f"recorded on {p.device}"
        rows.append(row)
        if p.source != "ncu" and p.reason:
            notes.append(f"{key}: {p.reason}")
    if rows:
        course.print_table(rows)
    for note in dict.fromkeys(notes):
        print(note)
    return rows


def roofline_points(profiles: dict) -> list:
    """(label, FLOP per DRAM byte, TFLOP/s) of every profile that did floating-point work, for
    `course.plots.roofline`: the intensity is what the counters saw reach DRAM, not a model's."""
    points = ((target(key).kernel, p.roofline_point()) for key, p in profiles.items() if p)
    return [(label, *pt[1:]) for label, pt in points if pt]


def within_tolerance(ratio, tol: float = BANDWIDTH_TOLERANCE) -> bool:
    """Is ``ratio`` (ncu over event-timed) within ``tol`` of 1, on either side?"""
    return ratio is not None and abs(ratio - 1.0) <= tol + 1e-12   # 0.95 itself is within


def bandwidth_vs_events(clock_control: str = "none", record: bool = True) -> dict:
    """Chapter 04's coalesced float4 scale, timed with events (`course.benchmark`, useful bytes: read and write
    every element once) and profiled once under ncu (DRAM bytes read and written over the kernel's duration).

    Returns ``event_gbps``, ``ncu_gbps``, ``ratio`` (ncu / event; None where ncu gave nothing),
    ``dram_bytes`` and ``useful_bytes``, ``event_ms`` and ``ncu_us``, and the ``profile``."""
    import course
    t = target("11-scale-vec4-grid")
    k = t.compiled()
    grid, block, args, useful, _ = t.launch()
    ev = course.benchmark(lambda: k(grid, block, *args), name=t.kernel)
    prof = course.profile(k, grid, block, *args, sections=("memory",), clock_control=clock_control,
                          record=t.key if record and clock_control == "none" else None)
    m = prof.metrics if prof and prof.source == "ncu" else {}
    dram = (m.get("dram__bytes_read.sum") or 0.0) + (m.get("dram__bytes_write.sum") or 0.0)
    ncu_gbps = prof.derived.get("dram_gbps") if m else None
    __import__("cupy").get_default_memory_pool().free_all_blocks()   # 2 GiB of arrays: give them back now
    return {"event_gbps": ev.gbps(useful), "event_ms": ev.median_ms, "event_iqr": ev.rel_iqr,
            "ncu_gbps": ncu_gbps, "ratio": ncu_gbps / ev.gbps(useful) if ncu_gbps else None,
            "dram_bytes": dram or None, "useful_bytes": useful, "ncu_us": prof.derived.get("duration_us") if m else None,
            "clock_control": clock_control, "profile": prof}
