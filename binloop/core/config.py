"""The job's one configuration object.

Every setting is declared once below, with its type, default, help text and the
commands it applies to. A value comes from, in increasing precedence: the default,
a TOML file (`--config FILE` or `BINLOOP_CONFIG`), an environment variable
`BINLOOP_<NAME>` and a command-line flag `--<name>`. `binloop config --markdown`
renders the table of the docs from these declarations.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from binloop.core.classify import FAILURE_MODE_SETTINGS, GIVEN_ELSE_INFER, digest_fields
from binloop.core.detection import DetectionParams, config_digest
from binloop.core.errors import InputError
from binloop.core.input_formats import parse_format
from binloop.core.reading import ReadOptions
from binloop.core.schema import LINE_MAX_BYTES, OUTCOMES, TAXONOMY, TS_UNITS, RecordLimits
from binloop.core.window import WindowSpec, format_duration_ms, parse_duration_ms

ENV_PREFIX = "BINLOOP_"
# The detection and validation defaults are the domain objects' own (declared once there).
_DETECTION = DetectionParams()
_LIMITS = RecordLimits()
# Each chunk of telemetry sends one item to every state shard (so that a shard can put
# a partition's chunks back in order): fewer shards, less work per chunk. 16 spreads
# detection over up to 16 workers; earlier versions used 64.
DEFAULT_SHARDS = 16


class ConfigError(ValueError):
    """A setting has an invalid value; the message names the setting and its source."""


# The largest integer setting: what the config digest (JSON), the engines' int64 columns
# and the events take. A larger one is a usage error, not an internal one.
MAX_INT_SETTING: Final = (1 << 63) - 1


def _bounded_int(text: str) -> int:
    value = int(text)
    if value > MAX_INT_SETTING:
        raise ValueError(f"{value} is larger than {MAX_INT_SETTING} (2^63-1)")
    return value


def positive_int(text: str) -> int:
    value = _bounded_int(text)
    if value < 1:
        raise ValueError(f"{value} is not >= 1")
    return value


def non_negative_int(text: str) -> int:
    value = _bounded_int(text)
    if value < 0:
        raise ValueError(f"{value} is not >= 0")
    return value


def optional_positive_int(text: str) -> int | None:
    return None if text.strip().lower() in ("", "none", "0", "all") else positive_int(text)


def optional_duration_ms(text: str) -> int | None:
    return None if text.strip().lower() in ("", "none", "off") else parse_duration_ms(text)


def seconds_or_duration_ms(text: str) -> int:
    """`"5"` or `"2.5"` (seconds) or a duration string (`"500ms"`, `"1m"`)."""
    try:
        seconds = float(text)
    except ValueError:
        return parse_duration_ms(text)
    if seconds <= 0:
        raise ValueError(f"{text!r} must be > 0 seconds")
    return max(1, round(seconds * 1000))


def optional_seconds_or_duration_ms(text: str) -> int | None:
    """Unset (`off`), zero, or `seconds_or_duration_ms`."""
    lowered = text.strip().lower()
    if lowered in ("", "none", "off"):
        return None
    return 0 if re.fullmatch(r"0+(\.0*)?(ms|s|m|h|d)?", lowered) else seconds_or_duration_ms(text)


def optional_positive_bytes(text: str) -> int | None:
    return optional_positive_int(text)


def non_negative_duration_ms(text: str) -> int:
    # Any zero (`0`, `0s`, `0d`: `format_duration_ms(0)` gives `0d`) is zero.
    return 0 if re.fullmatch(r"0+(ms|s|m|h|d)?", text.strip().lower()) else parse_duration_ms(text)


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{text!r} is not a boolean")


def parse_outcomes(text: str) -> frozenset[str]:
    values = frozenset(v.strip().lower() for v in text.split(",") if v.strip())
    if not values or not values <= OUTCOMES:
        raise ValueError(f"{text!r}: give a comma-separated subset of {sorted(OUTCOMES)}")
    return values


def parse_codes(text: str) -> frozenset[str]:
    return frozenset(v.strip().upper() for v in text.split(",") if v.strip())


# Each shard holds its own state from the start (65536 take ~200 MB): a bound, so that a
# typo is a usage error and not the machine's memory.
MAX_SHARDS: Final = 1 << 16


def parse_shards(text: str) -> int | None:
    if text.strip().lower() in ("", "auto"):
        return None
    value = positive_int(text)
    if value > MAX_SHARDS:
        raise ValueError(f"{value} is more than {MAX_SHARDS} shards")
    return value


def _show_shards(value: Any) -> str:
    return "auto" if value is None else str(value)


def optional_text(text: str) -> str | None:
    return text or None


def optional_non_negative_int(text: str) -> int | None:
    return None if text.strip().lower() in ("", "none") else non_negative_int(text)


def name_token(text: str) -> str:
    """A name usable as a NATS subject token and KV key part: `[A-Za-z0-9_-]+`."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise ValueError(f"{text!r} must be letters, digits, '_' or '-'")
    return text


