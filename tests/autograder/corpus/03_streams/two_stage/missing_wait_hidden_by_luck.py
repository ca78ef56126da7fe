# expect: status=failed points=0 reason~="consume of chunk 1 reads the last tmp value of the previous chunk.*nothing makes it wait"
# The attack: chunk c on stream c % 2 and no event. consume of chunk c reads the previous chunk's last tmp,
# written on the other stream; in a plain run that produce finished long before (chunk c's copy-in takes
# longer), so the output comes out right nearly every time. Only the order analysis, and the run with that
# produce held back, show the race.
{
    "streams": 2,
    "chunks": 16,
    "stream": {"h2d": [0, 1], "produce": [0, 1], "consume": [0, 1], "d2h": [0, 1]},
}
