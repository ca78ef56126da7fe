"""Chapter 09's picture of the sliding register window (issue 22, missing pictures): course.diagrams.register_window
replays conv_reg's tap loop, draws what the lesson says (R registers, one new x and one w per R FMAs), and the
chapter draws it right after the paragraph that explains the window. CPU only."""
from __future__ import annotations

import re

import pytest

from repo_helpers import REPO, chapter_markdown, import_course, read_json_notebook

STEM = "09_convolution"
WINDOW_TEXT = "slide the window by one and load one new value"


@pytest.fixture(scope="module")
def mods():
    import matplotlib
    matplotlib.use("Agg")
    import_course()
    from course import diagrams
    from course.lessons import ch09
    return diagrams, ch09


def _drawn(fig):
    """(window cells, load cells, output cells, every text) of a register_window figure, told apart by colour."""
    from matplotlib.colors import to_rgba
    ax = fig.axes[0]
    fcs = [tuple(round(v, 3) for v in p.get_facecolor()) for p in ax.patches]
    blue = tuple(round(v, 3) for v in to_rgba("tab:blue", 0.25))
    orange = tuple(round(v, 3) for v in to_rgba("tab:orange", 0.6))
    texts = [t.get_text() for t in ax.texts]
    outputs = [t for t in texts if re.fullmatch(r"acc\[\d+\](\nw\[\d+\])?", t)]
    return fcs.count(blue), fcs.count(orange), outputs, texts


@pytest.mark.parametrize("taps,r", [(512, 16), (32, 8), (16, 1), (16, 16), (64, 4)])
def test_trace_is_the_correlation(mods, taps, r):
    """Does the replayed loop hold a[q] = x[i0 + q + j] at tap j, load x[i0 + R + j] for the next tap (none after
    the last), and count G + R - 1 loads of x, G of w and R G FMAs, each (output, tap) pair exactly once?"""
    diagrams, _ = mods
    tr = diagrams._window_trace(taps, r)
    assert [row["tap"] for row in tr["rows"]] == list(range(taps))
    pairs = set()
    for row in tr["rows"]:
        j = row["tap"]
        assert row["window"] == tuple(q + j for q in range(r)), (j, row["window"])
        assert row["new"] == (r + j if j + 1 < taps else None), (j, row["new"])
        pairs |= {(k - j, j) for k in row["window"]}          # output i0 + q gets x[i0 + q + j] * w[j]
    assert pairs == {(q, j) for q in range(r) for j in range(taps)}
    assert (tr["x_loads"], tr["w_loads"], tr["fmas"]) == (taps + r - 1, taps, r * taps)


def test_figure_draws_the_lessons_window(mods):
    """With conv_reg's R and G: 4 rows of R window cells (a[0..R-1]) with one load each, R outputs, and the
    counts of the whole loop in the caption."""
    diagrams, ch09 = mods
    import matplotlib.pyplot as plt
    r, g = ch09.REG_OUTPUTS, ch09.TAPS
    fig, tr = diagrams.register_window(g, r, step=0, steps=4)
    window, loads, outputs, texts = _drawn(fig)
    assert window == 4 * r and loads == 4 and len(outputs) == r
    assert sum(t.startswith("a[") for t in texts) == 4 * r and texts.count("load") == 4
    for j in range(4):
        assert any(t.startswith(f"acc[q] += a[q] * w[{j}], q = 0..{r - 1}: {r} FMAs\nloads w[{j}] and x[i0 + {r + j}]")
                   for t in texts), j
    # the tracked sample (a[R-1] at tap 0) feeds acc[R-1-j] with w[j]: four outputs marked, each with its tap
    assert sorted(o for o in outputs if "\n" in o) == sorted(f"acc[{r - 1 - j}]\nw[{j}]" for j in range(4))
    caption = next(t for t in texts if t.startswith("blue:"))
    assert f"{g + r - 1} loads of x" in caption and f"{g} of w, {r * g:,} FMAs" in caption
    assert f"{(2 * g + r - 1) / (r * g):.3g} loads per FMA" in caption
    assert f"feeds 4 FMAs here ({r} over the whole loop)" in caption
    assert f"R = {r} outputs, G = {g} taps (taps 0 to 3)" in fig.axes[0].get_title()
    plt.close("all")


