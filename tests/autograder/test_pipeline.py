"""Pipeline points (chapter 03): spec validation, LAUNCH limits, tiers, re-measuring near a boundary, the
harness step with a scripted driver, and whole gradings through the fake harness. No GPU needed."""
import dataclasses
import json
from types import SimpleNamespace

import pytest

import autograder.device as D
import autograder.harness as H
from autograder import PipelineResult, Report, SpecError, Status, get_exercise, grade_source, policy
from autograder.launchcfg import LaunchDataError, merge_launch, reference_launch
from autograder.loader import ROOT, load_spec_file
from autograder.report import SizeResult

CH, EX = "03_streams", "process_chunk"
PC = get_exercise(CH, EX)
SOLUTION = (ROOT / "solutions" / CH / "process_chunk.cu").read_text()
SPEC = (ROOT / "autograder" / "specs" / f"{CH}.py").read_text()


def with_launch(source, launch):
    """The kernel source with its // LAUNCH line replaced."""
    assert '// LAUNCH = {"block": 256, "streams": 4, "chunks": 16}' in source
    return source.replace('{"block": 256, "streams": 4, "chunks": 16}', launch)


def src(flags, launch=None):
    s = SOLUTION if launch is None else with_launch(SOLUTION, launch)
    return s + f"\n// FAKE: {flags}\n"


# -- the spec --------------------------------------------------------------------------------------

def test_chapter_03_has_pipeline_points_and_a_total_of_8():
    pl = PC.pipeline
    assert PC.points.correctness == 4 and pl.points == 4 and PC.max_points == 8
    assert 0.5 < pl.full_at < pl.half_at < 1.0
    assert (pl.max_streams, pl.max_chunks, pl.nbytes) == (16, 256, 256 << 20)
    assert PC.pipeline_n() == 1 << 26  # float32 elements each way
    assert reference_launch(PC) == {"block": 256, "streams": 4, "chunks": 16}


def load_variant(tmp_path, old, new):
    assert old in SPEC, old
    path = tmp_path / f"{CH}.py"  # named after the chapter: the reference is solutions/03_streams/...
    path.write_text(SPEC.replace(old, new))
    return load_spec_file(path)


def variant_error(tmp_path, old, new) -> str:
    with pytest.raises(SpecError) as info:
        load_variant(tmp_path, old, new)
    return str(info.value)


def test_spec_copy_is_valid(tmp_path):
    exercises = load_variant(tmp_path, "max_chunks=256", "max_chunks=256")
    assert [(e.name, e.max_points) for e in exercises][0] == ("process_chunk", 8)


@pytest.mark.parametrize("old,new,field,words", [
    ("FULL_AT, HALF_AT = 0.64, 0.85", "FULL_AT, HALF_AT = 0.9, 0.85", "pipeline", "0 < full_at < half_at < 1"),
    ("FULL_AT, HALF_AT = 0.64, 0.85", "FULL_AT, HALF_AT = 0.64, 1.2", "pipeline", "0 < full_at < half_at < 1"),
    ("pipeline=Pipeline(points=4,", "pipeline=Pipeline(points=-4,", "pipeline", "points should be a positive"),
    ("max_streams=16", "max_streams=0", "pipeline", "max_streams should be a positive int"),
    ("nbytes=256 << 20", "nbytes=1022", "pipeline", "multiple of 4"),
    ('driver="drivers.pipeline:pipeline_report"', 'driver="drivers.pipeline:pipeline_reprot"',
     "pipeline", "cannot be imported"),
    ('driver="drivers.pipeline:pipeline_report"', 'driver="pipeline_report"', "pipeline", "'module:function'"),
    ('launch_defaults={"block": 256, "streams": 1, "chunks": 1}', 'launch_defaults={"block": 256, "streams": 1}',
     "launch_defaults", "add defaults for 'chunks'"),
    ('launch_defaults={"block": 256, "streams": 1, "chunks": 1}',
     'launch_defaults={"block": 256, "streams": 32, "chunks": 1}', "launch_defaults", "1 to 16 streams"),
    ("max_chunks=256", "max_chunks=8", "pipeline", "LAUNCH line of the reference process_chunk.cu"),
])
def test_pipeline_spec_errors_name_the_field(tmp_path, old, new, field, words):
    msg = variant_error(tmp_path, old, new)
    assert f"exercise 'process_chunk', field '{field}'" in msg and words in msg, msg


