"""Warp access models: what one warp-wide access costs, from the addresses its 32 lanes ask for.

Two models read the same input, an index expression over the lanes of a warp:

- `warp_access`: the distinct 32-byte sectors (and 128-byte lines) a global load touches, which is what
  L1, L2 and DRAM move (chapter 04, coalescing);
- `bank_access`: the shared-memory banks the lanes hit and the wavefronts that takes (chapter 05, bank
  conflicts; chapter 08 uses it for ldmatrix).

A `Pattern` names one access in both languages (a C expression over the lane ``i`` and the Python
function it stands for) with its element size, and feeds either model: ``p.sectors()``, ``p.banks()``.
Nothing here needs a GPU.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

__all__ = ["WARP", "SECTOR", "LINE", "BANKS", "WORD", "Pattern", "WarpAccess", "warp_access", "BankAccess",
           "bank_access"]

WARP = 32
SECTOR = 32   # bytes: the unit L1 and L2 track, and what a DRAM miss fills
LINE = 128    # bytes: four sectors share one cache tag
BANKS = 32
WORD = 4      # bytes per bank per cycle


def _lane_addresses(index, elem_bytes: int, sizes: tuple, base: int, lanes: int) -> tuple:
    """(active lanes, byte address of each) of ``x[index(lane)]``, with the arguments checked."""
    if elem_bytes not in sizes:
        raise ValueError(f"`elem_bytes` should be one of {', '.join(map(str, sizes))}; got {elem_bytes!r}")
    if base % elem_bytes:
        raise ValueError(f"`base` ({base}) should be a multiple of `elem_bytes` ({elem_bytes}): CUDA loads "
                         f"of {elem_bytes}-byte types must be aligned to {elem_bytes} bytes")
    idx = [index(lane) for lane in range(lanes)] if callable(index) else list(index)
    if len(idx) != lanes:
        raise ValueError(f"`index` should give one entry per lane ({lanes}); got {len(idx)}")
    active = [(lane, int(i)) for lane, i in enumerate(idx) if i is not None]
    if any(i < 0 for _, i in active):
        raise ValueError("element indices should be >= 0 (a negative index reads before the allocation)")
    return (np.array([lane for lane, _ in active], dtype=np.int64),
            np.array([base + i * elem_bytes for _, i in active], dtype=np.int64))


# --- global memory: sectors ----------------------------------------------------------------------

@dataclasses.dataclass
class WarpAccess:
    """The bytes one warp-wide load asks for, and the sectors and lines that serve them.

    Attributes
    ----------
    lanes : ndarray of int
        Active lanes (a lane whose index is None sits the load out).
    addresses : ndarray of int
        Byte address of each active lane's element, relative to the allocation.
    elem_bytes : int
        Bytes each lane loads (4 for float, 16 for float4).
    sectors : ndarray of int
        Distinct 32-byte sectors covering the requested bytes, sorted (address // 32).
    lines : ndarray of int
        Distinct 128-byte lines those sectors belong to.
    """

    lanes: np.ndarray
    addresses: np.ndarray
    elem_bytes: int
    sectors: np.ndarray
    lines: np.ndarray

    @property
    def sectors_per_request(self) -> int:
        """What Nsight Compute reports as sectors / request for this one instruction."""
        return int(self.sectors.size)

    @property
    def useful_bytes(self) -> int:
        """Distinct bytes the lanes asked for (lanes reading the same element count once)."""
        covered = set()
        for a in self.addresses.tolist():
            covered.update(range(a, a + self.elem_bytes))
        return len(covered)

    @property
    def fetched_bytes(self) -> int:
        return SECTOR * self.sectors_per_request

    @property
    def ideal_sectors(self) -> int:
        """Sectors the same amount of useful data needs when packed and aligned."""
        return max(1, -(-self.useful_bytes // SECTOR)) if self.lanes.size else 0

    @property
    def efficiency(self) -> float:
        """Useful bytes over fetched bytes: the fraction of DRAM bandwidth that does work."""
        return self.useful_bytes / self.fetched_bytes if self.fetched_bytes else 0.0

    def summary(self) -> str:
        n, k = self.sectors_per_request, int(self.lines.size)
        return (f"{n} sector{'s' * (n != 1)} in {k} line{'s' * (k != 1)} per request "
                f"(ideal {self.ideal_sectors}); {100 * self.efficiency:.0f}% of fetched bytes used")


def warp_access(index, elem_bytes: int = 4, *, base: int = 0, lanes: int = WARP) -> WarpAccess:
    """Which sectors serve one warp-wide global load of ``x[index(lane)]``.

    Parameters
    ----------
    index : callable or sequence
        ``index(lane) -> element index`` (or None for an inactive lane), or one entry per lane.
    elem_bytes : int
        Size of one element: 1, 2, 4, 8 or 16 bytes. Loads are naturally aligned in CUDA, so an
        element never straddles two sectors.
    base : int
        Byte offset of element 0 from a 256-byte-aligned allocation (``cudaMalloc`` and CuPy
        align to at least 256 bytes); must be a multiple of ``elem_bytes``.
    lanes : int
        Lanes in the warp (32 on every NVIDIA GPU).

    Examples
    --------
    >>> warp_access(lambda lane: lane).sectors_per_request          # 128 aligned bytes
    4
    >>> warp_access(lambda lane: lane + 1).sectors_per_request      # shifted by one float
    5
    >>> warp_access(lambda lane: 32 * lane).sectors_per_request     # one sector per lane
    32
    """
    lane_ids, addr = _lane_addresses(index, elem_bytes, (1, 2, 4, 8, 16), base, lanes)
    sectors = np.unique(addr // SECTOR)
    return WarpAccess(lane_ids, addr, elem_bytes, sectors, np.unique(sectors // (LINE // SECTOR)))


# --- shared memory: banks ------------------------------------------------------------------------

@dataclasses.dataclass
class BankAccess:
    """One warp-wide shared-memory access under the 32-bank model.

    A request is served in phases (the whole warp for 4-byte elements, half-warps for 8 bytes,
    quarter-warps for 16 bytes: each phase asks for at most 128 bytes). In a phase, each bank
    delivers one 4-byte word per cycle; lanes reading the same word share it (broadcast), lanes
    reading different words of one bank wait for each other. A phase therefore takes as many
    wavefronts as the busiest bank has distinct words.

    Attributes
    ----------
    lanes, addresses : ndarray
        Active lanes and the byte address each reads (from the start of shared memory).
    elem_bytes : int
    banks : ndarray
        Bank of the first word of each lane's element.
    phase_degrees : list of int
        Wavefronts each phase needs.
    """

    lanes: np.ndarray
    addresses: np.ndarray
    elem_bytes: int
    banks: np.ndarray
    phase_degrees: list

    @property
    def degree(self) -> int:
        """The 'n' of an n-way bank conflict: the worst phase's wavefronts (1 = conflict-free)."""
        return max(self.phase_degrees, default=0)

    @property
    def wavefronts(self) -> int:
        """Total wavefronts: what the instruction costs in shared-memory cycles."""
        return int(sum(self.phase_degrees))

    @property
    def ideal_wavefronts(self) -> int:
        return sum(1 for d in self.phase_degrees if d)

    def phases(self) -> list:
        """Per phase: (first lane, last lane, {bank: {word: [lanes reading it]}})."""
        per_phase = WARP * WORD // self.elem_bytes  # lanes whose bytes fit one 128-byte phase
        out = []
        for start in range(0, WARP, per_phase):
            cells: dict = {}
            for lane, a in zip(self.lanes.tolist(), self.addresses.tolist()):
                if start <= lane < start + per_phase:
                    for w in range(a // WORD, (a + self.elem_bytes) // WORD):
                        cells.setdefault(w % BANKS, {}).setdefault(w, []).append(lane)
            out.append((start, start + per_phase - 1, cells))
        return out

    def summary(self) -> str:
        d = self.degree
        kind = "no conflict" if d <= 1 else f"{d}-way bank conflict"
        return f"{kind}: {self.wavefronts} wavefront(s), ideal {self.ideal_wavefronts}"


def bank_access(index, elem_bytes: int = 4, *, lanes: int = WARP, base: int = 0) -> BankAccess:
    """Banks and conflict degree of a warp reading ``s[index(lane)]`` from shared memory.

    Parameters
    ----------
    index : callable or sequence
        ``index(lane) -> element index`` (None: the lane is inactive), or one entry per lane.
    elem_bytes : int
        4 (float, int), 8 (double, float2) or 16 (float4).
    base : int
        Byte offset of element 0 in shared memory (a multiple of ``elem_bytes``).

    Examples
    --------
    >>> bank_access(lambda lane: lane).degree            # s[lane]: one bank each
    1
    >>> bank_access(lambda lane: 32 * lane).degree       # a column of float[32][32]
    32
    >>> bank_access(lambda lane: 33 * lane).degree       # a column of float[32][33]
    1
    >>> bank_access(lambda lane: 0).degree               # everyone reads one word: broadcast
    1
    """
    lane_ids, addr = _lane_addresses(index, elem_bytes, (4, 8, 16), base, lanes)
    acc = BankAccess(lane_ids, addr, elem_bytes, (addr // WORD) % BANKS, [])
    # a bank holding k distinct words in a phase needs k wavefronts (a word shared by lanes counts once)
    acc.phase_degrees = [max((len(words) for words in cells.values()), default=0) for _, _, cells in acc.phases()]
    return acc


# --- one shape for a named access ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Pattern:
    """A named warp access in both languages, for either model.

    ``c_expr`` is the C index expression in terms of the lane ``i`` (tile patterns also use ``ty``, the
    warp's row); ``index`` is the same expression in Python (lane -> element index, None for an
    inactive lane); ``elem_bytes`` is the element each lane reads.
    """

    name: str
    c_expr: str
    index: Callable
    elem_bytes: int = 4

    def sectors(self, base: int = 0) -> WarpAccess:
        """The sector model of this pattern as a global load (`warp_access`)."""
        return warp_access(self.index, self.elem_bytes, base=base)

    def banks(self, base: int = 0) -> BankAccess:
        """The bank model of this pattern as a shared-memory access (`bank_access`)."""
        return bank_access(self.index, self.elem_bytes, base=base)
