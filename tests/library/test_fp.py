"""course.fp on chapter 09's damped_sum cell: what each flag set does to the machine code (CPU: NVRTC and
nvdisasm, which the bootstrap installs, so no skip), the error measure (CPU), and on a GPU the builds' errors
against float64 in the order the chapter explains."""
from __future__ import annotations

import numpy as np
import pytest

from repo_helpers import import_course

course = import_course()


@pytest.fixture(scope="module")
def table():
    source = course.lesson_cell("09_convolution", "damped_sum").source
    return {r["flags"]: r for r in course.fp.opcode_table(source, "damped_sum", arch="sm_90")}


def test_every_flag_set_is_compiled(table):
    assert list(table) == list(course.fp.FLAG_SETS)


def test_fast_math_trades_the_library_for_the_special_function_unit(table):
    """Does --use_fast_math replace sinf's polynomial by MUFU.SIN and drop the FMAs of the library code?"""
    fast, default = table["--use_fast_math"], table["default (IEEE)"]
    assert "SIN" in fast["MUFU"] and "SIN" not in default["MUFU"]
    assert fast["FFMA"] < default["FFMA"] / 4


def test_prec_div_false_drops_the_division_check_and_its_slow_path(table):
    assert table["default (IEEE)"]["FCHK"] > 0 and table["--prec-div=false"]["FCHK"] == 0
    assert table["--prec-div=false"]["CALL"] < table["default (IEEE)"]["CALL"]


def test_fmad_false_splits_only_the_sources_multiply_adds(table):
    """Does --fmad=false add FMUL/FADD pairs while the math library's explicit fmaf calls stay FFMAs?"""
    off, on = table["--fmad=false"], table["default (IEEE)"]
    assert off["FMUL"] + off["FADD"] > on["FMUL"] + on["FADD"] and off["FFMA"] > 0


def test_relative_error_is_judged_by_the_terms_magnitude():
    """Is the error of a sum that cancels to nearly zero measured against the size of its terms?"""
    want = np.array([1.0, 1e-9])
    scale = np.array([1.0, 2.0])               # the second: two terms of size 1 that cancel
    got = np.array([1.0 + 2 ** -23, 0.0], dtype=np.float32)     # one float32 step above 1
    e = course.fp.relative_error(got, want, scale)
    assert e["max"] == pytest.approx(2 ** -23, rel=1e-6) and e["ulp"] == pytest.approx(2.0, rel=1e-6)
    assert course.fp.relative_error(got, want, np.abs(want))["max"] == pytest.approx(1.0)   # judged by the total


@pytest.mark.gpu
def test_fast_math_is_the_least_accurate_build_on_a_gpu():
    """On the chapter's own inputs (seed 9, the first 2^20 of 2^24 elements), does every build keep 99% of its
    errors within 16 units of 2^-24, except --use_fast_math, whose 99th percentile is the largest? (The maximum
    is left alone: near x = pi it measures the formula's conditioning, the same for every IEEE build.)"""
    import cupy
    source = course.lesson_cell("09_convolution", "damped_sum").source
    n, m = 1 << 24, 1 << 20
    x = cupy.random.default_rng(9).random(n, dtype=cupy.float32) * 4
    y = cupy.empty_like(x)
    xd = x[:m].get().astype(np.float64)
    k = np.arange(1, 33, dtype=np.float64)[:, None]
    t = np.exp(-k * xd / 32) * np.sin(k * xd) / (1 + k * xd * xd)
    p99 = {}
    for name, kern in course.fp.builds(source, "damped_sum").items():
        y.fill(np.nan)
        kern(course.grid_for(n, 256), 256, x, y, n)
        p99[name] = course.fp.relative_error(y[:m].get(), t.sum(axis=0), np.abs(t).sum(axis=0))["p99"] / 2.0 ** -24
    assert max(p99, key=p99.get) == "--use_fast_math", p99
    assert all(v < 16 for f, v in p99.items() if f != "--use_fast_math"), p99
