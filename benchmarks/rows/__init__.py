"""One module per chapter (NN_topic.py), each exposing ``rows(ctx) -> list[Row]``."""
