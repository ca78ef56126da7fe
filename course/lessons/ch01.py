"""Chapter 01 (first kernel): index maps, the wave sweep, FMA expectations, the sticky error in a child
process, the clock ramp-up plot, and the standalone C++ program built with nvcc.

Everything that draws or counts runs on the CPU; the functions that touch a GPU say so and raise
`course.NoGPUError` without one. The kernels are the notebook's ``%%cuda`` cells: helpers take them
compiled, or (the wave sweep, built before anything runs) the cell from `course.lesson_cell`.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from course import CELL_FIRST_LINE, benchmark, device_info, gpu_available, grid_2d, grid_for

__all__ = [
    "WARP", "thread_map_1d", "plot_thread_map_1d", "plot_index_map_2d", "fma_inputs",
    "fma_expected", "ptx_float_ops", "sticky_error_demo", "print_steps", "plot_ramp_up", "wave_runner",
    "WAVE_SLICE", "plot_wave_sweep", "nvcc_path", "build_and_run", "host_program",
]

WARP = 32

# --- index maps (CPU) ----------------------------------------------------------------------------

def thread_map_1d(n: int, block: int, grid: int | None = None) -> dict:
    """Which thread handles each of ``n`` items under a grid-stride loop.

    With ``grid=None`` the grid covers ``n`` (ceil-div) and every thread does at most one item; a
    smaller grid makes threads loop, item ``i`` going to global thread ``i % (grid * block)``.

    Returns NumPy arrays with one entry per item: ``block``, ``thread`` (in its block), ``warp`` (in its
    block), ``lane``, ``iteration`` (of the grid-stride loop).
    """
    if grid is None:
        grid = grid_for(n, block)
    if grid < 1 or block < 1:
        raise ValueError(f"`grid` and `block` should be positive; got grid={grid}, block={block}")
    i = np.arange(n)
    total = grid * block
    gtid = i % total
    tid = gtid % block
    return {"block": gtid // block, "thread": tid, "warp": tid // WARP, "lane": tid % WARP,
            "iteration": i // total}


def plot_thread_map_1d(n: int, block: int, grid: int | None = None, ax=None):
    """Draw items 0..n-1 as cells coloured by block, labelled with the thread index; rows are loop
    iterations of a grid-stride loop. Meant for small ``n`` (up to a few hundred)."""
    import matplotlib.pyplot as plt
    m = thread_map_1d(n, block, grid)
    g = grid or grid_for(n, block)
    total = g * block
    rows = int(m["iteration"].max()) + 1
    if ax is None:
        _fig, ax = plt.subplots(figsize=(min(14, 0.28 * total + 1), 0.5 * rows + 1.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k in range(n):
        x, y = k % total, int(m["iteration"][k])
        ax.add_patch(plt.Rectangle((x, y), 1, 1, color=colors[int(m["block"][k]) % len(colors)], alpha=0.75))
        if total <= 64:
            ax.text(x + 0.5, y + 0.5, str(int(m["thread"][k])), ha="center", va="center", fontsize=7)
    # the launched threads of the last row that found no item
    last = n % total
    if last:
        for x in range(last, total):
            ax.add_patch(plt.Rectangle((x, rows - 1), 1, 1, fill=False, hatch="//", ec="gray"))
    ax.set_xlim(0, total)
    ax.set_ylim(rows, 0)
    ax.set_yticks([r + 0.5 for r in range(rows)], [f"pass {r}" for r in range(rows)])
    ax.set_xlabel("global thread index (colour: block; hatched: launched, no item)")
    ax.set_title(f"n={n}, block={block}, grid={g}: {g * block} threads, "
                 f"{rows} pass{'es' if rows > 1 else ''}", fontsize=10)
    return ax


def plot_index_map_2d(width: int, height: int, block=(16, 16), ax=None):
    """Draw a ``width`` x ``height`` image covered by a ceil-div grid of 2D blocks.

    Threads whose (x, y) falls outside the image are hatched: they exist and must skip the work,
    which is what the bounds check ``if (x < width && y < height)`` is for.
    """
    import matplotlib.pyplot as plt
    bx, by = block
    gx, gy = grid_2d(width, height, block)
    if ax is None:
        _fig, ax = plt.subplots(figsize=(6, 6 * gy * by / max(1, gx * bx)))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j in range(gy):
        for i in range(gx):
            c = colors[(j * gx + i) % len(colors)]
            ax.add_patch(plt.Rectangle((i * bx, j * by), bx, by, color=c, alpha=0.35, ec="black", lw=1))
            ax.text(i * bx + bx / 2, j * by + by / 2, f"({i},{j})", ha="center", va="center", fontsize=8)
    ax.add_patch(plt.Rectangle((0, 0), width, height, fill=False, ec="black", lw=2.5))
    if gx * bx > width:
        ax.add_patch(plt.Rectangle((width, 0), gx * bx - width, gy * by, fill=False, hatch="//", ec="gray"))
    if gy * by > height:
        ax.add_patch(plt.Rectangle((0, height), width, gy * by - height, fill=False, hatch="//", ec="gray"))
    ax.set_xlim(0, gx * bx)
    ax.set_ylim(gy * by, 0)
    ax.set_aspect("equal")
    ax.set_xlabel("x (column)")
    ax.set_ylabel("y (row)")
    idle = gx * bx * gy * by - width * height
    ax.set_title(f"{width}x{height} image, blocks {bx}x{by}, grid {gx}x{gy}: "
                 f"{idle} of {gx * bx * gy * by} threads fall outside", fontsize=10)
    return ax


WAVE_SLICE = 16384
"""Elements each block of ``wave_add`` adds in the wave sweep (64 KiB per array per block)."""


def wave_runner(cell, max_waves: float = 4.0, slice_elems: int = WAVE_SLICE):
    """A ``run(waves, block, rounds) -> microseconds`` for `course.widgets.sweep` over ``wave_add``.

    ``cell`` is the notebook's cell (``course.lesson_cell("01_first_kernel", "wave_add")``). ``waves`` is
    the grid size in units of the SM count (blocks = round(waves * SMs)), so recordings from GPUs with
    different SM counts replay on the same axis. Compiling and allocating happen on the first call, so
    building the sweep on a machine without a GPU touches nothing.
    """
    state = {}

    def run(waves, block, rounds):
        if not state:
            import cupy
            sms = device_info().sm_count
            n = int(max_waves * sms + 1) * slice_elems
            rng = cupy.random.default_rng(7)
            x, y = (rng.standard_normal(n, dtype=cupy.float32) for _ in range(2))
            state.update(k=cell.kernel("wave_add"), sms=sms, x=x, y=y, z=cupy.empty(n, dtype=cupy.float32))
        blocks = max(1, round(waves * state["sms"]))
        if blocks * slice_elems > state["x"].size:
            raise ValueError(f"{waves} waves is more than the {max_waves} this runner allocated for")
        k, x, y, z = (state[key] for key in "kxyz")
        launch = lambda: k(blocks, block, x, y, z, slice_elems, rounds)  # noqa: E731
        return 1e3 * benchmark(launch, budget_s=0.3, min_samples=5, name="wave_add").median_ms
    return run


def plot_wave_sweep(sweep, *, block: int, ax=None):
    """Time against grid size (in waves of one block per SM) for each ``rounds`` of a wave sweep.

    Measures the slice first when a GPU is present; otherwise draws the recording the sweep replays.
    Returns the axes, or None when there is nothing to draw (no GPU and no recording).
    """
    import matplotlib.pyplot as plt
    curves = {r: sweep.curve(block=block, rounds=r) for r in sweep.params["rounds"]}
    if not any(v is not None for c in curves.values() for _, v in c):
        print("[no GPU] No recording of this sweep to draw; on a GPU this cell measures it.")
        return None
    if ax is None:
        _fig, ax = plt.subplots(figsize=(8, 4))
    for r, pts in curves.items():
        xs = [x for x, v in pts if v is not None]
        ys = [v for _, v in pts if v is not None]
        ax.plot(xs, ys, marker=".", label=("memory-bound (rounds=0)" if r == 0 else f"{r} FMAs per element"))
    for w in range(1, int(max(sweep.params["waves"])) + 1):
        ax.axvline(w, color="gray", ls=":", lw=1)
    ax.set_xlabel("grid size in blocks per SM (dotted: whole multiples of the SM count)")
    ax.set_ylabel("kernel time (us)")
    ax.set_yscale("log")
    where = "measured here" if sweep.live else f"recorded on {sweep.recorded_on}"
    ax.set_title(f"wave_add, block {block}: {where}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax


# --- floating point (CPU) ------------------------------------------------------------------------

def fma_inputs(n: int, seed: int = 0):
    """float32 triples (a, b, c) with c = -round(a*b), where a fused multiply-add differs from a
    separate multiply and add: the separate version gives exactly 0, the fused one the rounding
    error of the product."""
    rng = np.random.default_rng(seed)
    a, b = (rng.uniform(1.0, 2.0, n).astype(np.float32) for _ in range(2))
    c = -(a * b)  # NumPy rounds the float32 product: this is -round(a*b)
    return a, b, c


def fma_expected(a, b, c) -> dict:
    """The two correctly rounded answers for a*b+c in float32.

    ``separate`` = round(round(a*b) + c), what NumPy and a CPU without FMA compute.
    ``fused`` = round(a*b + c): a float32 product has at most 48 significant bits, so float64
    holds it exactly, and here the sum is exact too; one rounding to float32 gives what ``fmaf``
    returns, bit for bit.
    """
    a, b, c = (np.asarray(v, dtype=np.float32) for v in (a, b, c))
    separate = (a * b) + c
    fused = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)
    return {"separate": separate, "fused": fused}


_FLOAT_OP = re.compile(r"^\s*(fma|mul|add|sub)(?:\.rn|\.rz|\.rm|\.rp)?(?:\.ftz)?(?:\.sat)?\.f32\b", re.M)


def ptx_float_ops(ptx: str) -> dict:
    """Count single-precision fma / mul / add / sub instructions in PTX text."""
    ops = [m.group(1) for m in _FLOAT_OP.finditer(ptx)]
    return {op: ops.count(op) for op in ("fma", "mul", "add", "sub")}


# --- the sticky error, in a child process ---------------------------------------------------------

def _child_steps() -> None:
    """In the child: load the parent's compiled programs (pickled on stdin); print one JSON line per step."""
    import cupy
    from course import Module
    programs = pickle.load(sys.stdin.buffer)
    write_far, fill = Module(programs[0]).kernel("write_far"), Module(programs[1]).kernel("fill")
    x = cupy.zeros(1024, dtype=cupy.float32)
    sync = cupy.cuda.Device().synchronize

    def correct():
        fill(4, 256, x, 2.0, 1024)
        sync()
        return f"x[0] = {float(x[0])}"

    def fresh():
        y = cupy.zeros(16, dtype=cupy.float32)
        fill(1, 32, y, 3.0, 16)
        sync()

    # (step, what to do, detail when it works, note when it fails)
    steps = [("a correct kernel, then synchronize", correct, "", ""),
             ("launch a kernel that writes 4 TiB past its array", lambda: write_far(1, 32, x, 1 << 40),
              "the launch call returned normally: the kernel has not even run yet", ""),
             ("host work after the launch", lambda: time.sleep(0.01), "the host went on with its own work", ""),
             ("synchronize", sync, "no error (unexpected)", "  <- the kernel's fault surfaces here"),
             ("allocate a new array and run a correct kernel", fresh, "worked (unexpected)", "  <- sticky"),
             ("synchronize again", sync, "no error (unexpected)", "  <- the context stays broken")]
    for step, fn, ok_detail, fail_note in steps:
        try:
            out = {"step": step, "ok": True, "detail": fn() or ok_detail}
        except Exception as exc:
            first = str(exc).splitlines()[0] if str(exc) else ""
            out = {"step": step, "ok": False, "detail": f"{type(exc).__name__}: {first}{fail_note}"}
        print(json.dumps(out), flush=True)


