"""Chapter 03's ``two_stage``: a stream schedule written as data (course.schedule), checked in the parent,
its order analysed by the driver (drivers.two_stage) and its overlap timed. CPU tier: the schedule's checks
and plan are pure Python, and the grading children use the fake harness, whose driver gives the real order
verdict (`drivers.two_stage.case_verdict`) without running anything. The GPU tier: test_two_stage_gpu.py."""
import json
import re

import pytest

from ag_corpus import check_report, parse_expect
from ag_helpers import ROOT, make_notebook

from autograder import CallExercise, Status, get_exercise, grade_path, grade_source
from autograder.call_pipeline import call_pipeline_step
from autograder.extract import cuda_cell_name
from course import schedule as sched
from drivers import two_stage

CH, NAME = "03_streams", "two_stage"
REFERENCE = (ROOT / "solutions" / CH / f"{NAME}.py").read_text()
CORPUS = ROOT / "tests" / "autograder" / "corpus" / CH / NAME


def schedule(**kw):
    base = {"streams": 2, "chunks": 16, "stream": {st: [0, 1] for st in sched.STAGES}}
    base.update(kw)
    return base


REF = sched.parse_schedule_cell(REFERENCE, NAME)
ONE_STREAM = schedule(streams=1, stream={st: 0 for st in sched.STAGES})
NO_EVENT = schedule()   # chunk c on stream c % 2, nothing between the streams


def text(s: dict) -> str:
    return json.dumps(s)


# --- the schedule as data: reading and checking (no GPU) -------------------------------------------

@pytest.mark.parametrize("bad, says", [
    (schedule(stream={"h2d": 0, "produce": 0, "consume": 0, "d2h": 0, "compute": 0}),
     "'compute', which is not a stage"),
    (schedule(stream={"h2d": 0, "produce": 0, "consume": 0}), "no stream for d2h"),
    (schedule(stream={**NO_EVENT["stream"], "consume": [0, 2]}), "stream 2, but the schedule has 2 streams"),
    (schedule(stream={**NO_EVENT["stream"], "consume": []}), "non-empty list of ints"),
    (schedule(wait={"consume": ["produced"]}), "'produced', which is never recorded"),
    (schedule(record={"produced": "produce"}, wait={"konsume": ["produced"]}), "'konsume', which is not a stage"),
    (schedule(record={"done": "d2h"}, wait={"consume": ["done"]}), "recorded after d2h"),
    (schedule(record={"p": "produce"}, wait={"produce": ["p"]}), "recorded after produce"),
    (schedule(record={"p": "produce"}, wait={"consume": ["p[c+1]"]}), "earlier chunks'"),
    (schedule(record={"p": "cook"}), "'cook', which is not a stage"),
    (schedule(streams=0), f"'streams' should be an int from 1 to {sched.MAX_STREAMS}"),
    (schedule(chunks=1000), f"'chunks' should be an int from 1 to {sched.MAX_CHUNKS}"),
    # the caps (course.schedule, one home): events, waits per stage, a stream list's length; no repeats
    (schedule(record={f"e{i}": "produce" for i in range(sched.MAX_EVENTS + 1)}),
     f"may record at most {sched.MAX_EVENTS}"),
    (schedule(record={f"e{i}": "h2d" for i in range(sched.MAX_EVENTS)},   # distinct waits, within MAX_EVENTS
              wait={"produce": [f"e{i % sched.MAX_EVENTS}[c-{1 + i // sched.MAX_EVENTS}]"
                                for i in range(sched.MAX_WAITS + 1)]}), f"wait for at most {sched.MAX_WAITS}"),
    (schedule(record={"p": "produce"}, wait={"consume": ["p[c-1]", "p[c - 1]"]}), "waits for 'p[c - 1]' twice"),
    (schedule(record={"p": "produce"}, wait={"consume": ["p", "p[c]"]}), "twice"),
    (schedule(stream={**NO_EVENT["stream"], "h2d": [0, 1] * sched.MAX_CHUNKS}),
     f"more than the {sched.MAX_CHUNKS} chunks"),
    ({"streams": 2, "chunks": 4}, "missing: stream"),
    (schedule(events={}), "not schedule fields: 'events'"),
])
def test_malformed_schedules_are_refused_with_a_reason(bad, says):
    """Does each malformed schedule get a message that names what is wrong (a teacher's, not a traceback)?"""
    problem = two_stage.check_schedule(NAME, bad)
    assert says in problem, problem