def parse_log_level(text: str) -> str:
    return _choice(text.strip().lower(), ("debug", "info", "warning", "error"))


def _show(value: Any) -> str:
    if isinstance(value, frozenset):
        return ",".join(sorted(value))
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _show_duration(value: Any) -> str:
    return "" if value is None else format_duration_ms(value)


def setting(
    default: Any,
    help: str,
    *,
    groups: tuple[str, ...],
    parse: Callable[[str], Any] = str,
    show: Callable[[Any], str] = _show,
    metavar: str | None = None,
    flag: bool = True,
    digest: bool | Callable[[Any], Any] = False,
) -> Any:
    """Declare a setting: a dataclass field carrying how to parse, show and expose it.

    `digest`: the setting can change an event, so it is part of the detection
    configuration digest (and so of every `event_id`). True digests the shown value; a
    function gives what to digest instead (e.g. the value and the version of the code
    that interprets it: `digest=lambda mode: [mode, CLASSIFIER_VERSION]`).
    """
    meta = {"help": help, "groups": groups, "parse": parse, "show": show, "metavar": metavar,
            "flag": flag, "digest": digest}
    return field(default=default, metadata=meta)


DETECT = ("detect", "run", "sweep", "flow")
RUN = ("run", "flow")
BUILD = ("build", "run", "runner")
TOOLS = ("tools", "run", "runner")
NATS = ("run", "flow", "publish", "runner")
RUN_RUNNER = (*RUN, "runner")
# Flags every command takes (added by binloop.cli); `status` reads what `run` publishes.
LOGGING = ("logging",)
STATUS = ("run", "flow", "status")


# Settings that are detection parameters (`binloop.core.detection.DetectionParams`),
# by the parameter's name; the other settings declared with `digest=` reach the
# parameters as their `context_digest`.
DETECTION_PARAMS: Final = {
    "theta": "theta", "window": "window", "count_outcomes": "count_outcomes",
    "mode_level": "mode_level", "evidence_max": "evidence_max",
    "session_gap": "session_gap_ms", "allowed_lateness": "allowed_lateness_ms",
    "dedup_max": "dedup_max",
}


