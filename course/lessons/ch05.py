"""Chapter 05 (shared memory and bank conflicts): which bank each lane hits, and the transpose.

The CPU half maps an index expression to banks and counts the conflict degree (`bank_access`,
`plot_banks`); the GPU half measures a strided shared-memory read, four transposes, and asks
Nsight Compute for its bank-conflict counters where the profiler is available.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .._table import print_table
from ..ncu import NcuResult, run_ncu
from .ch04 import _kernel, gbps_of

__all__ = [
    "BANKS", "WORD", "BankAccess", "bank_access", "plot_banks", "BankPattern", "BANK_PATTERNS",
    "bank_table", "SMEM_STRIDE_SRC", "SMEM_STRIDES", "SMEM_WIDTHS", "smem_runner", "smem_stride_sweep", "plot_smem_curve",
    "TRANSPOSE_NAIVE_SRC", "TRANSPOSE_TILED_SRC", "TRANSPOSES", "transpose_launch", "run_transpose",
    "transpose_table", "ncu_bank_conflicts", "predicted_transpose_conflicts", "conflict_bound_gbps",
    "H100_SXM",
]

BANKS = 32
WORD = 4  # bytes per bank per cycle


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

    def summary(self) -> str:
        d = self.degree
        kind = "no conflict" if d <= 1 else f"{d}-way bank conflict"
        return f"{kind}: {self.wavefronts} wavefront(s), ideal {self.ideal_wavefronts}"


def bank_access(index, elem_bytes: int = 4, *, lanes: int = 32, base: int = 0) -> BankAccess:
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
    if elem_bytes not in (4, 8, 16):
        raise ValueError(f"`elem_bytes` should be 4, 8 or 16; got {elem_bytes!r}")
    if base % elem_bytes:
        raise ValueError(f"`base` ({base}) should be a multiple of `elem_bytes` ({elem_bytes})")
    idx = [index(lane) for lane in range(lanes)] if callable(index) else list(index)
    if len(idx) != lanes:
        raise ValueError(f"`index` should give one entry per lane ({lanes}); got {len(idx)}")
    active = [(lane, int(i)) for lane, i in enumerate(idx) if i is not None]
    if any(i < 0 for _, i in active):
        raise ValueError("element indices should be >= 0")
    lane_ids = np.array([lane for lane, _ in active], dtype=np.int64)
    addr = np.array([base + i * elem_bytes for _, i in active], dtype=np.int64)
    per_phase = lanes * WORD // elem_bytes  # lanes whose bytes fit one 128-byte phase
    degrees = []
    for start in range(0, lanes, per_phase):
        words_by_bank: dict = {}
        for lane, a in zip(lane_ids.tolist(), addr.tolist()):
            if start <= lane < start + per_phase:
                for w in range(a // WORD, (a + elem_bytes) // WORD):
                    words_by_bank.setdefault(w % BANKS, set()).add(w)
        degrees.append(max((len(v) for v in words_by_bank.values()), default=0))
    return BankAccess(lane_ids, addr, elem_bytes, (addr // WORD) % BANKS, degrees)


def _phase_cells(acc: BankAccess) -> list:
    """Per phase: {bank: {word: [lanes]}}."""
    per_phase = 32 * WORD // acc.elem_bytes
    phases = []
    for start in range(0, 32, per_phase):
        cells: dict = {}
        for lane, a in zip(acc.lanes.tolist(), acc.addresses.tolist()):
            if start <= lane < start + per_phase:
                for w in range(a // WORD, (a + acc.elem_bytes) // WORD):
                    cells.setdefault(w % BANKS, {}).setdefault(w, []).append(lane)
        phases.append((start, start + per_phase - 1, cells))
    return phases


def plot_banks(acc: BankAccess, ax=None, title: str | None = None, max_rows: int = 12):
    """32 columns, one per bank; one row per wavefront. A bank with k distinct words in a phase
    needs k wavefronts, so a conflict shows as a column of stacked cells; lanes reading the same
    word share a cell (broadcast). 8- and 16-byte accesses are served in phases of 16 and 8 lanes,
    drawn one below the other."""
    import matplotlib.pyplot as plt
    phases = _phase_cells(acc)
    total = acc.wavefronts
    shown = min(max(total, 1), max_rows)
    if ax is None:
        _fig, ax = plt.subplots(figsize=(12, 0.42 * shown + 1.3))
    cmap = plt.get_cmap("viridis")
    row0 = 0
    for p, (lo, hi, cells) in enumerate(phases):
        depth = max((len(v) for v in cells.values()), default=0)
        for b, words in cells.items():
            for k, w in enumerate(sorted(words)):
                row = row0 + k
                if row >= shown:
                    continue
                ls = sorted(set(words[w]))
                ax.add_patch(plt.Rectangle((b, row), 1, 1, color=cmap(ls[0] / 32), alpha=0.55, lw=0.5, ec="white"))
                label = ",".join(map(str, ls)) if len(ls) <= 2 else f"{ls[0]}..{ls[-1]}\n({len(ls)})"
                ax.text(b + 0.5, row + 0.5, label, ha="center", va="center", fontsize=6)
        if len(phases) > 1 and row0 < shown:
            ax.axhline(row0, color="black", lw=1)
            ax.text(BANKS + 0.2, row0 + 0.5, f"phase {p + 1}\nlanes {lo}-{hi}", fontsize=7, va="center")
        row0 += depth
    if total > shown:
        ax.text(BANKS / 2, shown + 0.35, f"... {total - shown} more wavefronts", ha="center", fontsize=8)
    ax.set_xlim(0, BANKS + (3 if len(phases) > 1 else 0))
    ax.set_ylim(shown + (0.8 if total > shown else 0), 0)
    ax.set_xticks([b + 0.5 for b in range(BANKS)], [str(b) for b in range(BANKS)], fontsize=7)
    ax.set_yticks([r + 0.5 for r in range(shown)], [f"wavefront {r + 1}" for r in range(shown)], fontsize=7)
    ax.set_xlabel("bank (cells list the lanes reading that word)")
    t = acc.summary()
    ax.set_title(f"{title}\n{t}" if title else t, fontsize=9)
    return ax


@dataclasses.dataclass(frozen=True)
class BankPattern:
    """A named shared-memory access: C expression (lane ``i``, fixed row ``ty = 5``) and Python index."""

    name: str
    c_expr: str
    index: object
    elem_bytes: int = 4

    def access(self) -> BankAccess:
        return bank_access(self.index, self.elem_bytes)


_TY = 5  # the row a warp's threadIdx.y picks in the tile patterns; any value gives the same degree
BANK_PATTERNS = [
    BankPattern("row of float[32][32]: tile[ty][i]", "ty * 32 + i", lambda i: _TY * 32 + i),
    BankPattern("column of float[32][32]: tile[i][ty]", "i * 32 + ty", lambda i: i * 32 + _TY),
    BankPattern("column of float[32][33]: tile[i][ty]", "i * 33 + ty", lambda i: i * 33 + _TY),
    BankPattern("swizzled column: tile[i][ty ^ i]", "i * 32 + (ty ^ i)", lambda i: i * 32 + (_TY ^ i)),
    BankPattern("stride 2: s[2i]", "2 * i", lambda i: 2 * i),
    BankPattern("stride 3: s[3i]", "3 * i", lambda i: 3 * i),
    BankPattern("stride 16: s[16i]", "16 * i", lambda i: 16 * i),
    BankPattern("broadcast: s[0]", "0", lambda i: 0),
    BankPattern("float2 s2[i]", "i", lambda i: i, 8),
    BankPattern("float4 s4[i]", "i", lambda i: i, 16),
    BankPattern("float4 column of float4[32][8]: s4[i*8]", "i * 8", lambda i: 8 * i, 16),
]


def bank_table(patterns=None) -> list:
    """One dict per pattern: conflict degree and wavefronts under the bank model."""
    out = []
    for p in patterns or BANK_PATTERNS:
        a = p.access()
        out.append({"pattern": p.name, "bytes/lane": p.elem_bytes, "degree": a.degree,
                    "wavefronts": a.wavefronts, "ideal": a.ideal_wavefronts})
    return out


# --- measured: a strided shared-memory read ------------------------------------------------------

SMEM_STRIDE_SRC = r'''// Every warp reads shared memory at s[(lane * stride + r) % SIZE] for r = 0, 1, ...: the same
// bank pattern every iteration, shifted by one element, so the conflict degree stays that of `stride`.
__device__ __forceinline__ float total(float v)  { return v; }
__device__ __forceinline__ float total(float2 v) { return v.x + v.y; }
__device__ __forceinline__ float total(float4 v) { return (v.x + v.y) + (v.z + v.w); }

template <typename T, int SIZE>
__device__ void strided_reads(float* out, int stride, int reps)
{
    __shared__ T s[SIZE];
    float* f = reinterpret_cast<float*>(s);
    for (int i = threadIdx.x; i < SIZE * (int)(sizeof(T) / 4); i += blockDim.x)
        f[i] = (float)i;
    __syncthreads();
    const int lane = threadIdx.x % 32;
    int idx = (lane * stride) % SIZE;
    float acc = 0.0f;
    for (int r = 0; r < reps; ++r) {
        acc += total(s[idx]);             // every component used, so the load keeps its full width
        idx = (idx + 1) % SIZE;           // SIZE is a power of two: a mask, not a division
    }
    if (acc == -1.0f)                     // never true; keeps the loads from being optimized away
        out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

extern "C" __global__ void smem_stride_4(float* out, int stride, int reps)  { strided_reads<float, 4096>(out, stride, reps); }
extern "C" __global__ void smem_stride_8(float* out, int stride, int reps)  { strided_reads<float2, 2048>(out, stride, reps); }
extern "C" __global__ void smem_stride_16(float* out, int stride, int reps) { strided_reads<float4, 1024>(out, stride, reps); }
'''
"""Strided shared-memory reads of 4, 8 or 16-byte elements, for the conflict sweep."""

SMEM_STRIDES = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 24, 31, 32, 33]
SMEM_WIDTHS = [4, 8, 16]


def smem_runner(reps: int = 4096, blocks_per_sm: int = 8, block: int = 256):
    """A ``run(stride, width) -> shared-memory GB/s`` (bytes the lanes received, all SMs) for sweeps."""
    state = {}

    def run(stride, width):
        import cupy
        from .._env import device_info
        if width not in SMEM_WIDTHS:
            raise ValueError(f"width should be one of {SMEM_WIDTHS} bytes; got {width}")
        if not state:
            state["grid"] = device_info().sm_count * blocks_per_sm
            state["out"] = cupy.zeros(state["grid"] * block, dtype=cupy.float32)
        k = _kernel(SMEM_STRIDE_SRC, f"smem_stride_{width}")
        grid, out = state["grid"], state["out"]
        nbytes = grid * block * reps * width
        return gbps_of(lambda: k(grid, block, out, stride, reps), nbytes, flush_l2=False, name="smem_stride")
    return run


def smem_stride_sweep(record: bool | None = None):
    """The lesson's widget: shared-memory GB/s against stride, a slider for the element width."""
    from ..widgets import sweep
    return sweep(smem_runner(), {"stride": SMEM_STRIDES, "width": SMEM_WIDTHS}, metric="shared-memory GB/s",
                 name="05_bank_conflicts_smem_stride", title="s[(lane*stride + r) % size]", record=record)


