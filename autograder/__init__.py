"""Grade CUDA kernel exercises for correctness and speed, isolated from the student's code (and library
calls whose arguments the student writes as data).

Specs live in autograder/specs/NN_topic.py (format: autograder/SPEC_FORMAT.md). Importing this package
never imports CuPy or touches CUDA; grading happens in spawned child processes.
"""
from .buffers import sample_inputs
from .launchcfg import launch_from_source
from .triton_source import launch_from_python
from .loader import chapters, get_exercise, load_chapter
from .nb import nbgrader_points, preview
from .report import ExerciseReport, PipelineResult, Report, SizeResult, SpeedResult, Status
from .batch import grade_class
from .runner import Session, grade_path, grade_source, speed_trials
from .trace import ENV as TRACE_ENV
from .trace import summarise as summarise_trace
from .spec import (LARGER_THAN_L2, CallExercise, Constant, Exercise, In, InOut, Out, Pipeline, Points, Scalar,
                   SpecError, Tolerance, Uniform, cdiv)
from .tensormaps import TensorMap
from .ring import Ring
from .trial import Trial, trial

__all__ = [
    "Exercise", "CallExercise", "In", "Out", "InOut", "Scalar", "Constant", "TensorMap", "Uniform", "Tolerance", "Points",
    "Pipeline", "Ring", "LARGER_THAN_L2",
    "cdiv", "SpecError", "launch_from_source", "launch_from_python", "sample_inputs", "chapters", "load_chapter", "get_exercise", "grade_source", "grade_path", "speed_trials",
    "grade_class", "Session", "TRACE_ENV", "summarise_trace",
    "preview", "nbgrader_points", "trial", "Trial", "Report", "ExerciseReport", "SizeResult", "SpeedResult", "PipelineResult",
    "Status",
]
