"""Chapter 14 (flash attention): the lesson's launches, inputs and checks, and the comparison of naive attention,
the one-row-per-thread kernel and the FlashAttention-2 kernel with PyTorch's attention where it is installed.

The kernels live in the notebook's `%%cuda` cells (`softmax_safe`, `attn_row`, `flash_fwd`, which includes
`attention_parts`). Q, K and V are (heads, n, d) BF16 bits (uint16), O is (heads, n, d) float32, and the
scores are scaled by 1 / sqrt(d). Naive attention is three launches: S = scale Q K^T by cuBLAS (BF16 in, FP32
out, every head in one batched call), the lesson's softmax over S's rows in place, and O = P V by cuBLAS
(TF32), so S (heads x n x n floats) goes to memory and back. PyTorch is optional: its
`scaled_dot_product_attention` backends are anchors only where `torch` imports and the backend runs.
"""
from __future__ import annotations

import math

import course
from course.attention import attention_flops, check_attention, inputs, reference  # noqa: F401 (re-exported)

__all__ = ["CHAPTER", "SHAPE", "inputs", "reference", "check_attention", "attention_flops", "launcher", "naive",
           "torch_backends", "compare_attention", "tile_sweep"]

CHAPTER = "14_flash_attention"
SHAPE = (64, 4096, 128)          # heads (batch 4 x 16 heads), sequence length, head dim: the case
_SMEM = {"flash_fwd": lambda br, bc, d: (br + 2 * bc) * d * 2,     # Q tile and one K and one V tile, BF16
         "attn_row": lambda br, bc, d: 2 * 64 * d * 4 + 128 * d * 2}   # FP32 K and V tiles, the queries


def launcher(name: str, kernel=None, *, br: int = 128, bc: int = 64, warps: int = 4):
    """``run(q, k, v, o, causal)`` -> a launch of the fused kernel ``name`` ("flash_fwd" or "attn_row"), compiled
    from its cell unless ``kernel`` is given (its tile macros BR, BC, WARPS must match)."""
    k = kernel or course.lesson_cell(CHAPTER, name).kernel(name)
    import numpy as np

    def run(q, kk, v, o, causal):
        heads, n, d = q.shape
        rows, threads = (br, warps * 32) if name == "flash_fwd" else (128, 128)
        grid = (course.grid_for(n, rows), heads)
        smem = _SMEM[name](br, bc, d)
        args = (q, kk, v, o, np.int32(n), np.int32(d), np.float32(1 / math.sqrt(d)), np.int32(bool(causal)))
        return lambda: k(grid, threads, *args, shared_mem=smem)
    return run


def naive(softmax=None):
    """``run(q, k, v, o, causal)`` -> naive attention's three launches; ``softmax`` is the lesson's
    `softmax_safe` kernel (compiled from its cell by default). Causal masking adds a pass that writes -inf
    above S's diagonal."""
    import cupy
    import numpy as np
    sm = softmax or course.lesson_cell(CHAPTER, "softmax_safe").kernel("softmax_safe")

    def run(q, k, v, o, causal):
        heads, n, d = q.shape
        s = cupy.empty((heads, n, n), dtype=cupy.float32)
        vf = course.cublas.from_bf16(v)
        above = cupy.triu(cupy.full((n, n), -cupy.inf, dtype=cupy.float32), 1) if causal else None

        def launch():
            course.cublas.gemm_batched(q, k, s, compute="bf16_f32", trans_b=True, alpha=1 / math.sqrt(d))
            if causal:
                s[...] += above
            sm(heads * n, 256, s, s, np.int32(heads * n), np.int32(n))
            course.cublas.gemm_batched(s, vf, o, compute="tf32")
        return launch
    return run


def torch_backends(q, k, v, causal: bool) -> dict:
    """name -> launch of PyTorch's attention on the same BF16 inputs (as (1, heads, n, d)) on CuPy's current
    stream, for every `scaled_dot_product_attention` backend that runs here; {} without PyTorch."""
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception:  # noqa: BLE001 - PyTorch is an optional anchor; any import failure means "not here"
        return {}
    import cupy
    tq, tk, tv = (torch.from_dlpack(x).view(torch.bfloat16)[None] for x in (q, k, v))
    out = {}
    for label, backend in (("FlashAttention-2", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION),
                           ("memory-efficient", SDPBackend.EFFICIENT_ATTENTION), ("math", SDPBackend.MATH)):
        def launch(backend=backend):
            # the benchmark times CuPy's current stream: PyTorch must queue its kernels there too
            with torch.cuda.stream(torch.cuda.ExternalStream(cupy.cuda.get_current_stream().ptr)), \
                    sdpa_kernel([backend]):
                torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=bool(causal))
        try:
            launch()
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a backend that refuses this GPU or shape is left out
            continue
        out[f"PyTorch SDPA {label}"] = launch
    return out


