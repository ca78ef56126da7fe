"""The library every notebook of the CUDA course imports.

Importing it touches no GPU; functions that need one raise `NoGPUError` with a clear message, and
`gpu_available()` tells beforehand. In a notebook, start with::

    import course; course.preflight()
    %load_ext course
"""
from ._cells import CudaCell, lesson_cell, lesson_cells, notebook_cells, solution_source
from ._ceilings import Ceilings, ceilings, measure_ceilings, recorded_ceilings
from ._check import CheckResult, assert_close, check, default_tolerance
from ._compile import (Program, Resources, arch_cc, arch_runs_on, compile_for_arch, declared_arch, normalize_arch,
                       sass_of, sass_opcodes, target_for)
from ._env import (FEATURES, DeviceInfo, device_info, gpu_available, gpu_slug, no_gpu_message, require,
                   supports)
from ._errors import CheckError, CompileError, CourseError, FeatureUnavailable, LaunchError, NoGPUError
from ._headers import include_dirs, library_options, missing_headers
from ._launch import Kernel, Module, compile, grid_2d, grid_for
from ._magic import CELL_FIRST_LINE, cell_sources, load_ipython_extension
from ._sources import first_line_of
from ._nvml import nvidia_smi, pcie_link, power_w, sample_clocks, sm_clock_mhz, temperature_c, throttle_reasons
from ._preflight import preflight
from ._table import print_table
from ._timing import BenchResult, benchmark, interleaved
from . import access, cublas, fp, gemm, l2, ncu, plots, results, source, streams, tma, variants, wgmma  # public submodules: no CUDA at import
from . import occupancy, timeline_trace  # chapter 11: occupancy rules, CUPTI timelines (both optional at run time)
from . import multi_gpu  # chapter 16: peers, NCCL and the ring all-reduce (NCCL imported only when used)
from . import cute  # chapter 13's CuTe view: where CUTLASS's headers are (the optional `cute` extra)
from . import attention, triton  # chapters 14-15: attention's inputs and checks; chapter 15: Triton kernels on CuPy arrays (Triton imported only when used)
# `course.profile` is the function (the module's own name is taken by it; import course.profile's helpers with
# `from course.profile import ...`)
from .profile import Profile, profile, recorded_profile

__all__ = [
    "BenchResult", "CELL_FIRST_LINE", "first_line_of", "Ceilings", "CudaCell", "access", "cute", "multi_gpu", "cublas", "fp", "gemm", "l2", "ncu", "plots", "results", "source", "streams", "tma", "variants", "wgmma", "CheckError", "CheckResult", "CompileError", "CourseError", "DeviceInfo",
    "FEATURES", "FeatureUnavailable", "Kernel", "LaunchError", "Module", "NoGPUError", "Program",
    "Resources", "arch_cc", "arch_runs_on", "target_for", "assert_close", "benchmark", "cell_sources", "ceilings", "check", "compile",
    "compile_for_arch", "declared_arch", "default_tolerance", "device_info", "gpu_available", "gpu_slug", "grid_2d",
    "grid_for", "include_dirs", "interleaved", "library_options", "lesson_cell", "lesson_cells", "load_ipython_extension", "measure_ceilings",
    "missing_headers", "no_gpu_message", "notebook_cells", "nvidia_smi", "occupancy", "pcie_link", "power_w", "Profile", "profile",
    "recorded_profile", "sample_clocks", "temperature_c", "throttle_reasons", "timeline_trace", "normalize_arch", "preflight", "print_table", "recorded_ceilings", "require",
    "sass_of", "sass_opcodes", "sm_clock_mhz", "solution_source", "supports",
]
