"""One GPU shared by several gradings at once: correctness work overlaps, timed runs have the GPU alone.

Gradings running side by side on one GPU take this lock in their run children: GPU work that is not timed
holds it shared, a round of timed launches (and the pipeline step) holds it exclusive, so no other
grading's kernels run while a kernel is being timed and every speed verdict is what a lone grading would
measure (autograder/device.py, `gpu_sections`). Two `flock` files make a readers-writer lock: a waiting
timer holds the turnstile, so new readers wait behind it, but for PATIENCE_S at most; then it lets them in
for READER_GAP_S and waits again, so a reader that holds on (a kernel hanging until its deadline) delays
the timers, not every other grading. `flock` locks are released by the kernel when a process dies, so a
child killed for a hang or a crash never leaves the GPU locked.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import time

from .trace import tracer

__all__ = ["GpuLock", "NO_LOCK", "NestedHoldError", "PATIENCE_S", "READER_GAP_S"]

PATIENCE_S = 0.5     # a waiting timer holds back new readers this long at most ...
READER_GAP_S = 0.02  # ... then lets them in for this long and waits again


class NestedHoldError(RuntimeError):
    """A hold of the GPU lock asked for inside another hold of the same process."""


class GpuLock:
    """The lock of one GPU, from a folder the grading session made (None: a lone grading, no lock)."""

    def __init__(self, folder: str | None):
        self.fds = None
        self.holding = ""  # "shared" or "exclusive" while this process holds the lock
        if folder:
            # opened before the child confines itself: afterwards it may not open files outside its folder
            self.fds = tuple(os.open(os.path.join(folder, name), os.O_RDWR | os.O_CREAT, 0o600)
                             for name in ("turnstile", "gpu"))
        self.trace = tracer()  # opened now for the same reason

    def _traced(self, kind: str, asked: float, got: float) -> None:
        if self.trace:
            self.trace.event("lock", kind=kind, wait=round(got - asked, 4), hold=round(time.monotonic() - got, 4))

    def shared(self):
        """Hold the GPU beside other gradings' untimed work (a context manager)."""
        return self._hold("shared")

    def exclusive(self):
        """Hold the GPU alone: no other grading's work runs until it is let go (a context manager)."""
        return self._hold("exclusive")

    @contextlib.contextmanager
    def _hold(self, kind: str):
        if self.fds is None:
            yield
            return
        if self.holding:
            # flock converts the one lock this process has: the inner hold would replace the outer one and
            # its release would let go of both, so the rest of the outer section would run unprotected
            raise NestedHoldError(
                f"the GPU lock was asked for {kind} while this grading already holds it {self.holding}. "
                "A hold cannot be nested (the inner one's release would end the outer one too): take the lock "
                "once around the whole section (autograder/device.py, gpu_sections).")
        turnstile, gpu = self.fds
        asked = time.monotonic()
        if kind == "shared":
            fcntl.flock(turnstile, fcntl.LOCK_EX)  # waits while a timer waits or times
            fcntl.flock(gpu, fcntl.LOCK_SH)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        else:
            while True:
                fcntl.flock(turnstile, fcntl.LOCK_EX)
                if self._wait_readers(gpu):
                    break
                # a reader holds on (a hanging kernel runs until its deadline): let the others' correctness
                # work go on for a moment rather than stopping the whole GPU behind it
                fcntl.flock(turnstile, fcntl.LOCK_UN)
                time.sleep(READER_GAP_S)
        self.holding = kind
        got = time.monotonic()
        try:
            yield
        finally:
            self.holding = ""
            fcntl.flock(gpu, fcntl.LOCK_UN)
            if kind == "exclusive":
                fcntl.flock(turnstile, fcntl.LOCK_UN)
            self._traced(kind, asked, got)

    @staticmethod
    def _wait_readers(gpu: int) -> bool:
        """Take the GPU exclusive within PATIENCE_S (True), polling: flock has no timed wait."""
        deadline = time.monotonic() + PATIENCE_S
        pause = 0.0002
        while True:
            try:
                fcntl.flock(gpu, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(pause)
                pause = min(pause * 2, 0.002)


NO_LOCK = GpuLock(None)
