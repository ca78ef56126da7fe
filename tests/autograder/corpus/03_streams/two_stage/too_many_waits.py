# expect: status=failed points=0 reason~="at most 8"
# The same attack inside the size cap: consume waits for nine events (each one a cudaStreamWaitEvent per
# chunk per run). A stage may wait for at most 8, so it is refused before any grading child starts.
{
    "streams": 2,
    "chunks": 16,
    "stream": {"h2d": [0, 1], "produce": [0, 1], "consume": [0, 1], "d2h": [0, 1]},
    "record": {"produced": "produce"},
    "wait": {"consume": ["produced[c-1]", "produced[c-2]", "produced[c-3]", "produced[c-4]", "produced[c-5]", "produced[c-6]", "produced[c-7]", "produced[c-8]", "produced[c-9]"]},
}
