"""nbgrader configuration of the course; run nbgrader commands from this folder (exercises/).

Kernel exercises are graded by the course's own grader (autograder/): a hidden test cell calls
`autograder.nbgrader_points("NN_topic", "EXERCISE")`, which grades the student's `%%cuda --name EXERCISE`
cell in separate processes and returns the points as the cell's value (nbgrader's partial credit).
"""
c = get_config()  # noqa: F821 - nbgrader provides get_config when it loads this file

c.CourseDirectory.course_id = "cuda-course"

# Solution regions sit inside %%cuda cells, i.e. in CUDA C++: the stub must be a C++ comment (a Python
# `raise NotImplementedError()` would not compile). So: no solution regions in Python cells.
c.ClearSolutions.code_stub = {"python": "// YOUR CODE HERE"}
c.ClearSolutions.begin_solution_delimeter = "BEGIN SOLUTION"
c.ClearSolutions.end_solution_delimeter = "END SOLUTION"

# One graded kernel: compile, one fresh process per crash, every test size (one larger than L2), then
# interleaved timing with re-measuring; a hanging kernel alone costs 10 s per size. Leave ample room.
c.Execute.timeout = 1800
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 300
