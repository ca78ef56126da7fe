"""A stream schedule written as data (chapter 03's ``two_stage``): which stream runs each stage of each chunk,
and which events order the streams. Everything here is plain Python: it reads, checks and analyses a schedule
without a GPU; the grader's driver (`drivers.two_stage`) runs it.

The job, per chunk ``c`` of an array cut into chunks: ``h2d`` copies the chunk in, ``produce`` writes
``tmp`` from it, ``consume`` writes ``out`` from ``tmp`` (each value and its left neighbour, so the first value
of chunk ``c`` also reads the last ``tmp`` value of chunk ``c - 1``), ``d2h`` copies the chunk out. A schedule::

    {
        "streams": 2,
        "chunks": 16,
        "stream": {"h2d": [0, 1], "produce": [0, 1], "consume": [0, 1], "d2h": [0, 1]},
        "record": {"produced": "produce"},
        "wait": {"consume": ["produced[c-1]"]},
    }

``stream``: each stage's stream, an int or a list that chunk ``c`` indexes at ``c % len(list)``. ``record``:
events, each recorded after one stage of every chunk (every chunk has its own copy of each event, as a C
program keeps ``cudaEvent_t produced[C]``). ``wait``: the events a stage waits for before it starts, ``"NAME"``
for this chunk's, ``"NAME[c-1]"`` (``c-2``, ...) for an earlier chunk's; a wait on a chunk before the first is
skipped. The host issues chunk 0's stages in stage order (each one's waits, the stage, its records), then
chunk 1's, and so on (`plan`). `missing_dependencies` says which reads are not ordered after their writes.
"""
from __future__ import annotations

import dataclasses
import re

from ._sources import cell_literal

__all__ = ["EXERCISES", "STAGES", "DEPENDENCIES", "KEYS", "MAX_STREAMS", "MAX_CHUNKS", "MAX_EVENTS", "MAX_WAITS", "ScheduleError",
           "Dependency", "Missing", "parse_schedule_cell", "check_schedule", "stream_of", "plan",
           "missing_dependencies", "dependency_message", "issue_order"]

STAGES = ("h2d", "produce", "consume", "d2h")
KEYS = ("streams", "chunks", "stream", "record", "wait")
EXERCISES = ("two_stage",)
"""The exercises whose cells hold a schedule (the %%streams magic accepts these names)."""

# The caps of a schedule, here only: the %%streams magic, the grader's check (drivers.two_stage.LIMITS) and
# the notebook read them from here. They keep a schedule (and the plan the host issues) small: a real one
# needs a few streams, a few dozen chunks and one or two events.
MAX_STREAMS = 16
MAX_CHUNKS = 256
MAX_EVENTS = 8      # event names in 'record'
MAX_WAITS = 8       # events one stage waits for
_REF = re.compile(r"^([A-Za-z_]\w*)(?:\[c(?:-(\d+))?\])?$")
_EXAMPLE = '{"streams": 2, "chunks": 16, "stream": {...}, "record": {...}, "wait": {...}}'


@dataclasses.dataclass(frozen=True)
class Dependency:
    """Stage ``consumer`` of chunk c reads what stage ``producer`` of chunk c - ``back`` wrote."""

    producer: str
    back: int
    consumer: str
    what: str


DEPENDENCIES = (
    Dependency("h2d", 0, "produce", "the chunk of d_in that h2d copies in"),
    Dependency("produce", 0, "consume", "the chunk of tmp that produce writes"),
    Dependency("produce", 1, "consume", "the last tmp value of the previous chunk (its left neighbour)"),
    Dependency("consume", 0, "d2h", "the chunk of out that consume writes"),
)


@dataclasses.dataclass(frozen=True)
class Missing:
    """A read not ordered after its write: ``dep`` at consumer chunk ``chunk`` (and ``count`` chunks in all)."""

    dep: Dependency
    chunk: int
    producer_stream: int
    consumer_stream: int
    count: int

    @property
    def producer_chunk(self) -> int:
        return self.chunk - self.dep.back