def test_the_caps_have_one_home():
    """The grader's check and the %%streams magic take the caps from course.schedule, not numbers of their own."""
    assert two_stage.LIMITS == {"max_streams": sched.MAX_STREAMS, "max_chunks": sched.MAX_CHUNKS}
    at_cap = schedule(record={f"e{i}": "produce" for i in range(sched.MAX_EVENTS)},
                      wait={"consume": [f"e{i}[c-1]" for i in range(sched.MAX_WAITS)]})
    assert two_stage.check_schedule(NAME, at_cap) == ""


def test_messages_quote_huge_values_cut_short():
    problem = two_stage.check_schedule(NAME, schedule(stream={**NO_EVENT["stream"], "d2h": ["x"] * 5000}))
    assert "non-empty list of ints" in problem and len(problem) < 400


def test_well_formed_schedules_pass_the_check():
    for s in (REF, ONE_STREAM, NO_EVENT):
        assert two_stage.check_schedule(NAME, s) == ""


@pytest.mark.parametrize("cell, says", [
    ("%%streams --name two_stage\n{\n    // YOUR CODE HERE\n}", "not filled in"),
    ("SCHEDULE = dict(streams=2)", "literal"),
    ("import os\nos.system('true')", "literal"),
    ("x = 1", "no schedule found"),
    ("{'streams': 2,", "not a valid Python literal"),
    ("[1, 2]", "should be a dict"),
    ('{"streams": 2, [1]: 2}', "literal dict"),            # an unhashable key: TypeError in literal_eval
    ('{"streams": 2, "streams": 3}', "gives the key 'streams' twice"),
    ('{"record": {"p": "produce", "p": "consume"}}', "gives the key 'p' twice"),
    ("{" * 300 + "}" * 300, "not a valid Python literal"),
    ('{"streams": 2}  # ' + "x" * 20_000, "at most 20,000"),
])
def test_cells_that_are_not_a_schedule_are_refused(cell, says):
    with pytest.raises(sched.ScheduleError, match=re.escape(says)):
        sched.parse_schedule_cell(cell, NAME)


def test_schedule_cell_reads_bare_dicts_assignments_and_tuples():
    assert sched.parse_schedule_cell("SCHEDULE = " + text(REF), NAME) == REF
    assert sched.parse_schedule_cell("%%streams --name two_stage\n" + text(REF), NAME) == REF
    assert sched.parse_schedule_cell('{"stream": {"h2d": (0, 1)}}', NAME) == {"stream": {"h2d": [0, 1]}}


# --- the order: plan and happens-before ------------------------------------------------------------

def test_plan_issues_chunk_by_chunk_with_waits_before_and_records_after():
    assert sched.plan(REF, 2) == [
        ("stage", 0, "h2d", 0), ("stage", 0, "produce", 0), ("record", 0, "produced", 0),
        ("stage", 0, "consume", 0), ("stage", 0, "d2h", 0),
        ("stage", 1, "h2d", 1), ("stage", 1, "produce", 1), ("record", 1, "produced", 1),
        ("wait", 1, "produced", 0), ("stage", 1, "consume", 1), ("stage", 1, "d2h", 1)]


@pytest.mark.parametrize("s, missing", [
    (REF, []),
    (ONE_STREAM, []),
    (NO_EVENT, [("produce", 1, "consume", 1)]),
    # the brief's schedule: consume of c on the stream of produce of c - 1, one event for this chunk's produce
    (schedule(stream={"h2d": [0, 1], "produce": [0, 1], "consume": [1, 0], "d2h": [1, 0]},
              record={"p": "produce"}, wait={"consume": ["p"]}), []),
    (schedule(stream={"h2d": [0, 1], "produce": [0, 1], "consume": [1, 0], "d2h": [1, 0]}),
     [("produce", 0, "consume", 0)]),
    # a copy stream and a compute stream: every hand-over needs its event
    (schedule(stream={"h2d": 0, "produce": 1, "consume": 1, "d2h": 0}),
     [("h2d", 0, "produce", 0), ("consume", 0, "d2h", 0)]),
    (schedule(stream={"h2d": 0, "produce": 1, "consume": 1, "d2h": 0}, record={"in": "h2d", "out": "consume"},
              wait={"produce": "in", "d2h": ["out"]}), []),
    # waiting for the event of a chunk two back orders nothing about the previous one
    (schedule(record={"p": "produce"}, wait={"consume": ["p[c-2]"]}), [("produce", 1, "consume", 1)]),
])
def test_missing_dependencies_follow_stream_order_and_waits(s, missing):
    """Does the happens-before analysis find exactly the reads the schedule leaves unordered?"""
    assert two_stage.check_schedule(NAME, s) == ""
    got = [(m.dep.producer, m.dep.back, m.dep.consumer, m.chunk) for m in sched.missing_dependencies(s, 16)]
    assert got == missing


