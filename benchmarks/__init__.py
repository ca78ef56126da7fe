"""The performance suite: ``python -m benchmarks`` builds, checks and times every row, per GPU."""
from ._suite import Context, Row, run_suite

__all__ = ["Context", "Row", "run_suite"]
