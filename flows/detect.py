"""FRICTION-DETECT as a Bytewax dataflow over replayed telemetry files.

Run it as `python -m bytewax.run flows.detect:flow` (add `-w`, `-i`, `-a`, `-r` as for
any Bytewax flow); it is configured by `BINLOOP_*` variables or `BINLOOP_CONFIG`
(see `binloop.core.config`). `binloop detect --engine bytewax` does this for you.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import bytewax.operators as op
from bytewax.dataflow import Dataflow, Stream
from bytewax.inputs import Source

from binloop.core.config import Config, load_config
from binloop.core.detection import DetectorStats
from binloop.core.events import BINEvent, dumps_event
from binloop.core.logs import json_line
from binloop.core.redact import redact_dead_letter
from binloop.core.schema import DeadLetter, ToolInvocation
from binloop.ops.memory_tuning import tune_for_dataflow
from binloop.replay.engine_outputs import dumps_dead, dumps_late, late_letter, same_configuration
from binloop.replay.jsonl import event_key
from binloop.replay.readers import RawChunk
from flows.file_source import TelemetryFileSource
from flows.operators import (
    DetectOut,
    IngestStats,
    Seed,
    ShardInput,
    detect_friction,
    parse_telemetry,
)
from flows.placement import placed_shard_names
from sinks.jsonl_file import JsonlFileSink
from sinks.stdout import StdOutLinesSink
from sinks.summary import OnSummary, SummarySink


def add_detector(
    chunks: Stream[RawChunk],
    config: Config,
    controls: op.KeyedStream[ShardInput] | None = None,
    on_summary: OnSummary | None = None,
    rejects: Stream[DeadLetter] | None = None,
    seed: Seed | None = None,
    on_counters: Callable[[IngestStats | DetectorStats], None] | None = None,
    spread: bool = True,
) -> Stream[BINEvent]:
    """Parse, detect, and write rejects, lates and counters; returns the event stream.

    `rejects` are inputs a source could not even split into records (e.g. a NATS
    message with an unknown envelope); they are dead-lettered and counted as invalid.
    `on_counters` sees every counter item on the worker that produced it (metrics).
    `spread`: hand the chunks round the workers to decode (not needed when each
    worker's source partition reads its own share).
    """
    params = config.detection()
    names = None
    if config.placed_shards:
        if controls is not None:  # controls are routed to the shards' numbers
            raise ValueError("placed shards take no build controls")
        names = placed_shard_names(config.workers * config.processes)
        config = config.replace(shards=len(names))
    parsed = parse_telemetry("parse", chunks, params, config.record_limits(),
                             config.shard_count(), spread, names)
    shard_inputs: op.KeyedStream[Any] = parsed.oks
    if controls is not None:
        shard_inputs = op.merge("with_controls", parsed.oks, controls)
    detected: DetectOut = detect_friction("detect", shard_inputs, params,
                                          config.shard_count(), seed, config.record_limits())
    dead, stats = parsed.errs, parsed.stats
    if rejects is not None:
        dead = op.merge("with_source_rejects", dead, rejects)
        stats = op.merge("with_reject_stats", stats,
                         op.map("count_rejects", rejects, lambda _: IngestStats(1, 0, 1)))
    _write_rejects(dead, detected.late, config)
    counters = op.merge("counters", stats, detected.stats)
    if on_counters is not None:
        count = on_counters
        op.inspect("count_metrics", counters, lambda _step, item: count(item))
    op.output("summary", op.key_on("summary_key", counters, lambda _: "summary"),
              SummarySink(config.summary_out, on_summary))
    return detected.events


def write_events(events: Stream[BINEvent], config: Config) -> None:
    """BINEvents to `config.out` (idempotent on event_id) or stdout."""
    if not config.out:
        lines = op.map("encode_events", events, lambda e: (e["event_id"], dumps_event(e)))
        op.output("events_out", lines, StdOutLinesSink())
        return
    # The file sink is handed each line's event_id rather than reading it from the line.
    keyed = op.map("encode_events", events,
                   lambda e: (e["event_id"], (e["event_id"], dumps_event(e))))
    check = same_configuration(config.out, config.detection().describe())
    op.output("events_out", keyed, JsonlFileSink(config.out, event_key, mkdirs=config.mkdirs,
                                                 check_line=check,
                                                 defer_errors=in_process(config), keyed=True))


def _write_rejects(dead: Stream[DeadLetter], late: Stream[ToolInvocation], config: Config) -> None:
    if config.late_out:
        late_lines = op.map("encode_late", late, lambda r: (r["id"], dumps_late(r)))
        op.output("late_out", late_lines, JsonlFileSink(config.late_out, mkdirs=config.mkdirs,
                                                           defer_errors=in_process(config)))
    else:
        dead = op.merge("dead_and_late", dead, op.map("late_as_dead", late, late_letter))
    if config.dead_letter:
        lines = op.map("encode_dead", dead, lambda d: ("dead", dumps_dead(d)))
        op.output("dead_letter_out", lines, JsonlFileSink(config.dead_letter, mkdirs=config.mkdirs,
                                                                defer_errors=in_process(config)))
    else:
        encode = _dead_log_line if config.log_format == "json" else _dead_text_line
        lines = op.map("encode_dead", dead, lambda d: ("dead", encode(d)))
        op.output("dead_letter_out", lines, StdOutLinesSink(stderr=True))


def in_process(config: Config) -> bool:
    """Whether the replay runs in the caller's process (which reports deferred errors)."""
    return config.processes == 1


def _dead_text_line(letter: DeadLetter) -> bytes:
    return b"dead-letter: " + dumps_dead(letter)


def _dead_log_line(letter: DeadLetter) -> bytes:
    """A dead letter on stderr as a JSON log line (`--log-format json`)."""
    return json_line("binloop.dead_letter", "dead letter", "warning",
                     dead_letter=redact_dead_letter(letter).to_json())


def build_flow(config: Config, source: Source[RawChunk] | None = None,
               on_summary: OnSummary | None = None) -> Dataflow:
    """The replay dataflow: `config.input` (or `source`) to events, rejects and counters
    (to `config.summary_out`, and to `on_summary` in the process that sums them)."""
    if source is None:
        if not config.input:
            raise ValueError("no input: set --input / BINLOOP_INPUT")
        source = TelemetryFileSource(config.input, config.batch_size, config.progress,
                                     config.input_format, config.read_options(),
                                     readers=config.workers * config.processes)
    flow = Dataflow("binloop_detect")
    chunks = op.input("telemetry", flow, source)
    spread = not (isinstance(source, TelemetryFileSource) and source.decoded_where_read)
    write_events(add_detector(chunks, config, on_summary=on_summary, spread=spread), config)
    return flow


def __getattr__(name: str) -> Any:
    # `python -m bytewax.run flows.detect:flow` builds the flow from the environment.
    if name == "flow":
        flow = build_flow(load_config())
        tune_for_dataflow()
        return flow
    raise AttributeError(name)
