"""Chapter 14 (flash attention): the online softmax of attention scores, a row at a time (online_softmax), and
the fused attention forward on tensor cores (flash_attention: its contract and calibration are in the comments
above its exercise, further down).

online_softmax: y[r][c] = exp(x[r][c] - m_r) / sum_j exp(x[r][j] - m_r), m_r the row's max, for every row of a
row-major rows x cols float32 matrix, any rows >= 1 and cols >= 1 (so a row starts on a 16-byte boundary only
when r * cols % 4 == 0). One warp per row: blocks of `block` threads (256 by default, a multiple of 32), grid
ceil(rows / (block / 32)). The inputs are attention-like scores (`scores`): 2 x N(0, 1), with one element in
4,096 shifted by +100 and one by -100, each element drawn on its own. exp(100) overflows float32 (whose largest
exp is e^88.7), so a kernel that does not subtract the max turns those rows into NaN; a -100's output underflows
to 0. The NumPy reference is float64, max subtracted, rounded to float32.

Tolerance: |y - y64| <= 1e-5 |y64| + 1e-5 x the largest output. Only outputs with x - m above about -11.5 are
held to the relative term (below it the absolute term, at least 1e-5 / sum, is larger), and there a float32
kernel's errors are a few ulp: the rounding of x - m, expf's 1-2 ulp or __expf's rounding of (x - m) log2(e) (a
few ulp at |x - m| < 12), float32 sums of up to 2,048 positive terms, the online rescaling, 1 / sum. A float32
model of a warp-per-row online softmax on the spec's draws (tests/autograder/test_ch14_online_softmax.py) uses at
most 1.3% of the tolerance with expf, 5.4% with __expf (MUFU.EX2 at 2 ulp) and 19% at 8 ulp, so both are
right; leaving each row's last element out of the sum fails at 33 x 2047 by 20 x the tolerance or more.

Reference: solutions/14_flash_attention/online_softmax.cu. A row of up to 2,048 floats is read once into
registers (16 float4 per lane, with the 0-3 floats before the row's first 16-byte boundary and after its last
whole float4 one per lane), max and sum from there, written with float4 stores: 4 bytes read and 4 written per
element. Longer rows take the chapter's two passes (online (max, sum) pairs merged by shuffles, then the
output). The lesson's softmax_online (a warp per row, scalar loads, two reads of x) is the step below it;
its block-per-row softmax_safe does not run under this launch (grid ceil(rows / 8) leaves most rows unwritten:
corpus lesson_safe.cu). Format: autograder/SPEC_FORMAT.md.
"""
import numpy as np

from autograder import LARGER_THAN_L2, Exercise, In, Out, Points, Scalar, Tolerance, Uniform, cdiv
from course.attention import scores, softmax64  # shared with chapter 15's Triton softmax
from course.cublas import bf16_uniform, from_bf16, to_bf16

REG_COLS = 2048     # the reference keeps rows up to this long in registers (32 lanes x 16 float4)


