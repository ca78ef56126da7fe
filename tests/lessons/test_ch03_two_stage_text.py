"""Exercise 03's two_stage text against the grader: every figure it quotes is the constant the grader uses
(issue #22, quoted numbers), so the two cannot drift apart. Read-only: drivers.two_stage and the spec are
imported, never edited here."""
from __future__ import annotations

import re

from repo_helpers import REPO, fail_on, read_json_notebook

STEM = "03_streams"


def _text() -> str:
    nb = read_json_notebook(REPO / "exercises" / "source" / STEM / f"{STEM}.ipynb")
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"]
    (cell,) = [c for c in cells if "## Two stages, two streams, one event" in c]
    return re.sub(r"\s+", " ", cell)


def test_two_stage_text_quotes_the_graders_constants():
    """Does the two_stage exercise quote the producer's hold-back (drivers.two_stage.STALL_NS), the checker's
    stream and chunk limits, the graded sizes and the overlap thresholds exactly as the grader has them?"""
    from autograder import get_exercise
    from drivers import two_stage
    ex = get_exercise(STEM, "two_stage")
    sizes = " and ".join([", ".join(f"{s['n']:,}" for s in ex.sizes[:-1]), f"{ex.sizes[-1]['n']:,}"])
    wanted = [
        f"holds that write back {two_stage.STALL_NS / 1e6:g} ms in its run",
        f'`"streams"` (1 to {two_stage.LIMITS["max_streams"]}) and `"chunks"` (1 to {two_stage.LIMITS["max_chunks"]})',
        f"runs your schedule on {sizes} fresh values",
        f"over {ex.pipeline.nbytes >> 20} MiB each way",
        f"at most {ex.pipeline.full_at:g} of the time without overlap, 2 at most {ex.pipeline.half_at:g}",
    ]
    text = _text()
    fail_on([f"exercises/source/{STEM}/{STEM}.ipynb should say {w!r} (the grader's constant); it does not: "
             f"change the text or the constant so they agree" for w in wanted if w not in text])