def plot_smem_curve(sw, width: int = 4, ax=None):
    """Measured (or recorded) shared-memory GB/s against stride, with the model: stride-1 figure /
    (wavefronts relative to the conflict-free access)."""
    ideal = bank_access(lambda i: i, width).wavefronts
    return sw.plot_against_model(
        lambda s, base: base * ideal / bank_access(lambda i: i * s, width).wavefronts,
        fixed={"width": width}, measured_label=f"measured, {width}-byte elements",
        model_label="bank model: stride-1 figure / conflict factor",
        xlabel="stride (elements between neighbouring lanes)", ylabel="GB/s delivered by shared memory (all SMs)",
        title="strided shared-memory reads", ax=ax)


# --- the transpose ---------------------------------------------------------------------------

TRANSPOSE_NAIVE_SRC = r'''// out (cols x rows) = transpose of in (rows x cols), both row-major. Block (32, 8): each thread
// moves 4 elements of a 32 x 32 tile. Reads are coalesced; writes are not: neighbouring lanes write
// `rows` floats apart.
extern "C" __global__ void transpose_naive(const float* __restrict__ in, float* __restrict__ out,
                                        int rows, int cols)
{
    const int c = blockIdx.x * 32 + threadIdx.x;
    for (int k = 0; k < 32; k += 8) {
        const int r = blockIdx.y * 32 + threadIdx.y + k;
        if (r < rows && c < cols)
            out[(long long)c * rows + r] = in[(long long)r * cols + c];
    }
}
'''

