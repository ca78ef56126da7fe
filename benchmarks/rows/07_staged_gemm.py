"""Chapter 07 rows: every stage of the staged GEMM at 4096^3 against cuBLAS of its precision.

The rows are the chapter's own comparison, course.lessons.ch07.compare_stages: each stage (the notebook's
%%cuda cells, the graded references from solutions/) checked at shapes that are no tile multiple (every
output, float64 reference) before anything is timed, then timed with cuBLAS SGEMM (TF32 off) and cuBLAS
BF16 in the same run. Stage 6 is the graded sgemm_regtile reference: its target is 0.70 x cuBLAS SGEMM.
"""
from __future__ import annotations


def rows(ctx) -> list:
    from course.lessons import ch07
    table = ch07.compare_stages(verbose=False, progress=False)
    rates = {r["name"]: r["rate"] for r in table}
    stages = {st.name: st for st in ch07.STAGES}
    out = []
    for r in table:
        if r["is_anchor"]:
            continue
        st = stages[r["name"]]
        out.append(ctx.row(r["name"], r["rate"], "TFLOP/s", anchor=f"{r['anchor']}, same run",
                           anchor_value=rates[r["anchor"]], target=0.70 if st.key == "vector" else None,
                           note=f"median {r['ms']:.3f} ms; tile intensity {ch07.stage_intensity(st):.1f} FLOP/B"))
    return out
