"""The polars engine: FRICTION-DETECT over a replay, vectorised, a block at a time.

``engine`` runs it (and serves sweeps); ``read`` validates blocks of lines into frames of
valid records and dead letters; ``detect`` applies the detection semantics to them,
carrying its state from one block to the next.
"""