def test_one_chunk_has_no_neighbour_to_wait_for():
    assert sched.missing_dependencies(NO_EVENT, 1) == []
    assert two_stage.case_verdict(NO_EVENT, 1) == ([], None)


def test_the_driver_holds_back_the_producer_of_the_first_unordered_read():
    missing, hold = two_stage.case_verdict(NO_EVENT, 4099)
    assert hold == ("produce", 0) and missing[0].consumer_stream == 1 and missing[0].producer_stream == 0
    msg = sched.dependency_message(missing[0])
    assert "consume of chunk 1" in msg and "produce of chunk 0" in msg and "produced" not in msg
    assert '"wait": {"consume": ["NAME[c-1]"]}' in msg and "14 more chunks" in msg


def test_produce_is_the_reference_process_chunk_compiled_with_the_drivers_kernels():
    """One home per kernel: the driver's own source holds consume and stall only; produce is compiled from
    chapter 03's reference process_chunk, and the two compile together (NVRTC, no GPU)."""
    from ag_helpers import nvrtc_or_skip
    from course.source import parse_kernels
    assert list(parse_kernels(two_stage.SOURCE)) == ["consume", "stall"]
    reference = (ROOT / "solutions" / CH / "process_chunk.cu").read_text()
    assert two_stage._source().startswith(reference)
    course = nvrtc_or_skip()
    assert set(course.compile_for_arch(two_stage._source(), "sm_80").resources) == {"process_chunk", "consume",
                                                                                     "stall"}


def test_expected_output_reads_the_left_neighbour():
    import numpy as np
    x = np.array([1.0, 2.0, -1.0])
    t = x * (x * x - 0.5)
    assert np.allclose(two_stage.expected(x), [t[0], t[1] + 0.5 * t[0], t[2] + 0.5 * t[1]])


# --- the spec and the notebook -------------------------------------------------------------------

def test_spec_is_a_data_exercise_with_overlap_points():
    ex = get_exercise(CH, NAME)
    assert isinstance(ex, CallExercise) and ex.magic == "%%streams"
    assert ex.max_points == ex.points.correctness + ex.pipeline.points == 8
    assert ex.resolve("checker") is two_stage.check_schedule
    assert cuda_cell_name("%%streams --name two_stage\n{}") == NAME
    assert cuda_cell_name("%%streams\n{}") is None


def test_spec_refuses_a_broken_pipeline():
    import dataclasses
    from pathlib import Path

    from autograder.loader import validate
    from autograder.spec import SpecError
    ex = get_exercise(CH, NAME)
    with pytest.raises(SpecError, match="pipeline"):
        validate(dataclasses.replace(ex, pipeline=dataclasses.replace(ex.pipeline, full_at=0.9)), Path(f"{CH}.py"))
    with pytest.raises(SpecError, match="pipeline"):
        validate(dataclasses.replace(ex, pipeline=dataclasses.replace(ex.pipeline, driver="drivers.two_stage:nope")),
                 Path(f"{CH}.py"))
    with pytest.raises(SpecError, match="magic"):
        validate(dataclasses.replace(ex, magic="streams"), Path(f"{CH}.py"))


# --- grading through the parent and the (fake) children -------------------------------------------

def test_reference_schedule_gets_full_marks(fake_harness):
    r = grade_source(CH, NAME, REFERENCE)
    assert r.status == Status.PASSED and r.points == r.max_points == 8, r.feedback()
    ex = get_exercise(CH, NAME)
    assert len(r.sizes) == len(ex.sizes) + ex.hidden_sizes and r.pipeline.streams == 2


def test_one_stream_is_correct_and_gets_no_overlap_points(fake_harness):
    r = grade_source(CH, NAME, text(ONE_STREAM))
    assert r.status == Status.SLOW and r.points == get_exercise(CH, NAME).points.correctness, r.feedback()
    assert "more than one stream" in r.reason


