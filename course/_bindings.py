"""cuda-python's runtime and driver bindings, for the few calls CuPy lacks (persisting L2, TMA tensor maps)."""
from __future__ import annotations

from ._errors import FeatureUnavailable


def bindings(which: str, needed_for: str):
    """``cuda.bindings.runtime`` or ``.driver``; FeatureUnavailable saying what to install where it is missing."""
    try:
        import importlib
        return importlib.import_module(f"cuda.bindings.{which}")
    except ImportError:
        raise FeatureUnavailable(f"{needed_for} needs cuda-python's bindings, which CuPy does not provide: "
                                 "pip install 'cuda-python>=12.8' (the course's cuda-python extra), then restart "
                                 "the kernel.") from None
