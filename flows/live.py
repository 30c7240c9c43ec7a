"""The live job: FRICTION-DETECT on a NATS JetStream telemetry stream.

Telemetry comes from `flows.nats_source` (stream `TELEMETRY`, partitioned by tool);
BINEvents go to the JetStream stream `BIN_EVENTS` on `bin.events.{tool}.{failure_mode}`
(`sinks.nats_events`, idempotent on `event_id`) and optionally to a JSONL file.

Run it with `binloop run --nats URL --no-build`, or as
`python -m bytewax.run flows.live:flow` (configured by `BINLOOP_*` variables or
`BINLOOP_CONFIG`, see `binloop.core.config`); add `-r DIR -s SECS -b SECS` for recovery.

Hooks for the build runner: `build_flow(config, controls=..., on_events=...)` takes a
factory of the keyed `Rearm`/`Disarm` command stream (routed by
`flows.operators.shard_of`) and a callback that receives the BINEvent stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import bytewax.operators as op
from bytewax.dataflow import Dataflow, Stream
from bytewax.inputs import Source

from binloop.core.config import Config, load_config
from binloop.core.events import BINEvent, dumps_event
from binloop.core.logs import configure_logging
from binloop.core.schema import DeadLetter
from binloop.nats.jetstream import StreamSpec, telemetry_stream_spec
from binloop.ops.memory_tuning import tune_for_dataflow
from binloop.ops.metrics import record_counters
from binloop.ops.shutdown import install_stop_handlers, stop_requested
from binloop.replay.engine_outputs import same_configuration
from binloop.replay.jsonl import event_key
from binloop.replay.readers import RawChunk
from flows.detect import add_detector
from flows.nats_source import NatsSourceSettings, NatsTelemetrySource, SourceItem
from flows.operators import Seed, ShardInput
from sinks.jsonl_file import JsonlFileSink
from sinks.nats_events import NatsEventSettings, NatsEventSink
from sinks.summary import OnSummary

ControlsFactory = Callable[[Dataflow], op.KeyedStream[ShardInput]]
OnEvents = Callable[[Stream[BINEvent]], None]


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def _stream_limits(config: Config) -> dict[str, Any]:
    return {"max_age_s": _seconds(config.stream_max_age), "max_bytes": config.stream_max_bytes,
            "replicas": config.stream_replicas, "storage": config.stream_storage}


def source_settings(config: Config) -> NatsSourceSettings:
    if not config.nats:
        raise ValueError("no NATS server: set --nats URL / BINLOOP_NATS")
    stream = telemetry_stream_spec(config.stream, config.subject_prefix, config.partitions,
                                   duplicate_window_s=config.duplicate_window / 1000,
                                   **_stream_limits(config))
    return NatsSourceSettings(
        url=config.nats, stream=stream, batch_size=config.batch_size, start=config.start,
        until_idle_s=_seconds(config.until_idle), poll_s=config.source_poll / 1000,
        connect_timeout_s=config.connect_timeout / 1000, manage_stream=config.manage_stream,
        client=config.nats_client)


def event_settings(config: Config) -> NatsEventSettings:
    if not config.nats:
        raise ValueError("no NATS server: set --nats URL / BINLOOP_NATS")
    stream = StreamSpec(config.events_stream, (f"{config.events_subject_prefix}.>",),
                        duplicate_window_s=config.events_duplicate_window / 1000,
                        **_stream_limits(config))
    return NatsEventSettings(config.nats, stream, config.events_subject_prefix,
                             connect_timeout_s=config.connect_timeout / 1000,
                             manage_stream=config.manage_stream)


def write_live_events(events: Stream[BINEvent], config: Config) -> None:
    """BINEvents to JetStream, and to `config.events_out` when set."""
    op.output("events_nats", events, NatsEventSink(event_settings(config), stop_requested))
    if config.events_out:
        lines = op.map("encode_events", events, lambda e: (e["event_id"], dumps_event(e)))
        check = same_configuration(config.events_out, config.detection().describe())
        op.output("events_file", lines, JsonlFileSink(config.events_out, event_key,
                                                      mkdirs=config.mkdirs, check_line=check))


def build_flow(config: Config, *, source: Source[SourceItem] | None = None,
               controls: ControlsFactory | None = None,
               on_events: OnEvents | None = None,
               on_summary: OnSummary | None = None, seed: Seed | None = None) -> Dataflow:
    """The live dataflow: NATS telemetry to BINEvents on NATS (and a file).
    `on_summary` is called with the running counters as they change; `seed` keys start
    disarmed when there is no recovery state."""
    flow = Dataflow("binloop_live")
    items = op.input("telemetry", flow, source or NatsTelemetrySource(source_settings(config)))
    split = op.branch("split_rejects", items, lambda x: isinstance(x, RawChunk))
    chunks = cast(Stream[RawChunk], split.trues)
    rejects = cast(Stream[DeadLetter], split.falses)
    # Each worker reads its own partitions; hand chunks round only when some worker
    # would have none to decode (moving raw telemetry between processes costs more
    # than decoding it).
    spread = config.partitions < config.workers * config.processes
    events = add_detector(chunks, config, controls(flow) if controls else None,
                          on_summary, rejects=rejects, seed=seed,
                          on_counters=record_counters, spread=spread)
    write_live_events(events, config)
    if on_events is not None:
        on_events(events)
    return flow


def __getattr__(name: str) -> Any:
    # `python -m bytewax.run flows.live:flow` builds the flow from the environment.
    if name == "flow":
        configure_logging(load_config())
        install_stop_handlers()
        flow = build_flow(load_config())
        tune_for_dataflow()
        return flow
    raise AttributeError(name)