@dataclass(frozen=True)
class Config:
    """All settings of binloop. Attribute names are the TOML keys."""

    # Detection semantics (see binloop.core.detection).
    theta: int = setting(_DETECTION.theta,
                         "failures of one (tool, failure_mode) that fire a BINEvent",
                         groups=DETECT, parse=positive_int, metavar="N", digest=True)
    window: WindowSpec = setting(_DETECTION.window,
                                 "session | global | sliding:<duration> (event time)",
                                 groups=DETECT, parse=WindowSpec.parse, metavar="KIND",
                                 digest=True)
    count_outcomes: frozenset[str] = setting(_DETECTION.count_outcomes,
                                             "outcomes that count as failures",
                                             groups=DETECT, parse=parse_outcomes, metavar="LIST",
                                             digest=True)
    mode_level: int | None = setting(_DETECTION.mode_level,
                                     "cut failure_mode to its first N levels (unset: all)",
                                     groups=DETECT, parse=optional_positive_int, metavar="N",
                                     digest=True)
    evidence_max: int = setting(_DETECTION.evidence_max,
                                "records of evidence carried by an event",
                                groups=DETECT, parse=positive_int, metavar="N", digest=True)
    session_gap: int = setting(_DETECTION.session_gap_ms,
                               "a session slice ends this long after its newest ts",
                               groups=DETECT, parse=parse_duration_ms, show=_show_duration,
                               metavar="DUR", digest=True)
    allowed_lateness: int = setting(_DETECTION.allowed_lateness_ms,
                                    "a counted record more than this behind the newest ts of "
                                    "its own key is counted as beyond_lateness (a data-quality "
                                    "counter; no event depends on it)",
                                    groups=DETECT, parse=non_negative_duration_ms,
                                    show=_show_duration, metavar="DUR", digest=True)
    dedup_max: int = setting(_DETECTION.dedup_max,
                             "recent record ids remembered per key to drop duplicates",
                             groups=DETECT, parse=non_negative_int, metavar="N", digest=True)
    # Record validation.
    args_max_bytes: int = setting(_LIMITS.args_max_bytes,
                                  "args larger than this (JSON bytes) are truncated",
                                  groups=DETECT, parse=positive_int, metavar="BYTES",
                                  digest=True)
    max_future_skew: int | None = setting(_LIMITS.max_future_skew_ms,
                                          "reject records whose ts is further in the future "
                                          "('off' to accept any)",
                                          groups=DETECT, parse=optional_duration_ms,
                                          show=_show_duration, metavar="DUR", digest=True)
    extra_failure_codes: frozenset[str] = setting(frozenset(),
                                                  "level-1 failure codes accepted beside the "
                                                  "paper's taxonomy", groups=DETECT,
                                                  parse=parse_codes, metavar="LIST",
                                                  digest=True)
    # Unlike the other validation settings, not RecordLimits' default: plain validation
    # (agents' clients, publish, the receiver) keeps modes as given; the job infers.
    failure_modes: str = setting(GIVEN_ELSE_INFER,
                                 "failure_mode of counted records: given (as recorded; none "
                                 "means not counted) | infer (from the error text, always) | "
                                 "given-else-infer (infer where none is given)",
                                 groups=DETECT,
                                 parse=lambda t: _choice(t.strip().lower(), FAILURE_MODE_SETTINGS),
                                 metavar="HOW", digest=digest_fields)
    ts_unit: str = setting("auto", "unit of ts: ms | s (converted) | auto (a ts below 10^11 is "
                           "seconds and is converted, counted in the summary)", groups=DETECT,
                           parse=lambda t: _choice(t.strip().lower(), TS_UNITS), metavar="UNIT",
                           digest=True)
    max_line_bytes: int = setting(LINE_MAX_BYTES, "a longer input line is skipped as it is "
                                  "read and dead-lettered with its first bytes",
                                  groups=DETECT, parse=positive_int, metavar="BYTES",
                                  digest=True)
    follow_symlinks: bool = setting(False, "read symbolic links found in an input directory "
                                    "(default: skip them)", groups=("detect", "sweep", "flow"),
                                    parse=parse_bool)
    mkdirs: bool = setting(False, "create missing parent directories of output files "
                           "(default: a missing directory is an error)",
                           groups=("detect", "flow", "run"), parse=parse_bool)
    # Engines and files.
    engine: str = setting("bytewax", "bytewax | reference | polars", groups=("detect",),
                          parse=lambda t: _choice(t, ("bytewax", "reference", "polars")))
    input: str | None = setting(None, "JSONL, JSONL.gz or Parquet file, a directory of them, "
                                "or - for stdin", groups=("detect", "flow"),
                                parse=optional_text, metavar="PATH")
    input_format: str = setting("auto", "how the input's lines are written: binloop (the "
                                "record), hanzo (the Hanzo bot's telemetry files), otlp-json "
                                "(the OpenTelemetry Collector's file exporter) or auto (each "
                                "file sniffed by its first line)",
                                groups=("detect", "flow"), parse=parse_format,
                                metavar="FORMAT")
    out: str | None = setting(None, "write BINEvents to this JSONL file (default: stdout)",
                              groups=("detect", "flow"), parse=optional_text, metavar="FILE")
    dead_letter: str | None = setting(None, "write rejected records (raw + reason) to this JSONL",
                                      groups=("detect", "run", "flow"), parse=optional_text,
                                      metavar="FILE")
    late_out: str | None = setting(None, "write late records here (default: the dead-letter "
                                   "output, reason 'late')", groups=("detect", "run", "flow"),
                                   parse=optional_text, metavar="FILE")
    workers: int = setting(1, "Bytewax worker threads per process", groups=("detect", "run"),
                           parse=positive_int, metavar="N")
    processes: int = setting(1, "Bytewax processes (local cluster)", groups=("detect", "run"),
                             parse=positive_int, metavar="N")
    batch_size: int = setting(4096, "records per batch read from a source",
                              groups=("detect", "run", "flow"), parse=positive_int, metavar="N")
    shards: int | None = setting(None, "keyed state shards of the Bytewax flow: N, or auto "
                                 f"({DEFAULT_SHARDS}; one per worker for `binloop detect`; or "
                                 "the count a recovery store was written with); fixed for a "
                                 "recovery store",
                                 groups=("detect", "run", "flow"), parse=parse_shards,
                                 show=_show_shards, metavar="N|auto")
    placed_shards: bool = setting(False, "name the shards, one per worker, so that Bytewax "
                                  "runs each on its own worker (a run with no recovery "
                                  "store: set by `binloop detect`)", groups=("flow",),
                                  parse=parse_bool, flag=False)
    summary_out: str | None = setting(None, "write the run's counters as JSON here (used by the "
                                      "CLI to collect a cluster's summary)", groups=("flow",),
                                      parse=optional_text, metavar="FILE", flag=False)
    progress: bool = setting(True, "print progress on stderr for long inputs",
                             groups=("detect", "flow"), parse=parse_bool)
    # Build runner, tool library, designers and sandbox (pipeline_runner).
    library: str | None = setting(None, "tool library directory (manifest.json, tools/, audit/)",
                                  groups=BUILD + TOOLS, parse=optional_text, metavar="DIR")
    designer: str = setting("offline", "designer: offline | anthropic | openai | module:factory",
                            groups=BUILD, metavar="NAME")
    target: str = setting("python", "generated tool target: python | typescript", groups=BUILD,
                          parse=lambda t: _choice(t, ("python", "typescript")), metavar="NAME")
    control_log: str | None = setting(None, "append pause/reload/resume requests to this JSONL "
                                      "(agent control without NATS)", groups=BUILD,
                                      parse=optional_text, metavar="FILE")
    design_timeout: int = setting(180_000, "time limit of the design stage (and of implement)",
                                  groups=BUILD, parse=parse_duration_ms, show=_show_duration,
                                  metavar="DUR")
    check_timeout: int = setting(180_000, "wall-clock limit of each sandboxed lint/type-check",
                                 groups=BUILD, parse=parse_duration_ms, show=_show_duration,
                                 metavar="DUR")
    test_timeout: int = setting(120_000, "wall-clock limit of the sandboxed acceptance tests",
                                groups=BUILD, parse=parse_duration_ms, show=_show_duration,
                                metavar="DUR")
    pause_timeout: int = setting(10_000, "how long an agent may take to answer pause/resume",
                                 groups=BUILD, parse=parse_duration_ms, show=_show_duration,
                                 metavar="DUR")
    sandbox_memory_mb: int = setting(4096, "address-space limit of a sandboxed command (node "
                                     "needs >= 2048)", groups=BUILD, parse=positive_int,
                                     metavar="MB")
    sandbox_processes: int = setting(128, "process/thread limit of the sandbox user",
                                     groups=BUILD, parse=positive_int, metavar="N")
    sandbox: str = setting("strict", "strict: generated code runs only in the full sandbox and "
                           "builds fail closed where it cannot be had; unsafe: run it "
                           "unconfined anyway (shown in the audit record and in status)",
                           groups=BUILD + TOOLS, parse=lambda t: _choice(t, ("strict", "unsafe")),
                           metavar="MODE")
    toolchain_dir: str | None = setting(None, "cache of the TypeScript toolchain: node "
                                        "packages (tsc, the plugin SDK) installed on first "
                                        "use; one another user installed is only read "
                                        "(default $XDG_CACHE_HOME or ~/.cache, then "
                                        "binloop/toolchain)", groups=BUILD,
                                        parse=optional_text, metavar="DIR")
    typescript_version: str = setting("5.9.3", "typescript version installed into the cache",
                                      groups=BUILD, metavar="VERSION")
    llm_model: str | None = setting(None, "model of the anthropic/openai designer (default: "
                                    "the designer's own)", groups=BUILD, parse=optional_text,
                                    metavar="MODEL")
    llm_base_url: str | None = setting(None, "base URL of the LLM API (e.g. a local "
                                       "OpenAI-compatible server)", groups=BUILD,
                                       parse=optional_text, metavar="URL")
    llm_timeout: int = setting(120_000, "timeout of one LLM request", groups=BUILD,
                               parse=parse_duration_ms, show=_show_duration, metavar="DUR")
    llm_retries: int = setting(2, "retries of a failed or invalid LLM answer", groups=BUILD,
                               parse=non_negative_int, metavar="N")
    llm_max_tokens: int = setting(8192, "output token limit of one LLM answer", groups=BUILD,
                                  parse=positive_int, metavar="N")
    build_workers: int = setting(1, "builds run at the same time (worker threads)",
                                 groups=BUILD, parse=positive_int, metavar="N")
    build_queue_max: int = setting(100, "events waiting for a build; more are deferred (their "
                                   "key is re-armed after the back-off)", groups=BUILD,
                                   parse=positive_int, metavar="N")
    build_state_dir: str | None = setting(None, "durable build queue and re-arm schedule "
                                          "(default <library>/.state)", groups=BUILD,
                                          parse=optional_text, metavar="DIR")
    rearm_backoff: int = setting(60_000, "a failed build re-arms its key after this, doubled "
                                 "for each earlier failure of the key", groups=BUILD,
                                 parse=non_negative_duration_ms, show=_show_duration,
                                 metavar="DUR")
    rearm_backoff_max: int = setting(3_600_000, "longest re-arm back-off", groups=BUILD,
                                     parse=non_negative_duration_ms, show=_show_duration,
                                     metavar="DUR")
    builds_stream: str = setting("BIN_BUILDS", "JetStream stream of build results and re-arms "
                                 "(created when missing)", groups=("run", "runner"),
                                 metavar="NAME")
    builds_subject_prefix: str = setting("bin.builds", "build results go to <prefix>.result.*, "
                                         "re-arms to <prefix>.rearm.*, tool statuses to "
                                         "<prefix>.status.*", groups=("run", "runner"),
                                         metavar="PREFIX")
    control_subject_prefix: str = setting("bin.control", "agent control subjects: "
                                          "<prefix>.<session_id>.pause|resume",
                                          groups=("run", "runner"), metavar="PREFIX")
    registry_subject: str = setting("bin.registry.updated", "where a new manifest version is "
                                    "announced", groups=("run", "runner"), metavar="SUBJECT")
    promote_after: int = setting(2, "successful uses that promote a probationary tool to stable",
                                 groups=TOOLS + BUILD, parse=positive_int, metavar="N")
    quarantine_after: int = setting(2, "failed uses that quarantine a probationary tool",
                                    groups=TOOLS + BUILD, parse=positive_int, metavar="N")
    # The live job on NATS JetStream (binloop run, flows.live).
    nats: str | None = setting(None, "NATS server URL(s), comma-separated", groups=NATS,
                               parse=optional_text, metavar="URL")
    connect_timeout: int = setting(30_000, "how long to keep trying to reach NATS at start "
                                   "(later disconnections are retried forever)", groups=NATS,
                                   parse=parse_duration_ms, show=_show_duration, metavar="DUR")
    stream: str = setting("TELEMETRY", "JetStream stream of telemetry (created when missing)",
                          groups=NATS, metavar="NAME")
    subject_prefix: str = setting("telemetry", "telemetry is published on "
                                  "<prefix>.<session_id>.<tool> (escaped tokens)",
                                  groups=NATS, metavar="PREFIX")
    partitions: int = setting(8, "partitions of a new telemetry stream, by tool (an existing "
                              "partitioned stream keeps its own)", groups=NATS,
                              parse=positive_int, metavar="N")
    stream_max_age: int | None = setting(7 * 86_400_000, "a new stream drops messages older "
                                         "than this ('off' to keep them)", groups=NATS,
                                         parse=optional_duration_ms, show=_show_duration,
                                         metavar="DUR")
    stream_max_bytes: int | None = setting(None, "a new stream's size limit in bytes "
                                           "(unset: none)", groups=NATS,
                                           parse=optional_positive_bytes, metavar="BYTES")
    stream_replicas: int = setting(1, "replicas of a new stream (clustered JetStream)",
                                   groups=NATS, parse=positive_int, metavar="N")
    stream_storage: str = setting("file", "storage of a new stream: file | memory", groups=NATS,
                                  parse=lambda t: _choice(t, ("file", "memory")))
    duplicate_window: int = setting(120_000, "a new telemetry stream drops a message whose "
                                    "Nats-Msg-Id it stored this recently", groups=NATS,
                                    parse=parse_duration_ms, show=_show_duration, metavar="DUR")
    publish_deadline: int = setting(60_000, "binloop publish retries a message the stream has "
                                    "not stored (NATS down or restarting) for this long "
                                    "after its first send, then exits 75 naming it (keep it "
                                    "below the duplicate window)", groups=("publish",),
                                    parse=parse_duration_ms, show=_show_duration,
                                    metavar="DUR")
    manage_stream: bool = setting(True, "create missing streams and add the partition "
                                  "transform to an existing telemetry stream",
                                  groups=NATS, parse=parse_bool)
    start: str = setting("all", "where a partition with no recovery state starts: all (the "
                         "stream's first message) | new (its end)", groups=RUN,
                         parse=lambda t: _choice(t, ("all", "new")))
    events_stream: str = setting("BIN_EVENTS", "JetStream stream of BINEvents (created when "
                                 "missing)", groups=RUN_RUNNER, metavar="NAME")
    events_subject_prefix: str = setting("bin.events", "BINEvents are published on "
                                         "<prefix>.<tool>.<failure_mode>", groups=RUN_RUNNER,
                                         metavar="PREFIX")
    events_duplicate_window: int = setting(24 * 3_600_000, "a new events stream drops an "
                                           "event whose event_id it stored this recently",
                                           groups=RUN_RUNNER, parse=parse_duration_ms,
                                           show=_show_duration, metavar="DUR")
    events_out: str | None = setting(None, "also write BINEvents to this JSONL file "
                                     "(idempotent on event_id)", groups=RUN,
                                     parse=optional_text, metavar="FILE")
    until_idle: int | None = setting(None, "end cleanly after this long without new "
                                     "telemetry (seconds or a duration; 0: as soon as every "
                                     "partition has read everything, a bounded drain; unset: "
                                     "run until SIGINT/SIGTERM)", groups=RUN_RUNNER,
                                     parse=optional_seconds_or_duration_ms,
                                     show=_show_duration, metavar="SECONDS")
    recovery_dir: str | None = setting(None, "Bytewax recovery store: resume exactly where a "
                                       "killed job stopped (created when missing)",
                                       groups=("run",), parse=optional_text, metavar="DIR")
    snapshot_interval: int = setting(5_000, "how often state is snapshotted for recovery "
                                     "(a resumed job replays at most this much)",
                                     groups=("run",), parse=parse_duration_ms,
                                     show=_show_duration, metavar="DUR")
    backup_interval: int = setting(0, "keep superseded snapshots this long (for backups of "
                                   "the recovery store)", groups=("run",),
                                   parse=non_negative_duration_ms, show=_show_duration,
                                   metavar="DUR")
    build: bool = setting(True, "run the BIN build pipeline on each event (--no-build: "
                          "detect only)", groups=("run",), parse=parse_bool)
    source_poll: int = setting(5, "a quiet source partition is polled again after a pause "
                               "that doubles up to this (the most a message waits when the "
                               "stream is quiet)", groups=RUN, parse=parse_duration_ms,
                               show=_show_duration, metavar="DUR")
    nats_client: str = setting("auto", "how the source reads JetStream: wire (binloop's lean "
                               "reader of the NATS protocol, several times faster), nats-py, "
                               "or auto (wire unless the server needs TLS or NKeys)",
                               groups=RUN,
                               parse=lambda t: _choice(t, ("auto", "wire", "nats-py")))
    # A cluster of `binloop run` processes (binloop.ops.cluster_spec).
    process_id: int | None = setting(None, "this process's index in the cluster of --addresses "
                                     "(unset: the ordinal of --pod-name)", groups=("run",),
                                     parse=optional_non_negative_int, metavar="I")
    addresses: str | None = setting(None, "the cluster's processes as host:port, ';'-separated, "
                                    "or a template with {i} expanded for i < --processes "
                                    "(binloop-{i}.binloop-headless:9999)", groups=("run",),
                                    parse=optional_text, metavar="LIST")
    pod_name: str | None = setting(None, "a StatefulSet pod name (binloop-2): its ordinal is the "
                                   "process id when --process-id is unset", groups=("run",),
                                   parse=optional_text, metavar="NAME")
    recovery_partitions: int | None = setting(None, "partitions of a new recovery store "
                                              "(unset: workers x processes; fixed once created)",
                                              groups=("run",), parse=optional_positive_int,
                                              metavar="N")
    # Operations: metrics, status, logs.
    metrics_port: int = setting(0, "serve Prometheus metrics on this port (0: off; process i of "
                                "a local --processes cluster uses port + i)", groups=RUN,
                                parse=non_negative_int, metavar="PORT")
    metrics_addr: str = setting("0.0.0.0", "address the metrics endpoint listens on",
                                groups=RUN, metavar="ADDR")
    job_name: str = setting("binloop", "the job's name in the status bucket", groups=STATUS,
                            parse=name_token, metavar="NAME")
    status_bucket: str = setting("BINLOOP_STATUS", "NATS KV bucket the job publishes its "
                                 "status to (binloop status reads it)", groups=STATUS,
                                 parse=name_token, metavar="NAME")
    status_interval: int | None = setting(5_000, "how often each process of the job publishes "
                                          "its status ('off': never)", groups=RUN,
                                          parse=optional_duration_ms, show=_show_duration,
                                          metavar="DUR")
    log_format: str = setting("text", "log lines on stderr: text | json (one object per line)",
                              groups=LOGGING, parse=lambda t: _choice(t, ("text", "json")),
                              metavar="FORMAT")
    log_level: str = setting("info", "debug | info | warning | error", groups=LOGGING,
                             parse=parse_log_level, metavar="LEVEL")

    def detection(self) -> DetectionParams:
        params = {param: getattr(self, name) for name, param in DETECTION_PARAMS.items()}
        context = {name: value for name, value in self.digest_settings().items()
                   if name not in DETECTION_PARAMS}
        return DetectionParams(**params, context_digest=config_digest(context))

    def digest_settings(self) -> dict[str, Any]:
        """The settings that can change an event (declared with `digest=`), as digested."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            how = f.metadata["digest"]
            if how:
                value = getattr(self, f.name)
                out[f.name] = f.metadata["show"](value) if how is True else how(value)
        return out

    def config_digest(self) -> str:
        """sha256 of the detection configuration: part of every `event_id`, so that a run
        of another configuration is never taken for this one."""
        return self.detection().config_digest

    def record_limits(self) -> RecordLimits:
        return RecordLimits(
            args_max_bytes=self.args_max_bytes,
            max_future_skew_ms=self.max_future_skew,
            taxonomy=TAXONOMY | self.extra_failure_codes,
            failure_modes=self.failure_modes,
            infer_outcomes=self.count_outcomes,
            ts_unit=self.ts_unit,
        )

    def read_options(self) -> ReadOptions:
        return ReadOptions(max_line_bytes=self.max_line_bytes,
                           follow_symlinks=self.follow_symlinks)

    def shard_count(self) -> int:
        return self.shards or DEFAULT_SHARDS

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def to_env(self) -> dict[str, str]:
        """The settings as `BINLOOP_*` variables (to configure a child process)."""
        return {env_name(f.name): f.metadata["show"](getattr(self, f.name))
                for f in dataclasses.fields(self)}


def _choice(text: str, choices: tuple[str, ...]) -> str:
    if text not in choices:
        raise ValueError(f"{text!r} is not one of {', '.join(choices)}")
    return text


def env_name(name: str) -> str:
    return ENV_PREFIX + name.upper()


_DEFAULTS: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(Config)}


def default(name: str) -> Any:
    """A setting's declared default, for objects that are built without a `Config`."""
    return _DEFAULTS[name]


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def settings_for(group: str) -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(Config) if group in f.metadata["groups"]]