def sticky_error_demo(write_far, fill, timeout: float = 180.0) -> list:
    """Trigger an illegal-address fault in a child process and report what each later call saw.

    ``write_far(p, offset)`` and ``fill(p, v, n)`` are the notebook's compiled kernels; the child loads
    the same compiled code. The fault corrupts the child's CUDA context for good (a *sticky* error: every
    later call fails with it), which is why it runs in a child: the notebook's own context is untouched.
    Returns one dict per step: ``step``, ``ok`` (bool) and ``detail``.
    """
    device_info()  # raises NoGPUError without a GPU, before spawning anything
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    programs = pickle.dumps((write_far.module.program, fill.module.program))
    proc = subprocess.run([sys.executable, "-c", "from course.lessons.ch01 import _child_steps; _child_steps()"],
                          input=programs, capture_output=True, timeout=timeout, env=env, cwd=root)
    steps = [json.loads(ln) for ln in proc.stdout.decode(errors="replace").splitlines() if ln.startswith('{"step"')]
    if not steps:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        steps.append({"step": "start the child", "ok": False,
                      "detail": f"exit code {proc.returncode}: " + " / ".join(tail)})
    return steps


def print_steps(steps) -> None:
    """One line per step of `sticky_error_demo`."""
    for s in steps:
        print(f"{'ok  ' if s['ok'] else 'FAIL'}  {s['step']:<50} {s['detail']}")


