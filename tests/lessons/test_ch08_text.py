"""Chapter 08's text against the facts it states: the BF16 rounding bound (2^-8, measured with round_bf16 and
by bf16_error_table) and what the tensor cores' FP32 accumulation is and is not (issue 22, item 4)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from repo_helpers import REPO, import_course, read_json_notebook

STEM = "08_tensor_cores"


@pytest.fixture(scope="module")
def ch08():
    import_course()
    from course.lessons import ch08
    return ch08


def chapter_cells() -> list:
    nb = read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")
    return [("".join(c["source"]) if isinstance(c["source"], list) else c["source"], c["cell_type"])
            for c in nb["cells"]]


OLD_BF16_BOUND = ("2^{-9}", "2^-9", "2⁻⁹", "2**-9")


def test_bf16_rounding_bound_is_2_to_the_minus_8(ch08):
    """Is round-to-nearest BF16's worst relative error 2^-8 (not 2^-9), as the chapter now says?"""
    x = np.random.default_rng(1).uniform(1, 2, 200_000).astype(np.float32)
    worst = float(np.max(np.abs(ch08.round_bf16(x).astype(np.float64) - x) / x))
    assert 2 ** -9 < worst <= 2 ** -8, worst


def test_text_quotes_the_2_to_the_minus_8_bound(ch08):
    """Do the chapter, exercise 08's introduction and bf16_error_table's docstring give the BF16 rounding
    bound as 2^-8, nowhere 2^-9, and does the quoted table level (2.5e-3) sit between 2^-9 and 2^-8?"""
    markdown = "\n".join(src for src, kind in chapter_cells() if kind == "markdown")
    ex = json.loads((REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb").read_text(encoding="utf-8"))
    ex_md = "\n".join("".join(c["source"]) for c in ex["cells"] if c["cell_type"] == "markdown")
    texts = (("chapter 08", markdown), ("exercise 08", ex_md), ("bf16_error_table", ch08.bf16_error_table.__doc__))
    for where, text in texts:
        for old in OLD_BF16_BOUND:
            assert old not in text, f"{where} still quotes {old} as BF16's rounding error; it is 2^-8"
    assert markdown.count("2^{-8}") >= 3 and "0.39\\%" in markdown
    assert "2^-8 = 0.39%" in ex_md
    assert "2.5 \\times 10^{-3}" in markdown
    for r in ch08.bf16_error_table():
        assert 2 ** -9 < r["vs FP32 inputs"] < 2 ** -8 and abs(r["vs FP32 inputs"] - 2.5e-3) < 5e-4, r


def test_tensor_core_sum_is_not_called_ieee_fp32():
    """Does section 1 say the accumulator is FP32 but the in-MMA sum is not IEEE FP32 arithmetic?"""
    markdown = "\n".join(src for src, kind in chapter_cells() if kind == "markdown")
    assert "summed at FP32 precision" not in markdown
    intro = next(src for src, kind in chapter_cells() if kind == "markdown" and "accumulator is FP32" in src)
    assert "not IEEE FP32" in intro and "truncated" in intro