def test_misspelt_pipeline_field_says_did_you_mean(tmp_path):
    msg = variant_error(tmp_path, "half_at=HALF_AT", "half_at=HALF_AT, max_chunk=4")
    assert "Pipeline has no field 'max_chunk'" in msg and "Did you mean 'max_chunks'?" in msg


# -- the student's LAUNCH data ---------------------------------------------------------------------

@pytest.mark.parametrize("launch,words", [
    ({"streams": 0}, "'streams' is 0, but the process_chunk pipeline takes 1 to 16 streams"),
    ({"streams": 17}, "'streams' is 17, but the process_chunk pipeline takes 1 to 16 streams"),
    ({"chunks": 257}, "'chunks' is 257, but the process_chunk pipeline takes 1 to 256 chunks"),
    ({"chunks": (4, 4)}, "'chunks' is (4, 4)"),
    ({"block": (16, 16)}, "1D blocks"),
])
def test_out_of_range_launch_is_refused_when_the_launch_data_is_read(launch, words):
    with pytest.raises(LaunchDataError) as info:
        merge_launch(PC, launch)
    assert words in str(info.value)


def test_launch_within_limits_is_accepted():
    assert merge_launch(PC, {"streams": 16, "chunks": 256}) == {"block": 256, "streams": 16, "chunks": 256}
    assert merge_launch(PC, None) == {"block": 256, "streams": 1, "chunks": 1}


def test_out_of_range_launch_in_the_kernel_cell_fails_before_any_child(monkeypatch):
    """Is a // LAUNCH line with 64 streams refused with the limits named, without starting a child?"""
    from autograder import runner
    monkeypatch.setattr(runner, "run_child", lambda task: pytest.fail("a child was started"))
    r = grade_source(CH, EX, with_launch(SOLUTION, '{"block": 256, "streams": 64, "chunks": 16}'))
    assert (r.status, r.points, r.max_points) == (Status.FAILED, 0, 8)
    assert "'streams' is 64" in r.reason and "1 to 16 streams" in r.reason
    r = grade_source(CH, EX, SOLUTION, launch={"chunks": 1000})
    assert r.status == Status.FAILED and "1 to 256 chunks" in r.reason


# -- tiers and scoring -----------------------------------------------------------------------------

@pytest.mark.parametrize("ratio,fraction", [(0.5, 1.0), (0.64, 1.0), (0.6401, 0.5), (0.85, 0.5), (0.8501, 0.0),
                                            (1.0, 0.0), (1.3, 0.0)])
def test_pipeline_tiers(ratio, fraction):
    assert PC.pipeline.fraction(ratio) == fraction


def passed_sizes():
    return [SizeResult({"n": n}, Status.PASSED) for n in (1, 33, 1_000_003, 4_194_305)]


def pipe(ratio, streams=4, chunks=16, reference=0.58):
    return PipelineResult(ratio=ratio, total_ms=10.0 * ratio, serial_ms=10.0, full_at=PC.pipeline.full_at,
                          half_at=PC.pipeline.half_at, streams=streams, chunks=chunks, block=256,
                          nbytes=256 << 20, reference_ratio=reference, reference_streams=4, reference_chunks=16)


def test_full_overlap_gets_all_points():
    r = policy.score(PC, passed_sizes(), pipeline=pipe(0.59))
    assert (r.status, r.points, r.max_points) == (Status.PASSED, 8, 8) and r.reason == ""
    assert "Pipeline: 4 streams, 16 chunks" in r.feedback() and "reference pipeline" in r.feedback()


