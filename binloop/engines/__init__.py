"""Detection engines that run in one process.

- ``reference``: the plain-Python reference engine: the readable, executable spec.
- ``polars``: the vectorised engine for fast replays and sweeps.

The Bytewax dataflows live in the top-level ``flows`` package.
"""