class ScheduleError(ValueError):
    """A schedule cell that is not a literal dict of the schedule's fields; the message says what to write."""


def parse_schedule_cell(source: str, exercise: str) -> dict:
    """The schedule, read with ast (never run) from a ``%%streams --name EXERCISE`` cell: a literal dict, bare
    or assigned to ``SCHEDULE``. Raises `ScheduleError` saying what to write."""
    value = cell_literal(source, exercise, what="schedule", names={"SCHEDULE"}, example=_EXAMPLE,
                         fill="the schedule's fields", error=ScheduleError)
    if not isinstance(value, dict):
        raise ScheduleError(f"the {exercise} schedule should be a dict such as {_EXAMPLE}; got {type(value).__name__}")
    return _plain(value)


def _plain(x):
    """A copy with tuples as lists and dict keys as strings (a literal holds nothing else foreign); any other
    value stays as the student wrote it, for check_schedule to refuse with that value shown."""
    if isinstance(x, dict):
        return {(k if isinstance(k, str) else repr(k)): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _stages_named(d: dict, what: str) -> str:
    bad = [k for k in d if k not in STAGES]
    if bad:
        verb = "is not a stage" if len(bad) == 1 else "are not stages"
        return f"{what} names {', '.join(map(repr, bad))}, which {verb}; the stages are {', '.join(STAGES)}."
    return ""


def _parse_ref(ref: str):
    m = _REF.match(ref.replace(" ", "")) if isinstance(ref, str) else None
    return (m.group(1), int(m.group(2) or 0)) if m else None


def check_schedule(schedule, *, max_streams: int = MAX_STREAMS, max_chunks: int = MAX_CHUNKS) -> str:
    """'' when ``schedule`` is well formed, else what is wrong, as a teacher would say it. It does not judge
    the order (`missing_dependencies` does). Event names and each stage's waits are capped (`MAX_EVENTS`,
    `MAX_WAITS`), and a stage's stream list holds at most ``max_chunks`` entries."""
    if not isinstance(schedule, dict):
        return f"the schedule should be a dict such as {_EXAMPLE}; got {type(schedule).__name__}"
    extra = [k for k in schedule if k not in KEYS]
    missing = [k for k in ("streams", "chunks", "stream") if k not in schedule]
    if extra or missing:
        return ("the schedule takes the keys " + ", ".join(KEYS) + " ('record' and 'wait' may be left out)"
                + (f"; missing: {', '.join(missing)}" if missing else "")
                + (f"; not schedule fields: {', '.join(map(repr, extra))}" if extra else "") + ".")
    for key, top in (("streams", max_streams), ("chunks", max_chunks)):
        v = schedule[key]
        if type(v) is not int or not 1 <= v <= top:
            return f"{key!r} should be an int from 1 to {top}; got {_short(v)}."
    s = schedule["streams"]
    streams = schedule["stream"]
    if not isinstance(streams, dict):
        return ("'stream' should map every stage to its stream, e.g. {\"h2d\": [0, 1], \"produce\": [0, 1], "
                f"\"consume\": [0, 1], \"d2h\": [0, 1]}}; got {_short(streams)}")
    problem = _stages_named(streams, "'stream'")
    if problem:
        return problem
    absent = [st for st in STAGES if st not in streams]
    if absent:
        return f"'stream' gives no stream for {', '.join(absent)}: every stage needs one (an int, or a list of ints)."
    for st in STAGES:
        v = streams[st]
        pattern = v if isinstance(v, list) else [v]
        if not pattern or not all(type(x) is int for x in pattern):
            return (f"the stream of {st} should be an int or a non-empty list of ints (chunk c takes entry c % len); "
                    f"got {_short(v)}.")
        if len(pattern) > max_chunks:
            return (f"the stream list of {st} has {len(pattern)} entries, more than the {max_chunks} chunks a "
                    f"schedule may have: chunk c takes entry c % len, so a short pattern such as [0, 1] is enough.")
        bad = [x for x in pattern if not 0 <= x < s]
        if bad:
            return (f"{st} is put on stream {bad[0]}, but the schedule has {s} stream{'s' * (s != 1)}, numbered 0 to "
                    f"{s - 1}; raise 'streams' or use a stream in that range.")
    record = schedule.get("record", {})
    if not isinstance(record, dict) or not all(isinstance(v, str) for v in record.values()):
        return ("'record' should map each event's name to the stage it is recorded after, e.g. "
                f"{{\"produced\": \"produce\"}}; got {_short(record)}")
    if len(record) > MAX_EVENTS:
        return (f"'record' names {len(record)} events; a schedule may record at most {MAX_EVENTS}. Each event is "
                "recorded after its stage in every chunk, so one event per hand-over between streams is enough "
                "(the reference needs one).")
    for ev, st in record.items():
        if not re.fullmatch(r"[A-Za-z_]\w*", ev):
            return f"the event name {_short(ev)} should be a plain name (letters, digits, _), such as \"produced\"."
        if st not in STAGES:
            return f"'record' puts {ev!r} after {_short(st)}, which is not a stage; the stages are {', '.join(STAGES)}."
    wait = schedule.get("wait", {})
    if not isinstance(wait, dict):
        return ("'wait' should map a stage to the events it waits for, e.g. {\"consume\": [\"produced\"]}; got "
                f"{_short(wait)}")
    problem = _stages_named(wait, "'wait'")
    if problem:
        return problem
    for st, refs in wait.items():
        refs = refs if isinstance(refs, list) else [refs]
        if len(refs) > MAX_WAITS:
            return (f"{st} waits for {len(refs)} events; a stage may wait for at most {MAX_WAITS}. Wait only for "
                    "the events whose stage writes what this stage reads.")
        for ref in refs:
            problem = _check_ref(st, ref, record)
            if problem:
                return problem
        seen = [_parse_ref(r) for r in refs]
        twice = next((r for i, r in enumerate(refs) if seen[i] in seen[:i]), None)
        if twice is not None:
            return (f"{st} waits for {twice!r} twice (in {_short(refs)}): a second wait for the same event orders "
                    "nothing more. List each event once.")
    return ""


def _short(x, limit: int = 120) -> str:
    """``repr(x)``, cut to ``limit`` characters: a message quotes a value, never a whole huge one."""
    r = repr(x)
    return r if len(r) <= limit else r[:limit - 4] + " ..."


def _check_ref(stage: str, ref, record: dict) -> str:
    parsed = _parse_ref(ref)
    if parsed is None:
        return (f"{stage} waits for {_short(ref)}; write an event's name for this chunk's event (\"produced\") or "
                "NAME[c-1] for the previous chunk's (\"produced[c-1]\"). A chunk can wait only for its own events "
                "and earlier chunks': later chunks' are recorded after it is issued.")
    ev, back = parsed
    if ev not in record:
        known = f" (recorded events: {', '.join(record)})" if record else " (the schedule records none)"
        return (f"{stage} waits for the event {ev!r}, which is never recorded{known}: a wait on an event that was "
                f"never recorded does not wait at all. Add it to 'record', e.g. \"record\": {{\"{ev}\": \"produce\"}}.")
    if back == 0 and STAGES.index(record[ev]) >= STAGES.index(stage):
        return (f"{stage} waits for this chunk's {ev!r}, which is recorded after {record[ev]}: the host issues a "
                f"chunk's stages in the order {', '.join(STAGES)}, so that record comes after the wait, and a wait "
                f"sees only records issued before it. Wait for an event recorded after an earlier stage, or for an "
                f"earlier chunk's ({ev}[c-1]).")
    return ""


def stream_of(schedule: dict, stage: str, chunk: int) -> int:
    v = schedule["stream"][stage]
    return v[chunk % len(v)] if isinstance(v, list) else v


def _refs(schedule: dict, stage: str) -> list:
    refs = schedule.get("wait", {}).get(stage, [])
    return [_parse_ref(r) for r in (refs if isinstance(refs, list) else [refs])]


def plan(schedule: dict, n_chunks: int) -> list:
    """The operations the host issues, in order: ("wait", stream, event, chunk of the record),
    ("stage", stream, stage, chunk) and ("record", stream, event, chunk). Waits on chunks before 0 are left out.
    ``n_chunks`` is the number of chunks actually cut (fewer than asked when the array is shorter)."""
    after = {}
    for ev, st in schedule.get("record", {}).items():
        after.setdefault(st, []).append(ev)
    waits = {st: _refs(schedule, st) for st in STAGES}   # parsed once, not once a chunk
    ops = []
    for c in range(n_chunks):
        for st in STAGES:
            s = stream_of(schedule, st, c)
            ops += [("wait", s, ev, c - back) for ev, back in waits[st] if c - back >= 0]
            ops.append(("stage", s, st, c))
            ops += [("record", s, ev, c) for ev in after.get(st, [])]
    return ops


def missing_dependencies(schedule: dict, n_chunks: int) -> list:
    """The `DEPENDENCIES` the schedule leaves unordered, one `Missing` per dependency (its first chunk).

    Happens-before over the plan: an operation follows everything before it on its stream, and a wait makes
    its stream follow everything the waited record followed. A stage instance is a bit (4 c + stage); each
    stream carries the set of instances it has passed, as an int.
    """
    n_st = len(STAGES)
    tail, recorded, before = {}, {}, {}
    for kind, s, what, c in plan(schedule, n_chunks):
        cur = tail.get(s, 0)
        if kind == "wait":
            tail[s] = cur | recorded.get((what, c), 0)
        elif kind == "record":
            recorded[(what, c)] = cur
        else:
            i = c * n_st + STAGES.index(what)
            before[i] = cur
            tail[s] = cur | (1 << i)
    out = []
    for dep in DEPENDENCIES:
        bad = [c for c in range(dep.back, n_chunks)
               if not before[c * n_st + STAGES.index(dep.consumer)] >> ((c - dep.back) * n_st
                                                                         + STAGES.index(dep.producer)) & 1]
        if bad:
            c = bad[0]
            out.append(Missing(dep, c, stream_of(schedule, dep.producer, c - dep.back),
                               stream_of(schedule, dep.consumer, c), len(bad)))
    return out


def dependency_message(m: Missing) -> str:
    """What is unordered, and the fix, for one `Missing`."""
    d = m.dep
    more = f" (and {m.count - 1} more chunk{'s' * (m.count != 2)})" if m.count > 1 else ""
    # a producer is always issued before its consumer, so one stream would order them: the two differ
    where = f"on stream {m.producer_stream}, while {d.consumer} runs on stream {m.consumer_stream}"
    ref = "NAME" if d.back == 0 else f"NAME[c-{d.back}]"
    return (f"{d.consumer} of chunk {m.chunk} reads {d.what}, written by {d.producer} of chunk {m.producer_chunk} "
            f"{where}, and nothing makes it wait{more}. Work on different streams has no order: record an event "
            f"after {d.producer} (\"record\": {{\"NAME\": \"{d.producer}\"}}) and wait for it before {d.consumer} "
            f"(\"wait\": {{\"{d.consumer}\": [\"{ref}\"]}}), or put both on one stream.")


def issue_order(schedule: dict, n_chunks: int = 2) -> str:
    """The first chunks' operations as the host issues them, one line each, e.g. for a notebook to print."""
    lines = []
    for kind, s, what, c in plan(schedule, n_chunks):
        if kind == "stage":
            lines.append(f"stream {s}: {what} of chunk {c}")
        elif kind == "record":
            lines.append(f"stream {s}:   record {what}[{c}]")
        else:
            lines.append(f"stream {s}:   wait for {what}[{c}]")
    return "\n".join(lines)
