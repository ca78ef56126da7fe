# expect: status=failed points=0 reason~="produce of chunk 0 reads the chunk of d_in that h2d copies in"
# Copies on stream 0, kernels on stream 1, and no event between them: produce may read its chunk before the
# copy-in lands, and d2h copy out before consume wrote. Both reads are named.
{
    "streams": 2,
    "chunks": 8,
    "stream": {"h2d": 0, "produce": 1, "consume": 1, "d2h": 0},
}