def test_missing_wait_fails_with_the_dependency_named(fake_harness):
    r = grade_source(CH, NAME, text(NO_EVENT))
    assert r.status == Status.FAILED and r.points == 0, r.feedback()
    assert "consume of chunk 1 reads the last tmp value of the previous chunk" in r.reason
    assert r.pipeline is None   # never timed
    public = [s.status for s in r.sizes if not s.hidden]
    assert public == [Status.PASSED, Status.FAILED, Status.FAILED]  # n = 1: one chunk, nothing crosses


def test_no_speed_grades_correctness_only(fake_harness):
    r = grade_source(CH, NAME, REFERENCE, speed=False)
    assert r.status == Status.UNTIMED and r.points == 4, r.feedback()


def test_malformed_schedule_is_refused_before_any_child(fake_harness):
    r = grade_source(CH, NAME, text(schedule(wait={"consume": ["produced"]})))
    assert r.status == Status.FAILED and r.points == 0 and not r.sizes
    assert "never recorded" in r.reason


@pytest.mark.parametrize("source, says", [
    (text(schedule(record={f"e{i}": "produce" for i in range(sched.MAX_EVENTS + 1)})), "at most"),
    (REFERENCE + "\n# " + "x" * 20_000, "at most 20,000"),
    ('{"streams": 2, [1]: 2}', "literal dict"),
])
def test_oversized_or_unreadable_schedule_is_refused_before_any_child(fake_harness, source, says):
    """Is a schedule over the caps, a cell over the size cap or an unhashable key refused by the parent's
    check (no case run, a teacher's message), not a grader error?"""
    r = grade_source(CH, NAME, source)
    assert r.status == Status.FAILED and r.points == 0 and not r.sizes, r.feedback()
    assert says in r.reason and len(r.reason) < 1000


def test_an_exception_in_the_grader_owned_driver_is_a_grader_error(fake_harness):
    """The driver runs only the grader's kernels, buffers and copies: does an exception from it give a grader
    error (not final, no cuBLAS advice), where a library call's would be "crashed"?"""
    ex = get_exercise(CH, NAME)
    assert ex.grader_owned and not get_exercise("10_cublas", "sgemm_rowmajor").grader_owned
    r = grade_source(CH, NAME, text(schedule(streams=1, chunks=251, stream={st: 0 for st in sched.STAGES})))
    assert r.status == Status.ERROR and Status.CRASHED not in [s.status for s in r.sizes], r.feedback()
    assert f"driver {ex.driver} failed" in r.reason and "unspecified launch failure" in r.reason
    assert "leading dimension" not in r.reason and "Traceback" not in r.reason
    r = grade_source(CH, NAME, text(schedule(streams=1, chunks=253, stream={st: 0 for st in sched.STAGES})))
    assert r.status == Status.ERROR and "ran out of memory" in r.reason, r.feedback()
    assert "close other programs" in r.reason   # a lone grading: nothing grades it again by itself


def test_schedule_is_read_from_its_tagged_notebook_cell(fake_harness, tmp_path):
    path = tmp_path / f"{CH}.ipynb"
    make_notebook([("code", f"%%streams --name {NAME}\n" + REFERENCE, [f"call:{NAME}"])], path)
    rep = grade_path(path, chapter=CH, exercise=NAME)
    assert [(e.exercise, e.points) for e in rep.exercises] == [(NAME, 8.0)]


# --- the corpus: schedules with the verdict on their first line ------------------------------------

def corpus_cases():
    return sorted(CORPUS.glob("*.py"))


def test_corpus_has_the_attacks():
    names = {p.stem for p in corpus_cases()}
    assert {"missing_wait_hidden_by_luck", "one_stream", "wait_never_recorded", "wait_flood", "too_many_waits", "unhashable_key"} <= names


@pytest.mark.parametrize("path", corpus_cases(), ids=lambda p: p.stem)
def test_corpus_verdict(fake_harness, path):
    r = grade_source(CH, NAME, path.read_text())
    problems = check_report(r, parse_expect(path))
    assert not problems, "; ".join(problems) + "\n\n" + r.feedback()


# --- the pipeline step in the run child ------------------------------------------------------------

