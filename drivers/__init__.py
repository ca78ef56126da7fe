"""The grader's drivers: code the grader runs, in its own run child, to grade an exercise that is more than
one kernel launch. A spec names a driver as ``"drivers.<module>:<function>"``; importing any of them touches
no GPU. Drivers use only `course`'s public API, and nothing in `course` imports them.

- `drivers.pipeline.pipeline_report(kernel, *, streams, chunks, block, n, seed, reference)`: a student's chunk
  kernel in a pinned-memory stream pipeline (chapter 03); every run's output checked, overlap measured against
  the time without overlap of the ``reference`` kernel.
- `drivers.cublas_calls.grade_case(problem, call, sizes, seed)`: a student's cuBLAS call, written as data,
  made once on fresh padded inputs with a poisoned output (chapter 10); returns a verdict dict.
- `drivers.two_stage.grade_case(name, schedule, sizes, seed)` and `pipeline_report(name, schedule, *, seed,
  nbytes)`: a student's stream schedule, written as data, run with the grader's kernels (chapter 03); the order
  checked deterministically, the overlap measured.
"""
