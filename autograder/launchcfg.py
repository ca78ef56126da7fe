"""A student's launch configuration, read as data (never executed) and checked against the spec.

Students may declare ``LAUNCH = {"block": 256}`` in a data cell (tagged ``launch:NAME``) or as a
comment line ``// LAUNCH = {"block": 256}`` in the kernel source. Only literals are accepted, so the
grader can read it without running student Python.
"""
from __future__ import annotations

import ast
import re

from .spec import Exercise, SpecError, did_you_mean

__all__ = ["LaunchDataError", "parse_launch_cell", "parse_call_cell", "launch_from_source", "sanitize", "merge_launch",
           "check_cfg_values", "check_pipeline_cfg", "reference_launch"]

# Blanks are [^\S\n], not \s: "^\s*" crossed newlines, so every line start of a run of blank lines
# rescanned the whole run (quadratic in the number of lines).
_COMMENT = re.compile(r"^[^\S\n]*//[^\S\n]*LAUNCH[^\S\n]*[=:][^\S\n]*(\{.*\})[^\S\n]*$", re.M)


class LaunchDataError(SpecError):
    """The student's LAUNCH data is not a dict of ints the exercise knows."""


def _literal(text: str, where: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise LaunchDataError(f"{where}: the LAUNCH value must be a literal dict such as "
                              f"{{\"block\": 256}} ({type(exc).__name__})") from None


def parse_launch_cell(source: str, exercise: str | None = None) -> dict | None:
    """The dict assigned to ``LAUNCH`` (or ``<EXERCISE>_LAUNCH``) in a Python cell, read with ast."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    wanted = {"LAUNCH"} | ({f"{exercise.upper()}_LAUNCH", f"{exercise}_LAUNCH"} if exercise else set())
    node = _last_value(tree, wanted)
    if node is None:
        return None
    return sanitize(_literal(ast.get_source_segment(source, node) or "", "launch cell"))


def _last_value(tree: ast.Module, names: set):
    """The expression last assigned to one of ``names`` at the top level, or None."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in names:
            found = node.value
    return found


def parse_call_cell(source: str, exercise: str, parser: str = "course.calls:parse_call_cell") -> dict:
    """A call's arguments (or a schedule), read as data by ``parser`` (a `CallExercise`'s, "module:function";
    never run). Raises `LaunchDataError` saying what to write."""
    from .spec import import_function
    parse = import_function(parser, "parser")
    try:
        return parse(source, exercise)
    except ValueError as exc:  # CallDataError, ScheduleError: the parsers' "what to write"
        raise LaunchDataError(str(exc)) from None


def launch_from_source(source: str) -> dict | None:
    """The ``// LAUNCH = {...}`` comment in kernel source, if there is one (the last one wins)."""
    hits = _COMMENT.findall(source or "")
    return sanitize(_literal(hits[-1], "// LAUNCH comment")) if hits else None


def sanitize(obj) -> dict:
    """A plain dict of str -> int or tuple of ints, rebuilt so no foreign object reaches a child."""
    if not isinstance(obj, dict):
        raise LaunchDataError(f"LAUNCH should be a dict such as {{\"block\": 256}}; got {type(obj).__name__}")
    out = {}
    for k, v in obj.items():
        if not isinstance(k, str):
            raise LaunchDataError(f"LAUNCH keys should be strings; got {k!r}")
        if type(v) is int:
            out[str(k)] = int(v)
        elif isinstance(v, (list, tuple)) and v and all(type(x) is int for x in v):
            out[str(k)] = tuple(int(x) for x in v)
        else:
            raise LaunchDataError(f"LAUNCH[{k!r}] should be an int or a tuple of ints; got {v!r}")
    return out


def check_cfg_values(cfg: dict) -> str:
    """'' when every value is a positive int or a tuple of positive ints."""
    for k, v in cfg.items():
        vals = v if isinstance(v, tuple) else (v,)
        if not all(isinstance(x, int) and x > 0 for x in vals) or not vals:
            return f"{k!r} should be a positive int or a tuple of them; got {v!r}"
    return ""


def merge_launch(ex: Exercise, student: dict | None) -> dict:
    """The exercise's defaults overridden by the student's values; unknown keys are errors."""
    cfg = dict(ex.launch_defaults)
    if not student:
        return cfg
    student = sanitize(student)
    for k in student:
        if k not in cfg:
            known = ", ".join(cfg) or "none"
            raise LaunchDataError(f"LAUNCH has {k!r}, which {ex.name} does not use (it takes: {known})."
                                  + did_you_mean(k, list(cfg)))
    problem = check_pipeline_cfg(ex, {**cfg, **student}) or check_cfg_values(student)
    if problem:
        raise LaunchDataError(f"LAUNCH: {problem}")
    cfg.update(student)
    return cfg


def check_pipeline_cfg(ex: Exercise, cfg: dict) -> str:
    """'' when the pipeline keys of ``cfg`` (streams, chunks, block) are within the exercise's limits."""
    pl = ex.pipeline
    if pl is None:
        return ""
    for key, top in (("streams", pl.max_streams), ("chunks", pl.max_chunks)):
        v = cfg.get(key)
        if type(v) is not int or not 1 <= v <= top:
            return (f"{key!r} is {v!r}, but the {ex.name} pipeline takes 1 to {top} {key} (one int); "
                    f"for example \"{key}\": {min(top, 4 if key == 'streams' else 16)}.")
    if type(cfg.get("block")) is not int:
        return f"'block' is {cfg.get('block')!r}; the pipeline launches 1D blocks, so give one int such as 256."
    return ""


def reference_launch(ex: Exercise) -> dict:
    """The reference kernel's launch data: its own ``// LAUNCH`` line if it has one, else the defaults."""
    from .spec import reference_source
    return merge_launch(ex, launch_from_source(reference_source(ex)))
