"""Models of Hopper's warpgroup MMA (wgmma) for pictures and checks (groundwork for chapter 13).

`descriptor` packs the 64-bit shared-memory matrix descriptor a ``wgmma.mma_async`` reads its A and B tiles
through; `accumulator_coords` says which (row, column) of the m64nNk16 FP32 result each of a warpgroup's 128
threads holds in each of its N/2 registers. Both are checked against the hardware by tests/library/test_wgmma.py.
"""
from __future__ import annotations

import numpy as np

__all__ = ["SWIZZLE_MODES", "descriptor", "accumulator_coords"]

# the descriptor's two top bits: how the tile was swizzled when it was written (chapter 13's TMA loads)
SWIZZLE_MODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}


def descriptor(address: int, lbo: int, sbo: int, swizzle: str = "128B") -> int:
    """The shared-memory matrix descriptor of a tile at shared ``address`` (bytes).

    ``lbo`` (leading byte offset) and ``sbo`` (stride byte offset) are the distances between core matrices (8
    rows of 16 bytes) along K and along M or N; for a K-major tile written with the 128-byte swizzle, eight
    128-byte rows make one swizzle repeat, so ``sbo`` is 1024 and ``lbo`` is not used (1 by convention).
    Bits: [0, 14) address / 16, [16, 30) lbo / 16, [32, 46) sbo / 16, [62, 64) the swizzle mode. A step of
    16 BF16 values along K inside the swizzled row adds 32 bytes, 2 to the descriptor.
    """
    for name, v in (("address", address), ("lbo", lbo), ("sbo", sbo)):
        if v % 16 or not 0 <= v < 1 << 18:
            raise ValueError(f"`{name}` should be a multiple of 16 below 256 KiB; got {v}")
    return ((address >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | SWIZZLE_MODES[swizzle] << 62)


def accumulator_coords(n: int) -> np.ndarray:
    """(128, n // 2, 2) array: the (row, column) of the m64nNk16 result held by thread t in register r.

    Warp w of the warpgroup holds rows 16w to 16w + 15, as an ``mma.sync`` m16n8 accumulator repeated over
    the n / 8 column blocks: lane l has rows 16w + l / 4 and 16w + l / 4 + 8, columns 2 (l % 4) and the next.
    """
    if n % 8 or not 8 <= n <= 256:
        raise ValueError(f"wgmma's N is a multiple of 8 from 8 to 256; got {n}")
    t = np.arange(128)[:, None]
    r = np.arange(n // 2)[None, :]
    warp, lane = t // 32, t % 32
    row = 16 * warp + lane // 4 + 8 * ((r // 2) % 2)
    col = 8 * (r // 4) + 2 * (lane % 4) + r % 2
    return np.stack(np.broadcast_arrays(row, col), axis=-1)
