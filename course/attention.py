"""Attention's inputs, float64 reference, check and FLOP count: what chapters 14 (CUDA) and 15 (Triton) share.

Q, K and V are (heads, n, d) BF16 bits (uint16), O is (heads, n, d) float32, and the scores are scaled by
1 / sqrt(d); causal attention lets row i see keys 0..i.
"""
from __future__ import annotations

import math

import numpy as np

import course

__all__ = ["inputs", "reference", "check_attention", "attention_flops", "scores", "softmax64", "SPREAD", "BIG",
           "BIG_ODDS"]

# the graded softmax exercises' scores (chapters 14 and 15; autograder/specs): NumPy, drawn on the host



def inputs(heads: int, n: int, d: int, seed: int = 0):
    """q, k, v: standard normal values rounded to BF16 (uint16 bits); o: float32 full of NaN."""
    import cupy
    rng = cupy.random.default_rng(seed)
    q, k, v = (course.cublas.to_bf16(rng.standard_normal((heads, n, d), dtype=cupy.float32)) for _ in range(3))
    return q, k, v, cupy.full((heads, n, d), cupy.nan, dtype=cupy.float32)


def reference(q, k, v, causal: bool):
    """softmax(Q K^T / sqrt(d)) V in float64 from the same BF16 inputs (a CuPy array), a head at a time."""
    import cupy
    heads, n, d = q.shape
    out = cupy.empty((heads, n, d), dtype=cupy.float64)
    hidden = cupy.triu(cupy.ones((n, n), dtype=bool), 1) if causal else None
    for h in range(heads):
        qh, kh, vh = (course.cublas.from_bf16(x[h]).astype(cupy.float64) for x in (q, k, v))
        s = qh @ kh.T / math.sqrt(d)
        if causal:
            s[hidden] = -cupy.inf
        p = cupy.exp(s - s.max(axis=1, keepdims=True))
        out[h] = (p / p.sum(axis=1, keepdims=True)) @ vh
    return out


def check_attention(o, q, k, v, causal: bool, name: str = "O"):
    """``o`` against `reference`. A kernel that rounds P to BF16 before P V (as mma.sync needs) is off by at
    most 2^-9 of the largest |v| per term, so 2^-8 x max|V| passes it with room; a missing key tile, a wrong
    mask or a softmax without its rescale misses by much more."""
    import cupy
    ref = reference(q, k, v, causal)
    atol = 2.0 ** -8 * float(cupy.abs(course.cublas.from_bf16(v)).max())
    return course.check(o.astype(cupy.float64), ref, rtol=0, atol=atol, name=name)


def attention_flops(heads: int, n: int, d: int, causal: bool = False) -> float:
    """4 n^2 d per head (Q K^T and P V, a multiply and an add each); causal: the n (n + 1) / 2 pairs kept."""
    pairs = n * (n + 1) / 2 if causal else n * n
    return 4.0 * heads * pairs * d


SPREAD = 2.0        # std of the ordinary scores
BIG = 100.0         # the rare shift: exp(100) = 2.7e43 overflows float32 (max 3.4e38, exp's limit 88.7)
BIG_ODDS = 4096     # one element in BIG_ODDS shifted by +BIG, another one by -BIG


def scores(rng, shape, dtype):
    """Attention-like scores, each element on its own: SPREAD x N(0, 1), one in BIG_ODDS shifted by +BIG and one
    by -BIG. A row of 2,048 has a +BIG element with odds 0.39; (509, 1024) holds about 127 of them."""
    x = SPREAD * rng.standard_normal(size=shape)
    u = rng.random(size=shape)
    x += BIG * ((u < 1 / BIG_ODDS).astype(np.float64) - (u >= 1 - 1 / BIG_ODDS))
    return x.astype(dtype)


def softmax64(x, chunk_elems=1 << 22):
    """Row softmax in float64 (max subtracted), a band of rows at a time: the case larger than L2 holds 13-16 M
    elements, and three float64 copies of it at once would take most of a gigabyte."""
    x = np.asarray(x)
    out = np.empty(x.shape, np.float32)
    band = max(1, chunk_elems // max(1, x.shape[1]))
    for r0 in range(0, x.shape[0], band):
        b = x[r0:r0 + band].astype(np.float64)
        e = np.exp(b - b.max(axis=1, keepdims=True))
        out[r0:r0 + band] = e / e.sum(axis=1, keepdims=True)
    return out
