"""Load compiled programs on the GPU and launch kernels with checked, typed arguments."""
from __future__ import annotations

import math

import numpy as np

from ._compile import Program, Resources, compile_for_arch, resource_lines
from ._errors import LaunchError
from ._signature import parse_kernels

__all__ = ["Module", "Kernel", "compile", "grid_for", "grid_2d", "cooperative_problem"]

# CUfunction_attribute values (cuda.h)
_ATTR_MAX_THREADS, _ATTR_SHARED, _ATTR_CONST, _ATTR_LOCAL, _ATTR_REGS = 0, 1, 2, 3, 4
_ATTR_MAX_DYN_SHARED = 8
_DEFAULT_DYN_SMEM = 48 * 1024


def grid_for(n: int, block: int) -> int:
    """Blocks needed to give each of ``n`` items a thread: ceil(n / block), at least 1."""
    if block <= 0:
        raise ValueError(f"`block` should be a positive number of threads; got {block}")
    return max(1, -(-int(n) // int(block)))


def grid_2d(width: int, height: int, block) -> tuple:
    """(gx, gy) covering a width x height domain with ``block`` = (bx, by) threads."""
    bx, by = (block, 1) if isinstance(block, int) else block[:2]
    return grid_for(width, bx), grid_for(height, by)


def cooperative_problem(name: str, blocks: int, threads: int, shared_mem: int, per_sm: int, sm_count: int):
    """Why a cooperative launch of ``blocks`` blocks cannot run, or None when it can.

    A grid-wide barrier (`cg::this_grid().sync()`) waits for every block, so every block must be resident at
    once: at most ``per_sm`` (the occupancy API's blocks per SM for this block and shared memory) times
    ``sm_count``. The driver refuses a larger cooperative launch, and CuPy would shrink a 1-D grid quietly.
    """
    limit = per_sm * sm_count
    if blocks <= limit:
        return None
    if per_sm == 0:
        return (f"{name}: a block of {threads} threads with {shared_mem} bytes of dynamic shared memory does not "
                "fit on an SM at all (the occupancy API gives 0 blocks per SM), so no cooperative launch can run it. "
                "Use a smaller block or less shared memory.")
    return (f"{name}: a cooperative launch needs every block resident at once, but {blocks} blocks were asked "
            f"for and at most {limit} fit ({per_sm} per SM, from the occupancy API for {threads} threads and "
            f"{shared_mem} bytes of dynamic shared memory, x {sm_count} SMs). Launch at most {limit} blocks "
            "(kernel.max_cooperative_grid(block, shared_mem)) and let each loop over its share of the work.")


def _dim3(v, what: str) -> tuple:
    if isinstance(v, (int, np.integer)):
        v = (int(v),)
    try:
        t = tuple(int(x) for x in v)
    except TypeError:
        raise LaunchError(f"`{what}` should be an int or a tuple of up to 3 ints; got {v!r}") from None
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise LaunchError(f"`{what}` should have 1 to 3 positive entries; got {v!r}")
    return t + (1,) * (3 - len(t))


class Kernel:
    """A loaded `__global__` function: call it as ``k(grid, block, *args, shared_mem=0, stream=None)``."""

    def __init__(self, function, name: str, params, resources: Resources | None, module: "Module"):
        self._fn = function
        self.name = name
        self.params = params
        self.module = module
        self._static = resources or Resources()
        self._dyn_limit = _DEFAULT_DYN_SMEM

    def _attr(self, attr: int) -> int:
        from cupy.cuda import driver
        return driver.funcGetAttribute(attr, self._fn.ptr)

    @property
    def resources(self) -> Resources:
        """Registers, shared and local memory as the driver sees them, spills from ptxas."""
        return Resources(registers=self._attr(_ATTR_REGS), static_smem=self._attr(_ATTR_SHARED),
                         local_bytes=self._attr(_ATTR_LOCAL), spill_stores=self._static.spill_stores,
                         spill_loads=self._static.spill_loads, const_bytes=self._attr(_ATTR_CONST),
                         max_threads_per_block=self._attr(_ATTR_MAX_THREADS))

    def occupancy(self, block, shared_mem: int = 0) -> int:
        """Resident blocks per SM for this block size and dynamic shared memory."""
        from cupy.cuda import driver
        threads = math.prod(_dim3(block, "block"))
        self._ensure_dyn_smem(shared_mem)
        return driver.occupancyMaxActiveBlocksPerMultiprocessor(self._fn.ptr, threads, shared_mem)

    def max_cooperative_grid(self, block, shared_mem: int = 0) -> int:
        """The most blocks a cooperative launch of this kernel may have: blocks per SM x SMs."""
        from ._env import device_info
        return self.occupancy(block, shared_mem) * device_info().sm_count

    def max_active_clusters(self, block, shared_mem: int = 0, cluster: int = 2) -> int:
        """How many clusters of ``cluster`` blocks can run at once (sm_90). Less than SMs / cluster where a GPC's
        SMs do not split evenly, or the blocks are large: a persistent cluster kernel launches this many, since
        a cluster beyond them waits for a whole cluster to finish (cuda-python's cuOccupancyMaxActiveClusters)."""
        from ._bindings import bindings
        drv = bindings("driver", "Counting the clusters that fit at once")
        self._ensure_dyn_smem(shared_mem)
        x, y, z = _dim3(block, "block")
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = cluster, 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = x, y, z
        cfg.sharedMemBytes = shared_mem
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        cfg.attrs, cfg.numAttrs = [attr], 1
        err, count = drv.cuOccupancyMaxActiveClusters(drv.CUfunction(self._fn.ptr), cfg)
        if int(err) != 0:
            raise LaunchError(f"{self.name}: cuOccupancyMaxActiveClusters refused ({getattr(err, 'name', err)}); "
                              "clusters need compute capability 9.0")
        return int(count)

    def _ensure_dyn_smem(self, shared_mem: int) -> None:
        if shared_mem <= self._dyn_limit:
            return
        from cupy.cuda import driver
        from ._env import device_info
        limit = device_info().smem_per_block_optin - self._attr(_ATTR_SHARED)
        if shared_mem > limit:
            raise LaunchError(
                f"{self.name}: {shared_mem} bytes of dynamic shared memory requested, but this GPU "
                f"allows at most {limit} per block next to the kernel's static shared memory. "
                "Use smaller tiles or fewer pipeline stages.")
        # above 48 KiB a kernel must opt in explicitly
        driver.funcSetAttribute(self._fn.ptr, _ATTR_MAX_DYN_SHARED, shared_mem)
        self._dyn_limit = shared_mem

    def convert_args(self, args) -> tuple:
        """Check ``args`` against the C signature and convert scalars to the declared C types."""
        import cupy
        if self.params is None:
            return tuple(args)
        if len(args) != len(self.params):
            sig = ", ".join(p.describe() for p in self.params)
            raise LaunchError(f"{self.name}({sig}) takes {len(self.params)} arguments; "
                              f"{len(args)} were given.")
        out = []
        for p, a in zip(self.params, args):
            if p.pointer:
                if isinstance(a, np.ndarray):
                    raise LaunchError(
                        f"{self.name}: parameter `{p.describe()}` got a NumPy array, which lives in host "
                        "memory. Copy it to the GPU first: cupy.asarray(array).")
                if isinstance(a, cupy.ndarray) and p.dtype is not None and a.dtype != np.dtype(p.dtype) \
                        and p.ctype not in ("void",):
                    want = np.dtype(p.dtype).name
                    raise LaunchError(
                        f"{self.name}: parameter `{p.describe()}` expects a CuPy array of {want}, but got "
                        f"{a.dtype}. Convert it with .astype(cupy.{want}) or change the kernel's type.")
                out.append(a)
            elif p.dtype is not None and isinstance(a, (int, float, bool, np.generic)):
                want = np.dtype(p.dtype)
                if want.kind in "iu":
                    if isinstance(a, (float, np.floating)):
                        raise LaunchError(f"{self.name}: parameter `{p.describe()}` is an integer, "
                                          f"but got the float {a!r}.")
                    info = np.iinfo(want)
                    if not info.min <= int(a) <= info.max:
                        raise LaunchError(
                            f"{self.name}: {a} does not fit parameter `{p.describe()}` "
                            f"({want.name}: {info.min}..{info.max}). Use a wider type such as long long.")
                out.append(want.type(a))
            else:
                out.append(a)
        return tuple(out)

    def __call__(self, grid, block, *args, shared_mem: int = 0, stream=None, cooperative: bool = False):
        """Launch; with ``cooperative`` through cuLaunchCooperativeKernel (what `cg::this_grid().sync()`
        needs), after checking with the occupancy API that every block can be resident at once."""
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        threads = math.prod(block)
        maxt = self._attr(_ATTR_MAX_THREADS)
        if threads > maxt:
            regs = self._attr(_ATTR_REGS)
            raise LaunchError(
                f"{self.name}: a block of {threads} threads is more than this kernel can run "
                f"(at most {maxt}; it uses {regs} registers per thread). Use a smaller block, or "
                "__launch_bounds__ to make the compiler use fewer registers.")
        self._ensure_dyn_smem(int(shared_mem))
        if cooperative:
            from ._env import device_info
            problem = cooperative_problem(self.name, math.prod(grid), threads, int(shared_mem),
                                          self.occupancy(block, shared_mem), device_info().sm_count)
            if problem:
                raise LaunchError(problem)
        extra = {"enable_cooperative_groups": True} if cooperative else {}
        self._fn(grid, block, self.convert_args(args), shared_mem=int(shared_mem), stream=stream, **extra)

    def __repr__(self):
        sig = ", ".join(p.describe() for p in self.params) if self.params is not None else "..."
        return f"<Kernel {self.name}({sig})>"


class Module:
    """A compiled program loaded on the current GPU; kernels by name in `kernels`."""

    def __init__(self, program: Program):
        import cupy
        self.program = program
        self.device_id = cupy.cuda.Device().id  # a module lives on the GPU it was loaded on (course.multi_gpu)
        self._mod = cupy.cuda.function.Module()
        self._mod.load(program.cubin)
        sigs = parse_kernels(program.source)
        self.kernels = {}
        for name, params in sigs.items():
            sym = program.lowered_names.get(name, name)
            try:
                fn = self._mod.get_function(sym)
            except Exception:
                continue  # a template or a non-extern-C kernel without a name expression
            self.kernels[name] = Kernel(fn, name, params, program.resources.get(sym), self)
        for expr, sym in program.lowered_names.items():
            if expr not in self.kernels:
                self.kernels[expr] = Kernel(self._mod.get_function(sym), expr, None,
                                            program.resources.get(sym), self)

    def kernel(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            import difflib
            close = difflib.get_close_matches(name, list(self.kernels), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise KeyError(f"no kernel named {name!r} in this module (it has: "
                           f"{', '.join(self.kernels) or 'none'}).{hint} A C++ kernel needs "
                           "extern \"C\" to keep its name, or pass name_expressions.") from None

    def __getattr__(self, name):
        kernels = self.__dict__.get("kernels", {})
        if name in kernels:
            return kernels[name]
        raise AttributeError(name)

    def get_global(self, name: str):
        """A device global (``__device__`` or ``__constant__`` variable) as a `cupy.cuda.MemoryPointer`.

        Fill a ``__constant__ float w[512]`` with ``m.get_global("w").copy_from_device(w.data, w.nbytes)``.
        """
        import cupy
        ptr = self._mod.get_global_var(name)  # the bare device address
        # size 0: the driver knows the symbol's size, CuPy's wrapper does not; the module owns the memory
        return cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, 0, self), 0)

    @property
    def ptx(self) -> str:
        return self.program.ptx

    @property
    def log(self) -> str:
        return self.program.log

    @property
    def resources(self) -> dict:
        return {n: k.resources for n, k in self.kernels.items()}

    def sass(self) -> str:
        return self.program.sass()

    def report(self) -> str:
        """One line per kernel: registers, shared, local memory, spills, max threads per block."""
        return "\n".join(resource_lines((n, k.resources) for n, k in self.kernels.items()))


def compile(source: str, *, options=(), arch=None, name_expressions=(), name: str = "kernel.cu",
            first_line: int | None = None, prelude: str = "", prelude_name: str = "prelude") -> Module:
    """Compile ``source`` for the current GPU (or ``arch``) and load it.

    ``first_line`` numbers compile errors (see `compile_for_arch`); by default a source that is the body
    of a ``%%cuda`` cell run in this session (``course.cell_sources[...]``) is numbered as that cell is.

    Raises
    ------
    NoGPUError
        Without a GPU; use `compile_for_arch` to only compile.
    CompileError
        When NVRTC rejects the source (numbered source, log and options in the message).
    """
    from ._env import device_info
    from ._sources import first_line_of
    if first_line is None:
        first_line = first_line_of(source)
    dev = device_info()
    prog = compile_for_arch(source, arch or dev.arch, options=options, name=name,
                            name_expressions=name_expressions, first_line=first_line, prelude=prelude,
                            prelude_name=prelude_name)
    return Module(prog)
