"""Chapter 08 rows: the mma.sync reference feature by feature, its ceiling, and the simpler kernels.

Every kernel is checked at an odd shape before it is timed; cuBLAS BF16 (bf16 out) is timed in the same
run. The reference with everything on is the target row (0.60 x cuBLAS BF16); the mma.sync peak row
(tensor pipe with no memory traffic) is the ceiling that an mma.sync kernel cannot pass on this GPU.
"""
from __future__ import annotations

from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions" / "08_tensor_cores"


def rows(ctx) -> list:
    import cupy
    import course
    from course._cublas import from_bf16
    from course.lessons import ch07, ch08
    size = ch08.SIZE
    flops = ch07.gemm_flops(size, size, size)
    ablation = ch08.measure_ablation(size)
    base = ablation[0]["cublas_tflops"]
    anchor = "cuBLAS BF16 4096^3 (bf16 out), same run"
    out = []
    for i, r in enumerate(ablation):
        out.append(ctx.row(f"mma_gemm: {r['variant']}", r["tflops"], "TFLOP/s", anchor=anchor, anchor_value=base,
                           target=0.60 if i == 0 else None,
                           note="mma.sync m16n8k16 + ldmatrix + 4-stage cp.async; the default of solutions/08"
                           if i == 0 else "one feature of the reference changed"))
    peak = ch08.mma_peak()
    out.append(ctx.row("mma.sync peak: m16n8k16 with no memory traffic (ceiling of any mma.sync kernel)", peak,
                       "TFLOP/s", anchor=anchor, anchor_value=base,
                       note="cuBLAS reaches beyond it with Hopper's wgmma"))

    # the lesson's first mma.sync GEMM and the graded WMMA reference, float out
    a, b, _c = ch07.make_inputs(size, size, size, "bf16", seed=7)
    c32 = cupy.empty((size, size), cupy.float32)
    simple = ch08.simple_gemm()
    wmma = course.compile((SOLUTIONS / "wmma_gemm.cu").read_text()).kernel("wmma_gemm")
    graded = course.compile((SOLUTIONS / "mma_gemm.cu").read_text()).kernel("mma_gemm")
    runs = {
        "simple": lambda: simple(a, b, c32),
        "wmma": lambda: wmma((size // 64, size // 16), 128, a, b, c32, size, size, size),
        "graded": lambda: graded((size // 128) * (size // 256), 256, a, b, c32, size, size, size, shared_mem=98304),
    }
    sa, sb, _ = ch07.make_inputs(1024, 1024, 1024, "bf16", seed=8)
    small = cupy.empty((1024, 1024), cupy.float32)
    checks = {
        "simple": lambda: simple(sa, sb, small),
        "wmma": lambda: wmma((1024 // 64, 1024 // 16), 128, sa, sb, small, 1024, 1024, 1024),
        "graded": lambda: graded(4 * 8, 256, sa, sb, small, 1024, 1024, 1024, shared_mem=98304),
    }
    for name, fn in checks.items():
        small.fill(cupy.nan)
        fn()
        ref = from_bf16(sa).astype(cupy.float64) @ from_bf16(sb).astype(cupy.float64)
        res = course.check(small.astype(cupy.float64), ref, rtol=0, atol=1e-4 * float(cupy.abs(ref).max()), name=name)
        assert res, f"{name} wrong at 1024^3: {res.message}"
    t = ctx.interleaved(runs)
    tf = {k: v.tflops(flops) for k, v in t.items()}
    out += [
        ctx.row("graded mma_gemm reference (float out)", tf["graded"], "TFLOP/s", anchor=anchor, anchor_value=base,
                note="writes 4-byte outputs: 2x the bytes of cuBLAS's bf16 C"),
        ctx.row("lesson's first mma.sync GEMM (64 x 64 tiles, no cp.async, padded rows)", tf["simple"], "TFLOP/s",
                anchor="graded mma_gemm reference (float out)", anchor_value=tf["graded"]),
        ctx.row("graded wmma_gemm reference (one warp per 16 x 16 tile, no shared memory)", tf["wmma"], "TFLOP/s",
                anchor="graded mma_gemm reference (float out)", anchor_value=tf["graded"]),
    ]
    return out
