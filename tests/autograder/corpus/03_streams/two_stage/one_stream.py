# expect: status=slow points=4 reason~="more than one stream"
# Everything on one stream: stream order makes it right, and nothing overlaps: correctness points only.
{
    "streams": 1,
    "chunks": 16,
    "stream": {"h2d": 0, "produce": 0, "consume": 0, "d2h": 0},
}