TRANSPOSE_TILED_SRC = r'''// Through a shared-memory tile: read a 32 x 32 tile along its rows, write it out along its columns,
// so both global accesses are coalesced. The three versions differ only in the tile's layout.
// Block (32, 8), grid (ceil(cols / 32), ceil(rows / 32)).

// tile[32][32]: reading a column puts all 32 lanes in one bank (32-way conflict)
extern "C" __global__ void transpose_smem(const float* __restrict__ in, float* __restrict__ out,
                                       int rows, int cols)
{
    __shared__ float tile[32][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    for (int k = 0; k < 32; k += 8)
        if (r0 + ty + k < rows && c0 + tx < cols)
            tile[ty + k][tx] = in[(long long)(r0 + ty + k) * cols + c0 + tx];
    __syncthreads();
    for (int k = 0; k < 32; k += 8)
        if (c0 + ty + k < cols && r0 + tx < rows)
            out[(long long)(c0 + ty + k) * rows + r0 + tx] = tile[tx][ty + k];
}

// tile[32][33]: the unused 33rd column shifts each row by one bank, so a column hits 32 banks
extern "C" __global__ void transpose_pad(const float* __restrict__ in, float* __restrict__ out,
                                      int rows, int cols)
{
    __shared__ float tile[32][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    for (int k = 0; k < 32; k += 8)
        if (r0 + ty + k < rows && c0 + tx < cols)
            tile[ty + k][tx] = in[(long long)(r0 + ty + k) * cols + c0 + tx];
    __syncthreads();
    for (int k = 0; k < 32; k += 8)
        if (c0 + ty + k < cols && r0 + tx < rows)
            out[(long long)(c0 + ty + k) * rows + r0 + tx] = tile[tx][ty + k];
}

// tile[32][32] with element (r, c) stored at column c ^ r: a row is still a permutation of the 32
// banks, and so is a column, without a wasted word
extern "C" __global__ void transpose_swizzle(const float* __restrict__ in, float* __restrict__ out,
                                          int rows, int cols)
{
    __shared__ float tile[32][32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int r0 = blockIdx.y * 32, c0 = blockIdx.x * 32;
    for (int k = 0; k < 32; k += 8)
        if (r0 + ty + k < rows && c0 + tx < cols)
            tile[ty + k][tx ^ (ty + k)] = in[(long long)(r0 + ty + k) * cols + c0 + tx];
    __syncthreads();
    for (int k = 0; k < 32; k += 8)
        if (c0 + ty + k < cols && r0 + tx < rows)
            out[(long long)(c0 + ty + k) * rows + r0 + tx] = tile[tx][(ty + k) ^ tx];
}
'''

