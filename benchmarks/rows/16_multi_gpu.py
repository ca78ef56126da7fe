"""Chapter 16 rows (two or more GPUs; none on a machine with one): peer copies between every pair of GPUs against a
copy within GPU 0, GPU 0 loading GPU 1's memory, the all-reduces of the lesson (``ch16.allreduce_table``) and the
graded reference ring (solutions/16_multi_gpu, launched with the grader's geometry) against NCCL's all-reduce
at 256 MiB and 1 GiB per GPU, with NVLink multicast off, and the overlap of an all-reduce with compute. The
issue's goal: the reference ring at least 0.7 x NCCL's bus bandwidth at 256 MiB and above.
"""
from __future__ import annotations

from . import table_rows

CHAPTER = "16_multi_gpu"
RING_GOAL = 0.7


def rows(ctx) -> list:
    import course
    from course import multi_gpu as mg
    world = mg.gpu_count()
    if world < 2:
        print("  16_multi_gpu: one GPU here; its rows need two or more (nothing recorded)")
        return []
    import os
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    from autograder import get_exercise
    from course.lessons import ch16
    name = course.device_info().name
    pair = f"{world} x {name}"
    out = []
    matrix, both = ch16.bandwidth_table()
    for i in range(world):
        for j in range(world):
            if i != j:
                out.append(ctx.row(f"peer copy GPU {i} -> GPU {j}, 256 MiB ({pair})", matrix[i][j], "GB/s",
                                   anchor="copy within GPU 0, 256 MiB", anchor_value=matrix[0][0],
                                   note="cudaMemcpyPeerAsync, the copy engines"))
    out.append(ctx.row(f"peer copy GPU 0 <-> GPU 1 both directions at once, 256 MiB each ({pair})", both, "GB/s",
                       anchor="peer copy GPU 0 -> GPU 1", anchor_value=matrix[0][1], note="NVLink is full duplex"))
    out += table_rows(ctx, ch16.peer_read_table(verbose=False), f"GPU 0 reads 256 MiB from GPU 1, {pair}")
    ex = get_exercise(CHAPTER, "ring_step")
    ref = course.compile(course.solution_source(CHAPTER, "ring_step.cu")).kernel("ring_step")
    for mib in (256, 1024):
        n = mib * ch16.MIB // 4
        grid, block, _ = ex.launch({"n": n, "world": world}, ex.launch_defaults)
        label = "ring_step reference (graded), direct ring"
        table = ch16.allreduce_table(mib * ch16.MIB, extra=[(label, ref, {"grid": grid, "block": block})],
                                     verbose=False)
        out += table_rows(ctx, table, f"all-reduce {mib} MiB per GPU, {pair}", targets={label: RING_GOAL})
    o = ch16.overlap()
    for key, what in (("compute_ms", "products alone"), ("allreduce_ms", "all-reduce alone"),
                      ("serial_ms", "one after the other"), ("both_ms", "both at once")):
        out.append(ctx.row(f"overlap: {what}, 4 x 8192^2 FP32 products and 256 MiB all-reduce per GPU ({pair})",
                           o[key], "ms", higher_is_better=False))
    out.append(ctx.row(f"overlap: share of the all-reduce hidden behind the products ({pair})", o["hidden"], "fraction",
                       note="(serial - both) / min(compute, all-reduce)"))
    return out
