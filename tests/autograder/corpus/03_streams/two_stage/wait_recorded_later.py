# expect: status=failed points=0 reason~="recorded after d2h"
# consume waits for this chunk's event recorded after d2h, which the host issues after the wait: the wait
# would see the event's earlier state. Refused as malformed.
{
    "streams": 2,
    "chunks": 16,
    "stream": {"h2d": [0, 1], "produce": [0, 1], "consume": [0, 1], "d2h": [0, 1]},
    "record": {"done": "d2h"},
    "wait": {"consume": ["done"]},
}