def add_arguments(parser: argparse.ArgumentParser, group: str, *, extra: Iterable[str] = (),
                  config_flag: bool = True) -> None:
    """Add `--config` and a flag for every setting of `group` and the settings named in
    `extra` (values parsed later)."""
    if config_flag:
        parser.add_argument("--config", metavar="FILE", help="TOML file of settings")
    wanted = set(extra)
    chosen = [f for f in dataclasses.fields(Config) if group in f.metadata["groups"]
              or f.name in wanted]
    for f in chosen:
        if not f.metadata["flag"]:
            continue
        shown = f.metadata["show"](f.default)
        default_note = f" (default: {shown})" if shown else ""
        if f.metadata["parse"] is parse_bool:
            negate = f.default is True
            parser.add_argument(("--no-" if negate else "--") + f.name.replace("_", "-"),
                                dest=f.name, action="store_const", default=None,
                                const="false" if negate else "true",
                                help=f.metadata["help"] + default_note)
        else:
            parser.add_argument(flag_name(f.name), dest=f.name, default=None,
                                metavar=f.metadata["metavar"] or "VALUE",
                                help=f.metadata["help"] + default_note)


def load_config(
    flags: Mapping[str, Any] | argparse.Namespace | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | Path | None = None,
) -> Config:
    """Resolve every setting: default < TOML file < BINLOOP_* env < flags."""
    env = os.environ if env is None else env
    given = vars(flags) if isinstance(flags, argparse.Namespace) else dict(flags or {})
    path = config_file or given.get("config") or env.get(ENV_PREFIX + "CONFIG")
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if path:
        layers.append((f"config file {path}", _read_toml(Path(path))))
    layers.append(("environment", _env_layer(env)))
    layers.append(("flag", {k: v for k, v in given.items() if v is not None}))
    values: dict[str, Any] = {}
    by_name = {f.name: f for f in dataclasses.fields(Config)}
    for source, layer in layers:
        for name, raw in layer.items():
            if name not in by_name:
                if source.startswith("config file"):
                    raise ConfigError(f"{source}: unknown setting {name!r}")
                continue
            values[name] = _parse(by_name[name], raw, source)
    return Config(**values)


