# expect: status=failed points=0 reason~="literal dict"
# The attack (closed): a list used as a dict key. ast.literal_eval raised TypeError (unhashable), which the
# parser did not catch: a traceback in the notebook and a grader error, graded again on every batch run.
{
    "streams": 2,
    [1]: 2,
}