def compare_attention(shape=SHAPE, causal: bool = False, kernels=None, *, row_kernel: bool = True,
                      check_shape=(3, 333, None), **kw):
    """Naive attention, ``attn_row`` (unless ``row_kernel=False``) and ``flash_fwd``, each checked at
    ``check_shape`` (a sequence no tile divides; head dim: the shape's), then timed at ``shape`` with
    `course.variants.compare`; PyTorch's backends are anchors where present (flash_fwd is a fraction of
    FlashAttention-2's), else naive attention is the anchor. ``kernels``: name -> compiled kernel."""
    from course.variants import Variant, compare
    heads, n, d = shape
    kernels = kernels or {}
    runs = {"naive": naive(kernels.get("softmax_safe"))}
    if row_kernel:
        runs["attn_row"] = launcher("attn_row", kernels.get("attn_row"))
    runs["flash_fwd"] = launcher("flash_fwd", kernels.get("flash_fwd"))
    about = {"naive": "S = QK^T (cuBLAS), softmax_safe, PV (cuBLAS): S goes to memory",
             "attn_row": "fused, one query row per thread, FP32 CUDA cores",
             "flash_fwd": "fused, mma.sync tiles, online softmax in registers, cp.async"}
    q, k, v, o = inputs(heads, n, d, seed=1)
    ch = (check_shape[0], check_shape[1], check_shape[2] or d)

    def check(run, name):
        cq, ck, cv, co = inputs(*ch, seed=ch[1])
        run(cq, ck, cv, co, causal)()
        return check_attention(co, cq, ck, cv, causal, name=f"{name} at {ch} ({'causal' if causal else 'full'})")
    torch_runs = torch_backends(q, k, v, causal)
    anchors = [Variant(nm, f) for nm, f in torch_runs.items()]
    variants = [Variant(nm, r(q, k, v, o, causal), check=lambda r=r, nm=nm: check(r, nm), about=about[nm])
                for nm, r in runs.items()]
    if not anchors:
        anchors, variants = variants[:1], variants[1:]
    kw = {"budget_s": 1.0, "max_samples": 30, **kw}
    return compare(variants, anchors=anchors, work=attention_flops(heads, n, d, causal), unit="TFLOP/s",
                   title=f"attention, {heads} heads x {n} x {d}, {'causal' if causal else 'full'}, BF16 in", **kw)


def tile_sweep(shape=(16, 4096, 128), record=None):
    """A `course.widgets.sweep` of flash_fwd's TFLOP/s over its block rows BR, key tile BC and warps per block
    (each combination compiled with -D macros and checked first); replays the recording without a GPU."""
    def run(br, bc, warps):
        if br % (16 * warps):
            raise ValueError(f"BR = {br} does not split into {warps} warps of 16-row MMA tiles")
        kern = course.lesson_cell(CHAPTER, "flash_fwd").kernel(
            "flash_fwd", options=[f"-DBR={br}", f"-DBC={bc}", f"-DWARPS={warps}"])
        go = launcher("flash_fwd", kern, br=br, bc=bc, warps=warps)
        cq, ck, cv, co = inputs(2, 200, shape[2], seed=7)
        go(cq, ck, cv, co, False)()
        res = check_attention(co, cq, ck, cv, False, name=f"flash_fwd BR={br} BC={bc} WARPS={warps}")
        if not res:
            raise course.CheckError(res.message)
        q, k, v, o = inputs(*shape)
        return course.benchmark(go(q, k, v, o, False), budget_s=0.5, max_samples=15).tflops(
            attention_flops(*shape))
    from course.widgets import sweep
    return sweep(run, {"br": [64, 128, 256], "bc": [32, 64, 128], "warps": [4, 8]},
                 metric="TFLOP/s", name="14_flash_tiles", title=f"flash_fwd at {shape}", record=record)