def _env_layer(env: Mapping[str, str]) -> dict[str, str]:
    """BINLOOP_<NAME>, or the contents of the file BINLOOP_<NAME>_FILE names (how a
    container mounts a secret: the NATS URL may carry credentials, and an environment
    variable is visible to more than a file is). The variable itself wins."""
    layer: dict[str, str] = {}
    for f in dataclasses.fields(Config):
        name = env_name(f.name)
        if name in env:
            layer[f.name] = env[name]
        elif name + "_FILE" in env:
            path = Path(env[name + "_FILE"])
            try:
                layer[f.name] = path.read_text().strip()
            except OSError as exc:
                raise ConfigError(f"{name}_FILE: cannot read {path}: "
                                  f"{exc.strerror or exc}") from None
    return layer


def _parse(f: dataclasses.Field[Any], raw: Any, source: str) -> Any:
    text = ",".join(map(str, raw)) if isinstance(raw, list) else _show(raw)
    try:
        return f.metadata["parse"](text)
    except ValueError as exc:
        raise ConfigError(f"{source} {f.name} = {text!r}: {exc}") from None


def _read_toml(path: Path) -> dict[str, Any]:
    # imported here: compiling its regexes was ~2% of every command's start-up
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not TOML: {exc}") from None
    table = data.get("binloop", data)
    return {key.replace("-", "_"): value for key, value in table.items()}


def render_markdown(fields: Iterable[dataclasses.Field[Any]] | None = None) -> str:
    """The settings table (rendered into the docs' configuration page at build time)."""
    rows = ["| setting (TOML) | flag | env | default | meaning |", "|---|---|---|---|---|"]
    for f in fields or dataclasses.fields(Config):
        flag = ""
        if f.metadata["flag"]:
            negate = f.metadata["parse"] is parse_bool and f.default is True
            flag = f"`--no-{f.name.replace('_', '-')}`" if negate else f"`{flag_name(f.name)}`"
        default = f.metadata["show"](f.default)
        meaning = f.metadata["help"].replace("|", "\\|")
        rows.append(f"| `{f.name}` | {flag} | `{env_name(f.name)}` | `{default}` | {meaning} |")
    return "\n".join(rows)
