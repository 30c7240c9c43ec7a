"""The polars engine: FRICTION-DETECT over a whole replay at once, with expressions.

``engine`` runs it; ``load`` reads files into a frame of valid records; ``detect`` applies the
detection semantics to the frame (``windows`` and ``clock`` are its parts).
"""
