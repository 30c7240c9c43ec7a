"""Replaying telemetry files: readers, the parse step's chunking, and the engines' outputs.

- ``readers``: JSONL, JSONL.gz and Parquet files, directories of them, and stdin, as raw chunks.
- ``strided``: one plain file shared by n readers that seek straight to their own blocks.
- ``formats``, ``hanzo``, ``otlp``: the ``--input-format`` registry and its mappers.
- ``ingest``: raw chunks to valid records and dead letters (shared by every engine).
- ``jsonl``: append-only, crash-safe, idempotent JSONL files.
- ``engine_outputs``: where an in-process engine writes events, dead letters and late records.
"""
