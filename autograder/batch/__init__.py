"""Grade a whole class: every submission of one or more assignments, in parallel on every GPU of a host
(or of a Dask cluster), durably and resumably, into nbgrader's gradebook.

`python -m autograder grade-class` is the command; `grade_class` is the same from Python. Modules:
jobs (what to grade), store (finished results, committed one by one), engine (Dask), work (what a Dask
worker runs), gradebook (nbgrader's database), summary (tables, CSV/JSON, plots).
"""
from .engine import BatchResult, grade_class
from .jobs import Job, discover
from .store import ResultStore

__all__ = ["grade_class", "BatchResult", "Job", "discover", "ResultStore"]
