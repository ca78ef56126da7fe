"""Whether Triton imports, and what to do where it does not: asked by the %%triton magic and by
`course.triton` (which re-exports both), kept apart so that neither imports the other."""

MISSING = ("Triton is not installed in this Python, so this cell cannot compile or run a Triton kernel. Install it "
           "with `pip install 'triton>=3.5,<3.7'` (Linux; the course's `triton` extra), then restart the kernel.")


def available() -> tuple:
    """(True, version) where Triton imports, else (False, what to do)."""
    try:
        import triton
    except ImportError:
        return False, MISSING
    return True, triton.__version__
