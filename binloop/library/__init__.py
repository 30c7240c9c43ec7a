"""The tool library's contract: what the builder writes and the agent and ``binloop status`` read.

- ``manifest``: the ``manifest.json`` format and pure functions that change it.
- ``store``: the library on disk: staging, atomic publication, audit records.
- ``status``: a read-only view of a library for ``binloop status``.
"""
