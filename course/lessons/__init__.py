"""Helpers that belong to one lesson each (``ch01`` for chapter 01 and so on).

They hold what a notebook would otherwise define in its cells: plots of index arithmetic, timing
demonstrations, transfer sweeps, the stream timeline. Importing a module touches no GPU.
"""
