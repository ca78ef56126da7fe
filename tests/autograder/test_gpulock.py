"""The GPU lock of gradings sharing one GPU (autograder/gpulock.py), with real processes on a temporary folder:
readers overlap, a timer holds it alone, a waiting timer is not overtaken by new readers, a killed holder
frees it; and `gpu_sections`, the grading steps' use of it (autograder/device.py)."""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
import types

import pytest

from autograder import device
from autograder.gpulock import NO_LOCK, GpuLock, NestedHoldError

FORK = multiprocessing.get_context("fork")
WAIT_S = 10  # the longest any process waits on another: a broken lock fails the test instead of hanging it

pytestmark = pytest.mark.timeout(20)


def _note(log: str, name: str, kind: str, what: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{name} {kind} {what} {time.monotonic():.6f}\n".encode())
    finally:
        os.close(fd)


def _holder(folder, kind, log, name, entered=None, leave=None, hold_s=0.0, rounds=1):
    """A grading's run child: takes the lock `kind` (after the fork, as the real ones do) `rounds` times."""
    lock = GpuLock(folder)
    for _ in range(rounds):
        with getattr(lock, kind)():
            _note(log, name, kind, "in")
            if entered is not None:
                entered.set()
            if leave is not None:
                leave.wait(WAIT_S)
            time.sleep(hold_s)
            _note(log, name, kind, "out")


def _intervals(log) -> list:
    """[(name, kind, t_in, t_out)] in the order each holder took the lock."""
    opened, out = {}, []
    for line in open(log, encoding="utf-8"):
        name, kind, what, t = line.split()
        if what == "in":
            opened[name] = float(t)
        else:
            out.append((name, kind, opened.pop(name), float(t)))
    assert not opened, f"holders that never let go: {opened}"
    return out


def _one(log, name) -> tuple:
    [iv] = [iv for iv in _intervals(log) if iv[0] == name]
    return iv


def _wait_blocked(pid: int, timeout: float = 2.0) -> None:
    """Wait until process `pid` waits in flock (a '->' line of /proc/locks). Where that cannot be seen, the
    timeout is the pause: by then the process has long reached its flock call."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/locks", encoding="ascii") as f:
                if any(p[1:2] == ["->"] and p[5:6] == [str(pid)] for p in map(str.split, f)):
                    return
        except OSError:
            pass
        time.sleep(0.01)


@pytest.fixture
def start():
    """start(folder, kind, log, name, **kw) -> a forked holder process; all are killed at the end."""
    procs = []

    def _start(*args, **kw):
        p = FORK.Process(target=_holder, args=args, kwargs=kw, daemon=True)
        p.start()
        procs.append(p)
        return p
    yield _start
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)


def _finish(*procs) -> None:
    for p in procs:
        p.join(WAIT_S)
        assert p.exitcode == 0, f"holder {p.pid} ended with {p.exitcode}"


@pytest.fixture
def paths(tmp_path):
    folder = tmp_path / "lock"
    folder.mkdir()
    return str(folder), str(tmp_path / "log.txt")


def test_two_readers_hold_the_lock_at_once(paths, start):
    """Does a second shared holder get in while the first still holds the lock?"""
    folder, log = paths
    a_in, b_in, leave = FORK.Event(), FORK.Event(), FORK.Event()
    a = start(folder, "shared", log, "a", entered=a_in, leave=leave)
    assert a_in.wait(WAIT_S)
    b = start(folder, "shared", log, "b", entered=b_in, leave=leave)
    assert b_in.wait(3), "a second reader waited while another reader held the lock"
    leave.set()
    _finish(a, b)
    assert _one(log, "b")[2] < _one(log, "a")[3]


def test_exclusive_holder_keeps_readers_and_writers_out(paths, start):
    """While one process holds the lock exclusive, do a reader and a writer both wait until it lets go?"""
    folder, log = paths
    a_in, b_in, c_in, leave = FORK.Event(), FORK.Event(), FORK.Event(), FORK.Event()
    a = start(folder, "exclusive", log, "a", entered=a_in, leave=leave)
    assert a_in.wait(WAIT_S)
    b = start(folder, "shared", log, "b", entered=b_in, hold_s=0.05)
    c = start(folder, "exclusive", log, "c", entered=c_in, hold_s=0.05)
    _wait_blocked(b.pid)
    _wait_blocked(c.pid)
    time.sleep(0.1)
    assert not b_in.is_set(), "a reader got in while another process held the lock exclusive"
    assert not c_in.is_set(), "a writer got in while another process held the lock exclusive"
    leave.set()
    _finish(a, b, c)
    a_out = _one(log, "a")[3]
    _, _, b0, b1 = _one(log, "b")
    _, _, c0, c1 = _one(log, "c")
    assert b0 >= a_out and c0 >= a_out
    assert b1 <= c0 or c1 <= b0, "the reader and the writer held the lock at the same time"


def test_exclusive_intervals_never_overlap_under_contention(paths, start):
    """With writers and readers taking the lock over and over, does any exclusive hold overlap another hold?"""
    folder, log = paths
    kinds = ["exclusive", "shared", "shared"] * 2
    procs = [start(folder, kind, log, f"{kind}{i}", hold_s=0.01, rounds=6) for i, kind in enumerate(kinds)]
    _finish(*procs)
    ivs = _intervals(log)
    assert len(ivs) == 6 * len(procs)
    for i, (name, kind, t0, t1) in enumerate(ivs):
        if kind != "exclusive":
            continue
        for j, (other, okind, u0, u1) in enumerate(ivs):
            if j != i:
                assert t1 <= u0 or u1 <= t0, f"{name}'s exclusive hold overlapped {other}'s {okind} hold"


def test_waiting_writer_goes_before_a_new_reader(paths, start):
    """While a reader holds the lock (for less than PATIENCE_S) and a writer waits, does a new reader wait
    for the writer to finish?"""
    folder, log = paths
    r1_in, leave_r1, w_in, r2_in = FORK.Event(), FORK.Event(), FORK.Event(), FORK.Event()
    r1 = start(folder, "shared", log, "r1", entered=r1_in, leave=leave_r1)
    assert r1_in.wait(WAIT_S)
    w = start(folder, "exclusive", log, "w", entered=w_in, hold_s=0.1)
    time.sleep(0.05)  # the writer holds the turnstile and polls for the readers to leave
    assert not w_in.is_set(), "a writer got in while a reader held the lock"
    r2 = start(folder, "shared", log, "r2", entered=r2_in)
    _wait_blocked(r2.pid)
    time.sleep(0.1)
    assert not r2_in.is_set(), "a new reader overtook a waiting writer: readers can starve the timer"
    leave_r1.set()
    _finish(r1, w, r2)
    assert _one(log, "w")[2] >= _one(log, "r1")[3]
    assert _one(log, "r2")[2] >= _one(log, "w")[3]


def test_a_reader_that_holds_on_does_not_stop_the_others(paths, start):
    """When a reader holds the lock far longer than PATIENCE_S (a kernel hanging until its deadline) and a
    writer waits, do new readers still get in, and does the writer get in once the long reader leaves?"""
    from autograder.gpulock import PATIENCE_S
    folder, log = paths
    r1_in, leave_r1, w_in, r2_in = FORK.Event(), FORK.Event(), FORK.Event(), FORK.Event()
    r1 = start(folder, "shared", log, "hang", entered=r1_in, leave=leave_r1)
    assert r1_in.wait(WAIT_S)
    w = start(folder, "exclusive", log, "w", entered=w_in)
    time.sleep(0.05)
    r2 = start(folder, "shared", log, "r2", entered=r2_in)
    assert r2_in.wait(PATIENCE_S + 1.0), "a long reader and a waiting writer stopped every other reader"
    assert not w_in.is_set()
    leave_r1.set()
    assert w_in.wait(PATIENCE_S + 2.0), "the writer did not get in after the readers left"
    _finish(r1, w, r2)
    assert _one(log, "w")[2] >= _one(log, "hang")[3]


@pytest.mark.parametrize("kind", ["exclusive", "shared"])
def test_holder_killed_with_sigkill_frees_the_lock(paths, start, kind):
    """When a holder is killed with SIGKILL, does another process get the lock exclusive within a second?"""
    folder, log = paths
    a_in, b_in, never = FORK.Event(), FORK.Event(), FORK.Event()
    a = start(folder, kind, log, "a", entered=a_in, leave=never)
    assert a_in.wait(WAIT_S)
    os.kill(a.pid, signal.SIGKILL)
    a.join(WAIT_S)
    assert a.exitcode == -signal.SIGKILL
    b = start(folder, "exclusive", log, "b", entered=b_in)
    assert b_in.wait(1.0), f"the lock stayed held after its {kind} holder was killed"
    _finish(b)


def test_writer_killed_while_waiting_lets_new_readers_in(paths, start):
    """When a writer waiting for the lock (at the turnstile) is killed, do new readers get in within a second?"""
    folder, log = paths
    r1_in, leave_r1, w_in, r2_in = FORK.Event(), FORK.Event(), FORK.Event(), FORK.Event()
    r1 = start(folder, "shared", log, "r1", entered=r1_in, leave=leave_r1)
    assert r1_in.wait(WAIT_S)
    w = start(folder, "exclusive", log, "w", entered=w_in)
    _wait_blocked(w.pid)
    os.kill(w.pid, signal.SIGKILL)
    w.join(WAIT_S)
    assert not w_in.is_set()
    r2 = start(folder, "shared", log, "r2", entered=r2_in)
    assert r2_in.wait(1.0), "a writer killed while waiting left new readers locked out"
    leave_r1.set()
    _finish(r1, r2)


@pytest.mark.parametrize("kind", ["exclusive", "shared"])
def test_exception_in_the_body_releases_the_lock(paths, start, kind):
    """When the code under the lock raises, is the lock let go (another process gets it exclusive)?"""
    folder, log = paths
    lock = GpuLock(folder)
    with pytest.raises(RuntimeError, match="kernel failed"):
        with getattr(lock, kind)():
            raise RuntimeError("kernel failed")
    b_in = FORK.Event()
    b = start(folder, "exclusive", log, "b", entered=b_in)
    assert b_in.wait(3), f"the lock stayed held after an exception under {kind}"
    _finish(b)


@pytest.mark.parametrize("outer, inner", [(o, i) for o in ("shared", "exclusive") for i in ("shared", "exclusive")])
def test_a_nested_hold_is_refused_and_the_outer_hold_stays(paths, start, outer, inner):
    """Asked for the lock again while holding it, does the process get a clear error (flock would turn the
    outer hold into the inner one and let go of both when the inner ends), and does its outer hold still
    keep a writer out until it ends?"""
    folder, log = paths
    lock = GpuLock(folder)
    with getattr(lock, outer)():
        with pytest.raises(NestedHoldError, match=f"asked for {inner} while this grading already holds it {outer}"):
            with getattr(lock, inner)():
                pass
        w_in = FORK.Event()
        w = start(folder, "exclusive", log, "w", entered=w_in)
        _wait_blocked(w.pid)
        time.sleep(0.1)
        assert not w_in.is_set(), f"a writer got in while this process still held the lock {outer}"
    assert w_in.wait(3), "the writer did not get in after the outer hold ended"
    _finish(w)
    with getattr(lock, inner)():  # the refused attempt left nothing behind: the lock can be taken again
        pass


def test_no_lock_runs_the_body_once_and_touches_no_file(tmp_path, monkeypatch):
    """Does NO_LOCK (and GpuLock(None) or GpuLock('')) run the body once, nest freely, and create no file?"""
    monkeypatch.chdir(tmp_path)
    for lock in (NO_LOCK, GpuLock(None), GpuLock("")):
        assert lock.fds is None
        ran = []
        with lock.shared():
            with lock.exclusive():  # a real lock would wait for itself here
                ran.append("inner")
        with lock.exclusive():
            ran.append("alone")
        assert ran == ["inner", "alone"]
        with pytest.raises(ValueError):
            with lock.exclusive():
                raise ValueError("propagates")
    assert list(tmp_path.iterdir()) == []


# gpu_sections: the grading steps' shared and alone sections

class _Backend:
    def __init__(self, log):
        self.log = log

    def sync(self):
        self.log.append("sync")


def _recording(lock: GpuLock, log: list) -> GpuLock:
    """Wrap the lock's two context managers so that taking and letting go land in `log`."""
    for kind in ("shared", "exclusive"):
        @contextlib.contextmanager
        def wrapped(inner=getattr(lock, kind), kind=kind):
            log.append(f"{kind} ask")
            with inner():
                log.append(f"{kind} got")
                try:
                    yield
                finally:
                    log.append(f"{kind} let go")
        setattr(lock, kind, wrapped)
    return lock


def test_gpu_sections_without_a_lock_do_nothing(monkeypatch):
    """A lone grading (NO_LOCK, or no gpu_lock at all): do both sections just run the body, with no sync?"""
    log = []
    monkeypatch.setattr(device, "backend", lambda: _Backend(log))
    for ctx in (types.SimpleNamespace(gpu_lock=NO_LOCK), types.SimpleNamespace()):
        shared, alone = device.gpu_sections(ctx)
        for section in (shared, alone):
            with section():
                log.append("body")
    assert log == ["body"] * 4


@pytest.mark.parametrize("which, expected", [
    (0, ["shared ask", "shared got", "body", "sync", "shared let go"]),
    (1, ["sync", "exclusive ask", "exclusive got", "body", "exclusive let go"]),
], ids=["shared-syncs-before-letting-go", "alone-syncs-before-taking-the-lock"])
def test_gpu_sections_wait_for_the_device_at_the_right_moment(tmp_path, monkeypatch, which, expected):
    """Does `shared` hold the lock shared and wait for the device before letting it go, and `alone` wait
    for this grading's own work first, then hold the lock exclusive around the body?"""
    log = []
    monkeypatch.setattr(device, "backend", lambda: _Backend(log))
    ctx = types.SimpleNamespace(gpu_lock=_recording(GpuLock(str(tmp_path)), log))
    with device.gpu_sections(ctx)[which]():
        log.append("body")
    assert log == expected


def test_gpu_sections_hold_the_real_lock(tmp_path, monkeypatch, start):
    """Inside `shared` can another grading still read, and inside `alone` can it not?"""
    monkeypatch.setattr(device, "backend", lambda: _Backend([]))
    folder, log = str(tmp_path / "lock"), str(tmp_path / "log.txt")
    os.mkdir(folder)
    shared, alone = device.gpu_sections(types.SimpleNamespace(gpu_lock=GpuLock(folder)))
    with shared():
        r_in = FORK.Event()
        r = start(folder, "shared", log, "r", entered=r_in)
        assert r_in.wait(3), "another reader waited while this grading held the lock `shared`"
        _finish(r)
    with alone():
        w_in = FORK.Event()
        w = start(folder, "shared", log, "w", entered=w_in)
        _wait_blocked(w.pid)
        time.sleep(0.1)
        assert not w_in.is_set(), "another grading got the lock while this one was timing `alone`"
    assert w_in.wait(3)
    _finish(w)


def test_gpu_sections_shared_keeps_the_verdict_of_a_crashed_kernel(tmp_path, monkeypatch):
    """When the body reported a crash and the device sync then raises the same sticky error, does `shared`
    let the body's result stand (a "crashed" verdict, not a grader error) and still let the lock go?"""
    def broken():
        raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")
    monkeypatch.setattr(device, "backend", lambda: types.SimpleNamespace(sync=broken))
    lock = GpuLock(str(tmp_path))
    shared, _ = device.gpu_sections(types.SimpleNamespace(gpu_lock=lock))

    def step():  # what correctness_step and the speed step do: return the verdict from inside the section
        with shared():
            return {"status": "crashed"}
    assert step() == {"status": "crashed"}  # the sync's error on leaving did not replace it
    with lock.exclusive():  # not left held
        pass
