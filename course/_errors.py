"""Exceptions raised by the course library.

Every message is written for a student: what was expected, what happened, where, and what to try.
"""


class CourseError(Exception):
    """Base class of every error the course library raises on purpose."""


class NoGPUError(CourseError):
    """A CUDA GPU was needed and none is usable from this Python process; ``reason`` is why, in a phrase."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message)
        self.reason = reason or message


class CompileError(CourseError):
    """NVRTC rejected a kernel; ``str()`` shows numbered source, options and log."""

    def __init__(self, message, *, source="", options=(), log="", name="kernel.cu"):
        super().__init__(message)
        self.source = source
        self.options = tuple(options)
        self.log = log
        self.name = name


class LaunchError(CourseError):
    """A kernel launch was refused before reaching the GPU (bad arguments or configuration)."""


class CheckError(CourseError, AssertionError):
    """An output differs from its reference beyond the tolerance."""


class FeatureUnavailable(CourseError):
    """The current GPU lacks a feature a cell needs (for example cp.async on sm_75)."""
