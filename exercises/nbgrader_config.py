"""nbgrader configuration of the course; run nbgrader commands from this folder (exercises/).

Kernel exercises are graded by the course's own grader (autograder/), outside the student's notebook
process and before any of its cells run: `autograder.nbgrader_plugin.GradeKernels` reads each hidden test
cell's `autograder.nbgrader_points("NN_topic", "EXERCISE")` call from the gradebook, grades the submitted
`%%cuda --name EXERCISE` cell in the grader's isolated children, and `WriteKernelPoints` writes the points
into the test cell after the notebook ran, whatever its Python did. The notebook itself runs in a
Landlock sandbox (`autograder.kernel_sandbox`): it can write only its own autograded folder and a private
temp folder. See docs/INSTRUCTOR.md, "What the grader trusts".
"""
c = get_config()  # noqa: F821 - nbgrader provides get_config when it loads this file

c.CourseDirectory.course_id = "cuda-course"

# Solution regions sit inside %%cuda cells, i.e. in CUDA C++: the stub must be a C++ comment (a Python
# `raise NotImplementedError()` would not compile). So: no solution regions in Python cells.
c.ClearSolutions.code_stub = {"python": "// YOUR CODE HERE"}
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"

# nbgrader's own pipelines, with the course grader's two steps and the sandboxed Execute. Ordering rules:
# GradeKernels comes after OverwriteCells (test cells restored from the gradebook) and runs before any
# student code; WriteKernelPoints comes right after Execute (it overwrites the test cells' outputs) and
# before ClearMetadataPreprocessor and SaveAutoGrades (which reads the points it wrote).
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "autograder.nbgrader_plugin.DeduplicateIds",  # nbgrader's, made safe for a duplicated test cell
    "nbgrader.preprocessors.OverwriteKernelspec",
    "autograder.nbgrader_plugin.OverwriteCells",  # nbgrader's, without a false warning per test cell
    "nbgrader.preprocessors.CheckCellMetadata",
    "autograder.nbgrader_plugin.GradeKernels",
]
c.Autograde.autograde_preprocessors = [
    "autograder.kernel_sandbox.SandboxedExecute",
    "autograder.nbgrader_plugin.WriteKernelPoints",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# nbgrader's release pipeline, with the course's ClearSolutions (a Triton cell's stub stays Python)
c.GenerateAssignment.preprocessors = [
    "nbgrader.preprocessors.IncludeHeaderFooter",
    "nbgrader.preprocessors.InstantiateTests",
    "nbgrader.preprocessors.LockCells",
    "autograder.nbgrader_plugin.ClearSolutions",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.CheckCellMetadata",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.SaveCells",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbgrader.preprocessors.ClearMarkScheme",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.CheckCellMetadata",
]
# a deleted test cell comes back (and is graded) instead of silently costing its points
c.OverwriteCells.add_missing_cells = True

# One graded kernel: compile, one fresh process per crash, every test size (one larger than L2), then
# interleaved timing with re-measuring; a hanging kernel alone costs 10 s per size. Leave ample room.
c.Execute.timeout = 1800
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 300
