"""The record and its semantics: what every engine, source and sink agrees on.

- ``schema``: the telemetry record (ToolInvocation): parsing and validation, dead letters.
- ``block_parse``: a block of lines validated in one C-level decoder call, agreeing with it.
- ``classify``: failure modes from error texts (the one versioned classifier).
- ``window``: window specifications (``session``, ``global``, ``sliding:<d>``).
- ``detection``: FRICTION-DETECT, the detection semantics (written once).
- ``events``: the BINEvent and its ``event_id``.
- ``shard_snapshot``, ``shard_wire``: a state shard's snapshot, and its records between processes.
- ``redact``: the one redactor, applied before evidence leaves the process.
- ``config``, ``reading``, ``input_formats``: the job's one configuration object (each setting
  declared once), the reader's settings, the input format names.
- ``summary``: run counters and the end-of-run summary.
- ``names``, ``display``: the one slug from names to identifiers and paths; names as shown.
- ``errors``: one-line errors and their exit codes.
- ``fsutil``: crash-safe file operations.
- ``logs``: the one logging setup of every command.

Nothing here imports another binloop layer.
"""
