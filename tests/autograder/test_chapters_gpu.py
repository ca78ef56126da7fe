"""Every chapter's exercise notebook on a GPU: the solutions get full marks, the released stubs zero."""
import pytest

from ag_helpers import ROOT

from autograder import chapters, grade_path

CONFIG = ROOT / "exercises" / "nbgrader_config.py"


def released(source_nb, out_path):
    """The student version, made by nbgrader's own ClearSolutions and ClearHiddenTests with the course config."""
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("nbgrader")
    from nbgrader.preprocessors import ClearHiddenTests

    from autograder.nbgrader_plugin import ClearSolutions   # the course's: a %%triton stub stays Python
    from traitlets.config.loader import PyFileConfigLoader
    cfg = PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()
    nb = nbformat.read(source_nb, as_version=4)
    nb, _ = ClearSolutions(config=cfg).preprocess(nb, {})
    nb, _ = ClearHiddenTests(config=cfg).preprocess(nb, {})
    nbformat.write(nb, out_path)
    return out_path


@pytest.mark.gpu
@pytest.mark.parametrize("chapter", chapters())
def test_solutions_full_marks_and_stubs_zero(chapter, tmp_path):
    """Does the source notebook (solutions in) get every point, and the released one none?"""
    source = ROOT / "exercises" / "source" / chapter / f"{chapter}.ipynb"
    full = grade_path(source, chapter=chapter)
    got = {e.exercise: (e.points, e.max_points, e.status) for e in full.exercises}
    assert got and all(p == m for p, m, _ in got.values()), got
    stub = grade_path(released(source, tmp_path / f"{chapter}.ipynb"), chapter=chapter)
    got = {e.exercise: (e.points, e.status) for e in stub.exercises}
    assert set(got) == {e.exercise for e in full.exercises}
    assert all(p == 0 for p, _ in got.values()), got