def test_half_tier():
    r = policy.score(PC, passed_sizes(), pipeline=pipe(0.77, streams=2, chunks=2))
    assert (r.status, r.points) == (Status.SLOW, 6)
    assert "50% of the pipeline points" in r.reason and "use more chunks" in r.reason


def test_no_faster_than_unoverlapped_gets_no_pipeline_points_and_says_what_to_change():
    r = policy.score(PC, passed_sizes(), pipeline=pipe(1.0, streams=1, chunks=1))
    assert (r.status, r.points) == (Status.SLOW, 4)
    assert "took 1.00 of the un-overlapped time" in r.reason
    assert "Full pipeline points need <= 0.64, half <= 0.85" in r.reason
    assert "more than one stream" in r.reason and "cut the work into chunks" in r.reason
    assert "pinned" in r.reason and "the reference's pipeline took 0.58" in r.reason
    # many chunks on one stream: still nothing overlaps
    r = policy.score(PC, passed_sizes(), pipeline=pipe(1.05, streams=1, chunks=16))
    assert r.points == 4 and "more than one stream" in r.reason and "cut the work" not in r.reason


def test_wrong_pipeline_output_loses_all_points():
    fail = SizeResult({"n": 1 << 26}, Status.FAILED, "wrong output from the pipeline: 12 values wrong")
    r = policy.score(PC, passed_sizes(), pipeline_failure=fail)
    assert (r.status, r.points) == (Status.FAILED, 0)
    assert "failed in the pipeline run" in r.reason and "12 values wrong" in r.reason


def test_missing_pipeline_measurement_is_a_grader_error_not_full_marks():
    r = policy.score(PC, passed_sizes(), pipeline=None)
    assert r.status == Status.ERROR and r.points == 4 and "pipeline was not measured" in r.reason


def test_wrong_kernel_gets_no_pipeline_points():
    sizes = passed_sizes()
    sizes[1] = SizeResult({"n": 33}, Status.FAILED, "wrote outside the chunk")
    r = policy.score(PC, sizes, pipeline=pipe(0.55))
    assert (r.status, r.points) == (Status.FAILED, 0) and r.pipeline is None


def scripted(ratios):
    calls = []

    def measure():
        calls.append(1)
        return 10.0 * ratios[len(calls) - 1], 10.0
    return measure, calls


def test_clear_pipeline_verdict_takes_one_measurement():
    m, calls = scripted([0.58])
    d = policy.decide_pipeline(m, PC.pipeline)
    assert len(calls) == 1 and d.settled and d.fraction == 1.0 and d.ratio == pytest.approx(0.58)


def test_ratio_near_a_boundary_is_measured_once_more_and_pooled():
    m, calls = scripted([0.65, 0.62])  # 1.6% above 0.64: unsure; the second says 0.62
    d = policy.decide_pipeline(m, PC.pipeline)
    assert len(calls) == 2 and d.rounds == 2 and d.fraction == 1.0 and d.ratio == pytest.approx(0.62)
    m, calls = scripted([0.86, 0.87, 0.5])  # near half_at twice: stops after PIPELINE_ROUNDS, unsettled
    d = policy.decide_pipeline(m, PC.pipeline)
    assert len(calls) == policy.PIPELINE_ROUNDS == 2 and not d.settled and d.fraction == 0.0


def test_near_boundary_band():
    b = (PC.pipeline.full_at, PC.pipeline.half_at)
    assert policy.pipeline_near_boundary(0.65, 0.03, b) == 0.64
    assert policy.pipeline_near_boundary(0.63, 0.03, b) == 0.64
    assert policy.pipeline_near_boundary(0.60, 0.03, b) is None
    assert policy.pipeline_near_boundary(0.86, 0.03, b) == 0.85
    assert policy.pipeline_near_boundary(1.0, 0.03, b) is None


# -- the harness step, with a scripted driver (the real step's logic on a CPU) ---------------------

