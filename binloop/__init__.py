"""binloop: detect an agent fleet's recurring tool failures and build micro-tools for them.

The core package, by layer (imports go one way, from the bottom up; enforced by
import-linter, contracts in ``pyproject.toml``):

- ``binloop.core``: the telemetry record and its semantics: schema, windows, detection,
  BINEvents, redaction, the job configuration, names.
- ``binloop.library``: the tool-library contract (the manifest), shared by the builder, the
  agent and ``binloop status``.
- ``binloop.replay``: reading telemetry files and writing the in-process engines' outputs.
- ``binloop.nats``: NATS and JetStream: subjects, streams, consumers, publishing, the server.
- ``binloop.engines``: the reference engine (the executable spec) and the polars engine.
- ``binloop.ops``: running the live job: clusters, recovery stores, metrics, status.
- ``binloop.sim``: the telemetry simulator and θ sweeps.
- ``binloop.cli``, ``binloop.agent``, ``binloop.demo``: entry points (composition roots).

Beside it, at the top level: ``flows`` (Bytewax dataflows and sources), ``sinks`` (Bytewax
sinks), ``pipeline_runner`` (the BIN build pipeline) and ``benchmarks``.
"""

__version__ = "0.2.0"