def _driver(ratios, wrong_at=None):
    calls = []

    def drive(name, call, *, seed, nbytes):
        calls.append(call)
        if call is REF:
            return {"correct": True, "ratio": 0.58, "streams": 2, "chunks": 16}
        if wrong_at is not None and len(calls) - 1 == wrong_at:
            return {"correct": False, "message": "out: 3 of 67108864 values wrong"}
        r = ratios[min(len(calls) - 2, len(ratios) - 1)]
        return {"correct": True, "total_ms": 10 * r, "serial_ms": 10.0, "ratio": r, "ideal_ms": 5.3,
                "spans": [("stream 0", "H2D", 0.0, 1.0)], "streams": 2, "chunks": 8}
    return drive, calls


def _alone():
    import contextlib
    return contextlib.nullcontext()


def test_pipeline_step_measures_again_near_a_boundary():
    ex = get_exercise(CH, NAME)
    drive, calls = _driver([ex.pipeline.full_at * 1.01, ex.pipeline.full_at * 0.99])
    out = call_pipeline_step(ex, drive, NO_EVENT, REF, 7, _alone)
    assert out["status"] == "ok" and out["pipeline"]["rounds"] == 2 and calls[0] is REF
    assert out["pipeline"]["reference_ratio"] == 0.58 and out["pipeline"]["chunks"] == 8


@pytest.mark.parametrize("error, says", [
    (RuntimeError("cudaErrorLaunchFailure: unspecified launch failure"), "driver drivers.two_stage:pipeline_report"
     " failed at the pipeline run"),
    (RuntimeError("cudaErrorMemoryAllocation: out of memory"), "ran out of memory"),
])
@pytest.mark.parametrize("fails_at", [0, 1])   # the reference's run, the student's
def test_pipeline_step_turns_a_driver_exception_into_a_grader_error(error, says, fails_at):
    """Does an exception from the pipeline driver (the reference's run or the student's) come back as a clean
    grader error, out of memory worded as such, never a traceback?"""
    ex = get_exercise(CH, NAME)
    drive, calls = _driver([0.58])

    def failing(name, call, *, seed, nbytes):
        if len(calls) == fails_at:
            calls.append(call)
            raise error
        return drive(name, call, seed=seed, nbytes=nbytes)
    out = call_pipeline_step(ex, failing, REF, REF, 7, _alone)
    assert out["status"] == "grader error" and says in out["message"], out
    assert "Not charged" in out["message"] or "not charged" in out["message"]
    assert out["sizes"] == {"n": ex.pipeline.nbytes // 4}


def test_pipeline_step_fails_a_wrong_timed_run_and_blames_a_wrong_reference():
    ex = get_exercise(CH, NAME)
    drive, _ = _driver([0.58], wrong_at=1)
    out = call_pipeline_step(ex, drive, NO_EVENT, REF, 7, _alone)
    assert out["status"] == "failed" and "3 of 67108864" in out["message"]

    def broken(name, call, *, seed, nbytes):
        return {"correct": False, "message": "nan"}
    assert call_pipeline_step(ex, broken, NO_EVENT, REF, 7, _alone)["status"] == "grader error"


# --- the %%streams magic, without a GPU ------------------------------------------------------------

def test_streams_magic_checks_form_and_order_without_a_gpu(capsys):
    from course import _magic
    assert _magic.streams_cell(f"--name {NAME}", REFERENCE) is True
    out = capsys.readouterr().out
    assert "every read is ordered" in out and "stream 1:   wait for produced[0]" in out
    assert _magic.streams_cell(f"--name {NAME}", text(NO_EVENT)) is False
    assert "nothing makes it wait" in capsys.readouterr().out
    assert _magic.streams_cell(f"--name {NAME}", text(schedule(wait={"d2h": "x"}))) is False
    assert "never recorded" in capsys.readouterr().out


@pytest.mark.parametrize("value,shown", [("2.0", "got 2.0."), ("None", "got None."), ("{0, 1}", "got {0, 1}.")])
def test_a_wrong_value_is_shown_as_written(value, shown):
    """A float, None or a set where an int belongs: does the message show the value as the student wrote it,
    not as a quoted string that reads like a string they never wrote?"""
    cell = "{" + f'"streams": {value}, "chunks": 4, "stream": {{"h2d": 0, "produce": 0, "consume": 0, "d2h": 0}}' + "}"
    msg = sched.check_schedule(sched.parse_schedule_cell(cell, NAME))
    assert msg.startswith("'streams' should be an int") and msg.endswith(shown), msg