def report(ratio, correct=True, message=""):
    return {"correct": correct, "message": message or ("ok" if correct else "pipeline output: 7 values wrong"),
            "total_ms": 10.0 * ratio, "serial_ms": 10.0, "ratio": ratio, "ideal_ms": 5.3,
            "spans": [("stream 0", "H2D", 0.123456789, 1.0), ("stream 0", "kernel", 1.0, 1.1)]}


class ScriptedKernel:
    """Called by fake_harness.kernel_driver in place of a pipeline run: returns the next scripted report."""

    def __init__(self, *outcomes):
        self.outcomes, self.calls = list(outcomes), []

    def __call__(self, **kw):
        self.calls.append(kw)
        out = self.outcomes[min(len(self.calls), len(self.outcomes)) - 1]
        if isinstance(out, BaseException):
            raise out
        return out


@pytest.fixture
def step_ctx(monkeypatch):
    monkeypatch.setattr(D, "BACKEND", SimpleNamespace(free_cached=lambda: None, sync=lambda: None))
    ex = dataclasses.replace(PC, pipeline=dataclasses.replace(PC.pipeline, driver="fake_harness:kernel_driver"))

    def make(student, reference=None, cfg=None):
        arms = []
        from autograder.launchcfg import reference_launch
        ctx = H.Context(ex, "", cfg or {"block": 128, "streams": 2, "chunks": 8}, 99, {"l2_bytes": 1 << 20},
                        lambda t, w: arms.append((t, w)), reference_launch=reference_launch(ex))
        ctx.student, ctx.reference = student, reference or ScriptedKernel(report(0.58))
        return ctx, arms
    return make


def test_step_runs_reference_with_its_launch_and_student_with_theirs(step_ctx):
    student, ref = ScriptedKernel(report(0.61)), ScriptedKernel(report(0.58))
    ctx, arms = step_ctx(student, ref)
    out = H.pipeline_step(ctx)
    assert out["status"] == "ok", out
    p = out["pipeline"]
    assert p["ratio"] == pytest.approx(0.61) and p["rounds"] == 1 and p["settled"]
    assert p["reference_ratio"] == pytest.approx(0.58) and (p["reference_streams"], p["reference_chunks"]) == (4, 16)
    assert ref.calls[0]["streams"] == 4 and ref.calls[0]["chunks"] == 16 and ref.calls[0]["n"] == 1 << 26
    assert student.calls[0]["streams"] == 2 and student.calls[0]["chunks"] == 8 and student.calls[0]["block"] == 128
    assert student.calls[0]["seed"] != 0  # secret inputs, not the driver's default
    assert student.calls[0]["seed"] - ref.calls[0]["seed"] >= 4   # never the reference's timed inputs
    # the time without overlap is the reference kernel's, never one the student's kernel could inflate
    assert student.calls[0]["reference"] is ref and ref.calls[0]["reference"] is None
    assert student.calls[0]["reference_block"] == ref.calls[0]["block"] == 256   # the reference's own LAUNCH
    assert p["spans"][0] == ["stream 0", "H2D", 0.1235, 1.0]
    armed = [w for _, w in arms if w]
    assert armed == ["your kernel in the pipeline (2 streams, 8 chunks, 256 MiB each way)"]
    assert json.loads(json.dumps(out))  # crosses the pipe as JSON
    PipelineResult(**p)  # and fits the report


def test_step_remeasures_near_a_boundary(step_ctx):
    student = ScriptedKernel(report(0.655), report(0.66))
    ctx, _ = step_ctx(student)
    p = H.pipeline_step(ctx)["pipeline"]
    assert len(student.calls) == 2 and p["rounds"] == 2 and p["ratio"] == pytest.approx(0.655)
    # fresh inputs for the second measurement: each call fills from its seed upwards, one seed a run, so the
    # calls' seeds (the reference's too) lie further apart than one call's fills
    seeds = [call["seed"] for call in student.calls]
    assert seeds[1] - seeds[0] >= 4, seeds      # a warm-up and three timed fills per call


