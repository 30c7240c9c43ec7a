"""Bytewax dataflows of binloop and their sources."""
