"""nbgrader configuration for JupyterLab started from the repository root (tools/bootstrap.py lab).

The course directory is exercises/; this file points the formgrader and the other nbgrader panels
there and loads that directory's configuration, so the lab and the command line agree. Command-line
nbgrader runs from exercises/ and reads exercises/nbgrader_config.py directly.
"""
import os

c = get_config()  # noqa: F821 - nbgrader provides get_config when it loads this file
load_subconfig("exercises/nbgrader_config.py")  # noqa: F821 - resolved next to this file
c.CourseDirectory.root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "exercises")