# --- timing (the measuring is the notebook's; this draws it) -----------------------------------------

def plot_ramp_up(result: dict, ax=None):
    """Run time per launch and the SM clock after it (right axis): ``result`` holds ``ms`` (run times),
    ``mhz`` (SM clock after each run, None where NVML is missing) and ``max_mhz``."""
    import matplotlib.pyplot as plt
    if ax is None:
        _fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(result["ms"], marker=".", color="C0")
    ax.set_xlabel("launch number after idling")
    ax.set_ylabel("kernel time (ms)", color="C0")
    ax.set_ylim(bottom=0)
    if any(m is not None for m in result["mhz"]):
        ax2 = ax.twinx()
        ax2.plot([m if m is not None else math.nan for m in result["mhz"]], color="C1", marker=".")
        ax2.set_ylabel("SM clock (MHz)", color="C1")
        if result.get("max_mhz"):
            ax2.axhline(result["max_mhz"], color="C1", ls=":", lw=1)
        ax2.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    return ax


# --- the vector add as a standalone C++ program, built with nvcc ------------------------------------

def nvcc_path() -> str | None:
    """nvcc on PATH, else in $CUDA_HOME/bin, $CUDA_PATH/bin or /usr/local/cuda/bin; None where there is none."""
    if shutil.which("nvcc"):
        return shutil.which("nvcc")
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(path := os.path.join(root, "bin", "nvcc"), os.X_OK):
            return path
    return None