def test_step_wrong_output_is_a_failure_with_the_check_message(step_ctx):
    ctx, _ = step_ctx(ScriptedKernel(report(0.6, correct=False)))
    out = H.pipeline_step(ctx)
    assert out["status"] == "failed"
    assert "wrong output from the pipeline (2 streams, 8 chunks" in out["message"]
    assert "7 values wrong" in out["message"] and "[offset, offset + count)" in out["message"]


def test_step_wrong_only_when_measured_again_fails_too(step_ctx):
    ctx, _ = step_ctx(ScriptedKernel(report(0.65), report(0.6, correct=False)))
    out = H.pipeline_step(ctx)
    assert out["status"] == "failed" and "(measurement 2)" in out["message"]


def test_step_crash_is_classified_as_fatal(step_ctx):
    ctx, _ = step_ctx(ScriptedKernel(RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")))
    out = H.pipeline_step(ctx)
    assert out["status"] == "crashed" and out["fatal"] and "illegal memory access" in out["message"]
    assert "the pipeline (2 streams, 8 chunks" in out["message"]


def test_step_broken_reference_is_a_grader_error(step_ctx):
    ctx, _ = step_ctx(ScriptedKernel(report(0.6)), ScriptedKernel(report(0.6, correct=False)))
    out = H.pipeline_step(ctx)
    assert out["status"] == "grader error" and "reference kernel's pipeline output is wrong" in out["message"]


# -- whole gradings: spawned children running the fake harness ------------------------------------

def test_reference_launch_gets_8_of_8(fake_harness):
    r = grade_source(CH, EX, src("pipe=0.58"))
    assert (r.status, r.points, r.max_points) == (Status.PASSED, 8, 8), r.feedback()
    assert r.pipeline is not None and (r.pipeline.streams, r.pipeline.chunks) == (4, 16)
    assert r.speed is None and "Pipeline: 4 streams, 16 chunks" in r.feedback()


def test_half_tier_through_the_runner(fake_harness):
    r = grade_source(CH, EX, src("pipe=0.74", '{"block": 256, "streams": 2, "chunks": 4}'))
    assert (r.status, r.points) == (Status.SLOW, 6), r.feedback()
    assert "50% of the pipeline points" in r.reason


def test_unoverlapped_pipeline_gets_correctness_points_only(fake_harness):
    r = grade_source(CH, EX, src("pipe=1.01", '{"block": 256, "streams": 1, "chunks": 1}'))
    assert (r.status, r.points) == (Status.SLOW, 4), r.feedback()
    assert "took 1.01 of the un-overlapped time" in r.reason and "more than one stream" in r.reason
    assert "Full pipeline points need <= 0.64" in r.reason


def test_boundary_ratio_is_remeasured_through_the_runner(fake_harness):
    r = grade_source(CH, EX, src("pipe=0.65,0.63"))
    assert r.pipeline.rounds == 2 and r.points == 8, r.feedback()


def test_wrong_pipeline_output_fails_through_the_runner(fake_harness):
    r = grade_source(CH, EX, src("pipewrong"))
    assert (r.status, r.points) == (Status.FAILED, 0), r.feedback()
    assert "pipeline run" in r.reason and "wrong output from the pipeline" in r.reason
    assert [s.status for s in r.sizes if not s.hidden] == [Status.PASSED] * 4


def test_pipeline_crash_costs_all_points(fake_harness):
    r = grade_source(CH, EX, src("pipecrash"))
    assert (r.status, r.points) == (Status.CRASHED, 0) and "illegal memory access" in r.reason


def test_wrong_kernel_skips_the_pipeline(fake_harness):
    r = grade_source(CH, EX, src("fail@2"))
    assert (r.status, r.points) == (Status.FAILED, 0) and r.pipeline is None


def test_report_json_round_trip_keeps_the_pipeline(fake_harness):
    r = grade_source(CH, EX, src("pipe=0.7"))
    back = Report.from_json(Report([r]).to_json()).exercises[0]
    assert back.pipeline == r.pipeline and back.points == 6