def softmax_launch(sizes, cfg):
    """One warp per row: ceil(rows / (block / 32)) blocks of `block` threads."""
    block = cfg["block"]
    if not isinstance(block, int) or block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"block should be a multiple of 32 from 32 to 1024; got {block!r}")
    return cdiv(sizes["rows"], block // 32), block, 0


EXERCISES = [
    Exercise(
        name="online_softmax",
        kernel="online_softmax",
        source_file="online_softmax.cu",
        description=("y[r][c] = exp(x[r][c] - m) / sum_j exp(x[r][j] - m), m the largest x[r][j], for each row "
                     "of a row-major rows x cols float matrix, any rows and cols (rows need not start 16-byte "
                     "aligned). Blocks of `block` threads (default 256, a multiple of 32), grid ceil(rows / "
                     "(block / 32)): a warp per row. Scores are 2 x N(0, 1) with rare +-100 (exp(100) overflows "
                     "float32); checked against float64 within 1e-5 relative plus 1e-5 x the largest output."),
        params=[
            In("x", np.float32, ("rows", "cols"), gen=scores),
            Out("y", np.float32, ("rows", "cols")),
            Scalar("rows", "int", "rows"),
            Scalar("cols", "int", "cols"),
        ],
        # 1 x 1 and 257 x 1: rows of one float (y = 1) at every alignment; 1009 x 3 and 37 x 31: fewer
        # floats than a warp has lanes, rows starting anywhere in a 16-byte segment; 509 x 1024: every row
        # aligned, no head or tail; 33 x 2047 / 2048 / 2049: just inside, at and past the reference's
        # register path (REG_COLS); 3 x 100,003: long rows (two passes); 1,001 columns larger than L2
        sizes=[{"rows": 1, "cols": 1}, {"rows": 257, "cols": 1}, {"rows": 1009, "cols": 3},
               {"rows": 37, "cols": 31}, {"rows": 509, "cols": 1024}, {"rows": 33, "cols": REG_COLS - 1},
               {"rows": 33, "cols": REG_COLS}, {"rows": 33, "cols": REG_COLS + 1}, {"rows": 3, "cols": 100_003},
               {"rows": LARGER_THAN_L2, "cols": 1001}],
        # 2,048 columns, 8 x L2 of rows. Why this width: the lesson's softmax_online reads x twice, and its
        # second read comes from DRAM only when what its warps read and write between the two reads of a row
        # (64 warps a SM x 132 SMs x 8 KiB of x, and as much of y) overflows L2 (50 MiB on an H100, 60 MiB on an
        # H200). At 1,024 columns much of it would still hit in L2 and the two kernels would be close. The
        # reference's register path covers 2,048, so it reads x once: 8 bytes per element against the lesson's 12.
        speed_size={"rows": LARGER_THAN_L2 * 4, "cols": REG_COLS},
        launch=softmax_launch,
        launch_defaults={"block": 256},
        reference=lambda v: {"y": softmax64(v["x"])},
        tolerance=Tolerance(rtol=1e-5),       # atol None: 1e-5 x the largest output (the module docstring)
        points=Points(correctness=5, speed=5),
        # Calibration (H200, benchmarks/rows/14_flash_attention.py at 30,721 x 2,048, 8 x L2): the reference moved
        # 0.96 of the copy ceiling, the lesson's softmax_online (corpus lesson_online.cu: x read twice) 0.49 and
        # softmax_safe 0.50: 0.51 of the reference. Full points at 0.8 (a single read of x; the lesson's kernel is
        # far below 0.8 x 0.95), half from 0.4, which the lesson's two-pass kernel earns with room on either side
        # of its ratio (a kernel reading x three times from DRAM would not).
        speed_threshold=0.8,
        speed_tiers=((0.4, 0.5),),
        floor_bytes=lambda s: 8 * s["rows"] * s["cols"],     # x read once, y written once
        # hidden sizes: rows around a default block's 8 warps; cols around a warp's float4 step (32 lanes x 4
        # floats), whose multiples include REG_COLS, so 2047 and 2049 can be drawn; up to 4 x REG_COLS, both
        # paths of the reference (it takes any rows and cols) and rows up to 2,048 (64 MiB at most together)
        tile={"rows": 8, "cols": 128},
        size_range={"rows": (1, 2048), "cols": (1, 4 * REG_COLS)},
    ),
]


# -- flash_attention ----------------------------------------------------------------------------------------
# O = softmax(scale Q K^T) V per query head, in the (batch, n, heads, d) layout, heads = hk x g: each of the hk
# K/V heads serves a group of g query heads (grouped-query attention; g = 1 is ordinary multi-head attention).
# Sizes: b (batch), n (sequence), hk, g, d (head dim: 64 or 128, a multiple of 64) and mask (1 full, 2 causal:
# the kernel's `causal` is mask - 1). Q and K are BF16-rounded N(0, 1), V BF16-rounded uniform [-1, 1).
# The scale is drawn per case from [0.05, 4): near 1 / sqrt(d) the softmax is flat, near 4 one key takes a row
# and scores pass 88.7 (exp overflows float32), so a kernel without the running max fails there.
#
# Tolerance: 4e-3 absolute (and 1e-3 relative). mma.sync needs P in BF16: rounding each probability moves it by
# at most 2^-9 of itself, so O = sum_j p_j v_j / l moves by at most 2^-9 max|v| = 2^-9 (l is summed from the
# unrounded p); 4e-3 is twice that. A missing key tile, a mask off by one row or a rescale left out misses by
# far more where the softmax is peaked (large scales) or short (the first rows under a causal mask).
#
# Reference: solutions/14_flash_attention/flash_attention.cu, the lesson's flash_fwd with the layout's strides
# and the K/V head of each group: a renamed flash_fwd reads the wrong rows (its layout is (heads, n, d)) and
# fails. Both products must run on tensor cores (HMMA in the SASS): a CUDA-core kernel such as the lesson's
# attn_row, adapted, is not the exercise.

def bf16_normal(rng, shape, dtype):
    """BF16 bits of standard normal values (rounded to nearest even)."""
    return to_bf16(rng.standard_normal(shape).astype(np.float32))



def attention64(v):
    """The float64 attention of the BF16 inputs, a (batch, head) at a time (S stays n x n)."""
    q, k, vv = (from_bf16(v[x]).astype(np.float64) for x in ("q", "k", "v"))
    b, n, heads, d = q.shape
    group = heads // k.shape[2]
    hidden = np.triu(np.ones((n, n), dtype=bool), 1) if int(v["causal"]) else None
    out = np.empty(q.shape, np.float32)
    for i in range(b):
        for h in range(heads):
            s = float(v["scale"]) * (q[i, :, h] @ k[i, :, h // group].T)
            if hidden is not None:
                s[hidden] = -np.inf
            p = np.exp(s - s.max(axis=1, keepdims=True))
            out[i, :, h] = (p / p.sum(axis=1, keepdims=True)) @ vv[i, :, h // group]
    return {"o": out}


def attention_launch(sizes, cfg):
    """grid (ceil(n / br), heads, batch); `threads` a block; smem_rows x d BF16 values of dynamic shared memory."""
    return ((cdiv(sizes["n"], cfg["br"]), sizes["hk"] * sizes["g"], sizes["b"]), cfg["threads"],
            cfg["smem_rows"] * sizes["d"] * 2)


EXERCISES.append(
    Exercise(
        name="flash_attention",
        kernel="flash_attention",
        source_file="flash_attention.cu",
        description=("o = softmax(scale q k^T) v for every query head: q and o (b, n, heads, d), k and v (b, n, "
                     "kv_heads, d), query head h reading K/V head h / (heads / kv_heads); q, k, v BF16 bits, o "
                     "float; d is 64 or 128; causal = 1 hides keys after the query. Tensor cores (mma.sync) "
                     "required. Grid (ceil(n / br), heads, b), `threads` a block, smem_rows x d x 2 bytes of "
                     "dynamic shared memory (defaults 128, 128, 256: Q's 128 rows and one K and one V tile of "
                     "64). Checked against float64 within 4e-3."),
        params=[
            In("q", np.uint16, ("b", "n", "hk * g", "d"), gen=bf16_normal),
            In("k", np.uint16, ("b", "n", "hk", "d"), gen=bf16_normal),
            In("v", np.uint16, ("b", "n", "hk", "d"), gen=bf16_uniform),
            Out("o", np.float32, ("b", "n", "hk * g", "d")),
            Scalar("n", "int", "n"),
            Scalar("heads", "int", "hk * g"),
            Scalar("kv_heads", "int", "hk"),
            Scalar("d", "int", "d"),
            Scalar("scale", "float", Uniform(0.05, 4.0)),
            Scalar("causal", "int", "mask - 1"),
        ],
        # one of everything; a prime 3 K/V heads and n = 77 under the causal mask (a partial tile that crosses
        # the diagonal); groups of 2 and 3 at d = 128; n = 1031 (prime, causal, 9 query blocks); n = 513 (one
        # row past a tile); many short sequences larger than L2 (a batch of them)
        sizes=[{"b": 1, "n": 1, "hk": 1, "g": 1, "d": 64, "mask": 1},
               {"b": 1, "n": 77, "hk": 3, "g": 1, "d": 64, "mask": 2},
               {"b": 2, "n": 200, "hk": 2, "g": 2, "d": 128, "mask": 1},
               {"b": 1, "n": 333, "hk": 1, "g": 3, "d": 128, "mask": 2},
               {"b": 1, "n": 1031, "hk": 1, "g": 1, "d": 64, "mask": 2},
               {"b": 2, "n": 513, "hk": 2, "g": 1, "d": 128, "mask": 1},
               {"b": LARGER_THAN_L2, "n": 40, "hk": 1, "g": 2, "d": 64, "mask": 1}],
        size_multiples={"d": 64},
        # the case: a batch of 4 x 16 query heads (8 K/V heads of 2), 4096 positions, head dim 128, full
        speed_size={"b": 4, "n": 4096, "hk": 8, "g": 2, "d": 128, "mask": 1},
        launch=attention_launch,
        launch_defaults={"br": 128, "threads": 128, "smem_rows": 256},
        reference=attention64,
        tolerance=Tolerance(rtol=1e-3, atol=4e-3),
        points=Points(correctness=6, speed=4),
        required_techniques=("tensor_cores",),
        min_cc=(8, 0),
        # Calibration (H200, 4 x 16 heads x 4096 x 128): this reference ran at 0.97 of the lesson's flash_fwd
        # (380 TFLOP/s), which runs at about 1.1 of PyTorch's FlashAttention-2; graded as a student, 1.00 of
        # itself. With 16 query rows a warp (BR 64, 4 warps: corpus rows16_per_warp) the grader measured 0.83, so
        # full points need 0.9 (32 rows a warp, K/V copies overlapping the math, little integer work in the loop:
        # the reference's 10% of room and no more); half from 0.5, which the 16-row split and the 8-warp split
        # (0.68 in the lesson's sweep) both earn.
        speed_threshold=0.9,
        speed_tiers=((0.5, 0.5),),
        floor_flops=lambda s: 4 * s["b"] * s["hk"] * s["g"] * s["n"] ** 2 * s["d"],
        peak="bf16",
        timeout_s=20.0,
        # hidden sizes: n around the 128-row query blocks (and so the 64-key tiles), d either head dim, masks of
        # both kinds, up to 2 x 2 K/V heads with groups up to 3 (the float64 reference runs a head at a time);
        # the small counts take a tile of 2, which their ranges hold no multiple of 4 of anyway
        tile={"n": 128, "d": 64, "b": 2, "hk": 2, "g": 2, "mask": 2},
        size_range={"b": (1, 2), "n": (1, 1100), "hk": (1, 2), "g": (1, 3), "d": (64, 128), "mask": (1, 2)},
    ))
