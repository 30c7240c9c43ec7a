"""The record and its semantics: what every engine, source and sink agrees on.

- ``schema``: the telemetry record (ToolInvocation): parsing and validation, dead letters.
- ``window``: window specifications (``session``, ``global``, ``sliding:<d>``).
- ``detection``: FRICTION-DETECT, the detection semantics (written once).
- ``events``: the BINEvent and its ``event_id``.
- ``redact``: the one redactor, applied before evidence leaves the process.
- ``config``: the job's one configuration object (each setting declared once).
- ``summary``: run counters and the end-of-run summary.
- ``names``: the one slug from names to identifiers and paths.
- ``fsutil``: crash-safe file operations.
- ``logs``: the one logging setup of every command.

Nothing here imports another binloop layer.
"""