def test_loads_per_fma_are_the_answer_to_9_2(mods):
    """Micro-exercise 9.2 answers 'loads per FMA for R = 1, 4, 16': does the picture, drawn with each R, print
    the same figures the answer gives?"""
    diagrams, _ = mods
    import matplotlib.pyplot as plt
    answer = next(c for c in chapter_markdown(STEM) if "**9.2.**" in c)
    rs = [int(v) for v in re.search(r"for \$R = (\d+), (\d+), (\d+)\$", answer).groups()]
    said = re.search(r"per \$R\$ FMAs: ([\d.]+), ([\d.]+) and ([\d.]+) loads per FMA", answer).groups()
    for r, value in zip(rs, said):
        fig, tr = diagrams.register_window(512, r, step=5)
        assert tr["per_tap"] == pytest.approx(float(value)), (r, tr["per_tap"], value)
        caption = next(t.get_text() for t in fig.axes[0].texts if t.get_text().startswith("blue:"))
        assert f"1 load of x and 1 of w, {float(value):.3g} loads per FMA" in caption, (r, caption)
    plt.close("all")


def test_last_tap_loads_no_x(mods):
    """At the last tap the kernel loads no new sample: is no load drawn there, and does the row say so?"""
    diagrams, _ = mods
    import matplotlib.pyplot as plt
    fig, tr = diagrams.register_window(32, 8, step=29)
    assert [row["tap"] for row in tr["rows"]] == [29, 30, 31] and tr["rows"][-1]["new"] is None
    window, loads, outputs, texts = _drawn(fig)
    assert (window, loads, len(outputs)) == (3 * 8, 2, 8)
    assert any("loads w[31] (last tap: no x)" in t for t in texts)
    plt.close("all")


@pytest.mark.parametrize("args,needle", [((100, 16), "multiple of R"), ((16, 0), "multiple of R"),
                                         ((32, 8, 32), "first tap drawn")])
def test_bad_arguments_say_what_is_allowed(mods, args, needle):
    """Does a tap count the kernel's loop cannot run, or a step past the last tap, raise a readable error?"""
    diagrams, _ = mods
    with pytest.raises(ValueError, match=needle):
        diagrams.register_window(*args)


def _window_cell():
    nb = read_json_notebook(REPO / "chapters" / f"{STEM}.ipynb")
    cells = [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
    found = [i for i, (kind, src) in enumerate(cells) if kind == "code" and "diagrams.register_window(" in src]
    assert found, (f"chapters/{STEM}.ipynb no longer draws the register window (a code cell calling "
                   "course.diagrams.register_window after the paragraph on the sliding window): put it back")
    return cells, found[0]


def test_chapter_draws_the_window_after_its_paragraph(mods):
    """Is there a CPU cell (not %%gpu) calling register_window right after the paragraph that explains the
    window, before conv_reg's cell, and with conv_reg's own R?"""
    cells, i = _window_cell()
    kind, text = cells[i - 1]
    assert kind == "markdown" and WINDOW_TEXT in text, f"the cell before the picture is not the window paragraph:\n{text[:300]}"
    src = cells[i][1]
    assert not src.lstrip().startswith("%%"), f"the picture cell must run without a GPU:\n{src}"
    reg = next(j for j, (k, s) in enumerate(cells) if s.startswith("%%cuda") and "\nconv_reg(" in s)
    assert i < reg, "the picture should come before conv_reg's cell, next to the text it illustrates"


def test_chapter_cell_runs_and_its_prose_matches(mods):
    """Does the chapter's cell run on a CPU (with the names its earlier cells define), draw conv_reg's own R and
    TAPS (its #defines), and does its prose name the registers the red sample really moves through (a[R-1]
    down to a[R-steps])?"""
    diagrams, ch09 = mods
    import matplotlib.pyplot as plt
    cells, i = _window_cell()
    ns = {"plt": plt, "ch09": ch09, "G": ch09.TAPS, "F": ch09.F}
    exec(compile(cells[i][1], "register window cell", "exec"), ns)
    rows = ns["window"]["rows"]
    reg = import_course().lesson_cell(STEM, "conv_reg").source
    r, taps = (int(re.search(rf"#define {name} (\d+)", reg).group(1)) for name in ("R", "TAPS"))
    assert len(rows[0]["window"]) == r and ns["window"]["w_loads"] == taps, (r, taps)
    first, last = rows[0]["window"][-1], rows[-1]
    moves = f"`a[{first - rows[0]['window'][0]}]` down to `a[{first - last['window'][0]}]`"
    assert moves in cells[i - 1][1], f"the prose should say the red sample moves from {moves}"
    plt.close("all")