def build_and_run(source: str, arch: str, *, nvcc: str, first_line: int = 1, timeout_s: float = 90.0) -> tuple:
    """Build ``source`` (as vec_add.cu in a temporary folder) with ``nvcc`` for ``arch`` and run it: (it built and
    exited with 0, the command and then the program's output or nvcc's messages). A failed build or run is
    reported, never raised. ``first_line`` numbers lines as the notebook numbers the cell (nvcc, ``__LINE__``)."""
    shown = f"$ nvcc -O2 -arch={arch} -o vec_add vec_add.cu && ./vec_add"
    with tempfile.TemporaryDirectory(prefix="course_ch01_") as tmp:
        src, exe = os.path.join(tmp, "vec_add.cu"), os.path.join(tmp, "vec_add")
        Path(src).write_text((f'#line {first_line} "vec_add.cu"\n' if first_line != 1 else "") + source)
        try:
            built = subprocess.run([nvcc, "-O2", f"-arch={arch}", "-o", exe, src], capture_output=True,
                                   text=True, timeout=timeout_s, cwd=tmp)
            if built.returncode != 0:
                return False, (f"{shown}\nnvcc stopped with exit status {built.returncode}:\n"
                               + (built.stdout + built.stderr).strip())
            ran = subprocess.run([exe], capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired as exc:
            return False, f"{shown}\n{Path(exc.cmd[0]).name} did not finish within {timeout_s:.0f} s"
        except OSError as exc:
            return False, f"{shown}\ncould not start {exc.filename or nvcc}: {exc.strerror or exc}"
    status = "" if ran.returncode == 0 else f"\n(the program exited with status {ran.returncode})"
    return ran.returncode == 0, f"{shown}\n{(ran.stdout + ran.stderr).strip()}{status}"


def host_program(source: str) -> str:
    """What chapter 01 prints for its standalone program: the command and the program's output where nvcc
    and a GPU are present, else one sentence naming what is missing (never a traceback)."""
    nvcc, gpu = nvcc_path(), gpu_available()
    if nvcc and gpu:
        return build_and_run(source, device_info().arch, nvcc=nvcc, first_line=CELL_FIRST_LINE)[1]
    missing = [what for what, here in (("nvcc (looked for on PATH, in $CUDA_HOME/bin and /usr/local/cuda/bin)",
                                        nvcc), ("GPU", gpu)) if not here]
    return (f"Not built and run here: this machine has no {' and no '.join(missing)}. "
            "The next cell takes the same steps through CuPy.")
