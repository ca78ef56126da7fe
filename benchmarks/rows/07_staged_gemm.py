"""Chapter 07 rows: every stage of the staged GEMM at 4096^3 against cuBLAS of its precision.

course.lessons.ch07.measure_stages checks each stage at shapes that are no tile multiple (every output,
float64 reference) before timing, and times cuBLAS SGEMM (TF32 off) and cuBLAS BF16 in the same run.
Stage 6 is the graded sgemm_regtile reference: its target is 0.70 x cuBLAS SGEMM.
"""
from __future__ import annotations


def rows(ctx) -> list:
    from course.lessons import ch07
    measured = ch07.measure_stages(progress=False)
    out = []
    for r in measured:
        base = "cuBLAS SGEMM 4096^3 (FP32, TF32 off)" if r["precision"] == "fp32" else "cuBLAS BF16 4096^3"
        target = 0.70 if r["key"] == "vector" else None
        out.append(ctx.row(f"stage {r['stage']}: {r['title']}", r["tflops"], "TFLOP/s", anchor=f"{base}, same run",
                           anchor_value=r["cublas_tflops"], target=target,
                           note=f"median {r['ms']:.3f} ms; tile intensity {r['intensity']:.1f} FLOP/B"))
    return out