TRANSPOSES = {"transpose_naive": TRANSPOSE_NAIVE_SRC, "transpose_smem": TRANSPOSE_TILED_SRC,
              "transpose_pad": TRANSPOSE_TILED_SRC, "transpose_swizzle": TRANSPOSE_TILED_SRC}
"""Kernel name -> source, in the order the lesson measures them."""


def transpose_launch(rows: int, cols: int) -> tuple:
    """(grid, block) of the lesson's transposes: one (32, 8) block per 32 x 32 tile."""
    return (-(-cols // 32), -(-rows // 32)), (32, 8)


def run_transpose(name: str, inp, out=None):
    """Transpose the CuPy matrix ``inp`` with kernel ``name``; returns the output."""
    import cupy
    rows, cols = inp.shape
    if out is None:
        out = cupy.empty((cols, rows), dtype=cupy.float32)
    grid, block = transpose_launch(rows, cols)
    _kernel(TRANSPOSES[name], name)(grid, block, inp, out, rows, cols)
    return out


def transpose_table(rows: int = 8192, cols: int = 8192, names=None, check_shape=(1000, 1037)) -> dict:
    """name -> GB/s (bytes read + written) of each transpose, each checked first at an odd shape.

    Raises `course.CheckError` for a transpose that gets it wrong, before anything is timed.
    """
    import cupy
    from .._check import assert_close
    names = list(names or TRANSPOSES)
    rng = cupy.random.default_rng(5)
    small = rng.standard_normal(check_shape, dtype=cupy.float32)
    for n in names:
        assert_close(run_transpose(n, small), small.T, rtol=0, atol=0, name=f"{n} output")
    inp = rng.standard_normal((rows, cols), dtype=cupy.float32)
    out = cupy.empty((cols, rows), dtype=cupy.float32)
    res = {}
    for n in names:
        grid, block = transpose_launch(rows, cols)
        k = _kernel(TRANSPOSES[n], n)
        res[n] = gbps_of(lambda: k(grid, block, inp, out, rows, cols), 8 * rows * cols, name=n)
    return res


# --- Nsight Compute's view ---------------------------------------------------------------------

_M_LD = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
_M_ST = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
_M_WF_LD = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"


H100_SXM = {"sm_count": 132, "clock_mhz": 1980}
"""What `conflict_bound_gbps` assumes without a GPU: an H100 SXM at its maximum SM clock."""


def conflict_bound_gbps(degree: int, sm_count: int | None = None, clock_mhz: float | None = None) -> float:
    """Upper bound (GB/s, read + written) a tiled transpose gets from the shared-memory pipe alone.

    One 32 x 32 float tile costs 32 warp stores (one wavefront each) and 32 warp loads of ``degree``
    wavefronts each; the SM's shared memory retires one wavefront per cycle, and the tile moves
    8 KiB of DRAM traffic. Defaults: this GPU's SM count and maximum SM clock, or `H100_SXM`.

    Examples
    --------
    >>> round(conflict_bound_gbps(32, 132, 1980))   # tile[32][32]
    2028
    >>> conflict_bound_gbps(1, 132, 1980) > 30_000    # padded: shared memory is no limit
    True
    """
    if sm_count is None or clock_mhz is None:
        from .._env import device_info, gpu_available
        sms, mhz = H100_SXM["sm_count"], H100_SXM["clock_mhz"]
        if gpu_available():
            from .._nvml import sm_clock_mhz
            sms = device_info().sm_count
            clk = sm_clock_mhz()
            mhz = clk[1] if clk else mhz
        sm_count = sm_count or sms
        clock_mhz = clock_mhz or mhz
    cycles_per_tile = 32 * 1 + 32 * degree
    return sm_count * clock_mhz * 1e6 / cycles_per_tile * 8192 / 1e9


def predicted_transpose_conflicts(rows: int, cols: int) -> dict:
    """Bank-model conflicts (extra wavefronts) of the three tiled transposes on a full-tile matrix.

    Each warp load of a tile column costs ``degree`` wavefronts where 1 would do; stores along tile
    rows are conflict-free in all three (the swizzle permutes them, the padding shifts them).
    """
    if rows % 32 or cols % 32:
        raise ValueError("the prediction assumes full 32 x 32 tiles: rows and cols multiples of 32")
    loads = rows * cols // 32  # warp-wide loads from the tile, one per 32 elements
    out = {}
    for name, col in (("transpose_smem", lambda i: i * 32 + _TY), ("transpose_pad", lambda i: i * 33 + _TY),
                      ("transpose_swizzle", lambda i: i * 32 + (_TY ^ i))):
        a = bank_access(col)
        out[name] = {"ld conflicts": loads * (a.wavefronts - a.ideal_wavefronts), "st conflicts": 0}
    return out


def ncu_bank_conflicts(rows: int = 1024, cols: int = 1024) -> list:
    """Model vs Nsight Compute bank conflicts for the tiled transposes; prints and returns the rows.

    Prints one sentence instead when there is no GPU, no ncu, or no permission to read counters.
    """
    from .._env import gpu_available, no_gpu_message
    pred = predicted_transpose_conflicts(rows, cols)
    rows_out = [{"kernel": k, "model ld conflicts": v["ld conflicts"], "ncu ld conflicts": None,
                 "ncu st conflicts": None} for k, v in pred.items()]
    if not gpu_available():
        print(no_gpu_message("Reading Nsight Compute's bank-conflict counters"))
        print_table(rows_out)
        return rows_out
    script = (
        "import cupy, course\n"
        f"m = course.compile({TRANSPOSE_TILED_SRC!r})\n"
        f"x = cupy.random.default_rng(1).standard_normal(({rows}, {cols}), dtype=cupy.float32)\n"
        f"y = cupy.empty(({cols}, {rows}), dtype=cupy.float32)\n"
        "for name in ('transpose_smem', 'transpose_pad', 'transpose_swizzle'):\n"
        f"    m.kernel(name)(({-(-cols // 32)}, {-(-rows // 32)}), (32, 8), x, y, {rows}, {cols})\n"
        "cupy.cuda.Device().synchronize()\n")
    res: NcuResult = run_ncu(script, [_M_LD, _M_ST, _M_WF_LD], kernel="regex:transpose_", launches=3)
    if not res:
        print(res.reason)
    else:
        for r in rows_out:
            got = res.by_kernel.get(r["kernel"], {})
            r["ncu ld conflicts"] = got.get(_M_LD)
            r["ncu st conflicts"] = got.get(_M_ST)
    print_table(rows_out, floatfmt="{:.0f}")
    return rows_out
