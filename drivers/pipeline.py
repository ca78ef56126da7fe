"""The grader's driver for chapter 03's stream pipeline (being moved here from the lesson module)."""
from course.lessons.ch03 import pipeline_report

__all__ = ["pipeline_report"]
