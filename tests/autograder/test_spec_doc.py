"""autograder/SPEC_FORMAT.md documents every field a spec may set (issue #23: `description` was not)."""
import dataclasses
import re

import pytest

from ag_helpers import ROOT
from autograder.spec import CallExercise, Exercise


@pytest.mark.parametrize("cls", [Exercise, CallExercise], ids=lambda c: c.__name__)
def test_every_spec_field_is_documented(cls):
    doc = (ROOT / "autograder" / "SPEC_FORMAT.md").read_text(encoding="utf-8")
    fields = [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]
    missing = [f for f in fields if not re.search(rf"`{f}`|\b{f}=", doc)]
    assert missing == [], f"{cls.__name__} fields missing from SPEC_FORMAT.md: {missing}"
