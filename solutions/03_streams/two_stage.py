# two_stage: the schedule of h2d -> produce -> consume -> d2h for every chunk c, written as data.
# "stream": each stage's stream, an int or a list that chunk c indexes at c % len(list).
# "record": event name -> the stage of every chunk it is recorded after (each chunk has its own copy).
# "wait": stage -> the events it waits for first: "NAME" is this chunk's, "NAME[c-1]" the previous chunk's.
{
    # BEGIN SOLUTION
    # all four stages of chunk c on stream c % 2: stream order puts h2d before produce before consume
    # before d2h within a chunk. The one read that crosses streams is consume's left neighbour, the last
    # tmp value of chunk c - 1, written by produce on the other stream: record an event after every
    # produce, and let consume wait for the previous chunk's.
    "streams": 2,
    "chunks": 16,
    "stream": {"h2d": [0, 1], "produce": [0, 1], "consume": [0, 1], "d2h": [0, 1]},
    "record": {"produced": "produce"},
    "wait": {"consume": ["produced[c-1]"]},
    # END SOLUTION
}
