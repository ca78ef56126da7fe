# expect: status=failed points=0 reason~="'produced', which is never recorded"
# A wait for an event nobody records: cudaStreamWaitEvent on it would not wait at all. Refused as malformed.
{
    "streams": 2,
    "chunks": 16,
    "stream": {"h2d": [0, 1], "produce": [0, 1], "consume": [0, 1], "d2h": [0, 1]},
    "wait": {"consume": ["produced[c-1]"]},
}
