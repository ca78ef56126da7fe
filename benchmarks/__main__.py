"""python -m benchmarks [--only 01_first_kernel,...] [--out benchmarks/results]"""
import sys

from ._suite import main

sys.exit(main())
