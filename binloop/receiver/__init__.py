"""Receivers that take telemetry in as other systems send it.

- ``otlp_http``: an OTLP/HTTP receiver (``POST /v1/traces``) whose GenAI ``execute_tool``
  spans become telemetry records (mapping in ``binloop.replay.otlp``).
- ``sinks``: where the receiver stores what it accepted: a JSONL file or the telemetry stream.
"""
