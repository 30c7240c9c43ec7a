"""Prometheus metrics of `binloop run`, counted where the work happens.

Every process of a cluster counts what its own workers do (records parsed by a worker,
detector counters of the shards it holds, messages its source partitions read) and
serves them on its own port (`--metrics-port`); Prometheus sums over the processes.
Nothing goes through the job's single summary partition, so the metrics cost no
exchange between workers.

These are counters of work done by this process since it started: after a resume
from recovery, the records replayed since the last snapshot are counted again (the
exactly-once totals are the job's summary: `binloop status`). Metrics:

* counters `binloop_records_{read,valid,invalid,counted,duplicate,late,disarmed,
  beyond_lateness}_total`, `binloop_events_fired_total`;
* `binloop_builds_total{outcome}`, `binloop_build_duration_seconds{outcome}`
  (histogram), `binloop_build_queue_depth` (gauge);
* per source partition: `binloop_source_messages_total`, `binloop_source_position`
  (last stream sequence read), `binloop_source_pending_messages` (stored, not read);
* `binloop_event_time_newest_seconds` (newest record ts parsed, unix s) and
  `binloop_event_time_lag_seconds` (wall clock minus the newest ts of the last chunk);
* `binloop_info{process_id,processes,workers}` (1).

The build runner reports through `record_build(outcome, duration_s)` and
`track_build_queue(depth_function)` (or `set_build_queue_depth(n)`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

from binloop.core.config import default
from binloop.core.detection import DetectorStats

disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series
_RECORDS: Final = {
    name: Counter(f"binloop_records_{name}", help_text) for name, help_text in (
        ("read", "telemetry records read (lines or envelope records)"),
        ("valid", "records that parsed and validated"),
        ("invalid", "records and messages dead-lettered as invalid"),
        ("counted", "records that counted towards a (tool, failure_mode) window"),
        ("duplicate", "counted records dropped as duplicates of an id already counted"),
        ("late", "records too late for any sliding window"),
        ("disarmed", "counted records of a disarmed key (ignored)"),
        ("beyond_lateness", "records older than allowed_lateness behind the newest ts"),
    )}
_DETECTOR_FIELDS: Final = (("counted", "counted"), ("duplicate", "duplicates"), ("late", "late"),
                           ("disarmed", "disarmed"), ("beyond_lateness", "beyond_lateness"))
EVENTS_FIRED: Final = Counter("binloop_events_fired", "BINEvents fired")
BUILDS: Final = Counter("binloop_builds", "BIN builds finished, by outcome", ["outcome"])
BUILD_SECONDS: Final = Histogram("binloop_build_duration_seconds", "BIN build duration",
                                 ["outcome"], buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800))
BUILD_QUEUE: Final = Gauge("binloop_build_queue_depth",
                           "BINEvents queued or being built in this process")
SOURCE_MESSAGES: Final = Counter("binloop_source_messages", "stream messages read",
                                 ["partition"])
SOURCE_POSITION: Final = Gauge("binloop_source_position",
                               "last stream sequence read by the partition", ["partition"])
SOURCE_PENDING: Final = Gauge("binloop_source_pending_messages",
                              "messages of the partition stored and not read yet",
                              ["partition"])
EVENT_TIME_NEWEST: Final = Gauge("binloop_event_time_newest_seconds",
                                 "newest record ts parsed by this process (unix seconds)")
EVENT_TIME_LAG: Final = Gauge("binloop_event_time_lag_seconds",
                              "wall clock minus the newest record ts of the last chunk parsed")
INFO: Final = Gauge("binloop_info", "this process of the job", ["process_id", "processes",
                                                               "workers"])
_newest_lock = threading.Lock()
_newest_s = 0.0
_queue_depth: Callable[[], int] = lambda: 0  # noqa: E731 - replaced by the build runner
BUILD_QUEUE.set_function(lambda: _queue_depth())


def record_counters(stats: Any) -> None:
    """Count one `IngestStats` (records read/valid/invalid, newest ts) or
    `DetectorStats` item of the dataflow, on the worker that produced it."""
    if isinstance(stats, DetectorStats):
        for metric, field in _DETECTOR_FIELDS:
            if value := getattr(stats, field):
                _RECORDS[metric].inc(value)
        if stats.fired:
            EVENTS_FIRED.inc(stats.fired)
        return
    for name in ("read", "valid", "invalid"):
        if value := getattr(stats, "records_read" if name == "read" else name):
            _RECORDS[name].inc(value)
    max_ts = getattr(stats, "max_ts", None)
    if max_ts is not None:
        _note_event_time(max_ts / 1000)


def _note_event_time(chunk_newest_s: float) -> None:
    global _newest_s
    EVENT_TIME_LAG.set(time.time() - chunk_newest_s)
    with _newest_lock:
        if chunk_newest_s > _newest_s:
            _newest_s = chunk_newest_s
            EVENT_TIME_NEWEST.set(chunk_newest_s)


class PartitionMetrics:
    """The metrics of one source partition (label children bound once)."""

    def __init__(self, partition: str, position: int) -> None:
        self._messages = SOURCE_MESSAGES.labels(partition)
        self._position = SOURCE_POSITION.labels(partition)
        self._pending = SOURCE_PENDING.labels(partition)
        self._position.set(position)

    def read(self, messages: int, position: int, pending: int | None) -> None:
        self._messages.inc(messages)
        self._position.set(position)
        if pending is not None:
            self._pending.set(pending)


def record_build(outcome: str, duration_s: float | None = None) -> None:
    """A build finished with `outcome` (the build runner's: gated, rolled_back, error)."""
    BUILDS.labels(outcome).inc()
    if duration_s is not None:
        BUILD_SECONDS.labels(outcome).observe(duration_s)


def set_build_queue_depth(depth: int) -> None:
    track_build_queue(lambda: depth)


def track_build_queue(depth: Callable[[], int]) -> None:
    """Read the build queue's depth from `depth()` whenever metrics are scraped."""
    global _queue_depth
    _queue_depth = depth


def set_info(process_id: int, processes: int, workers: int) -> None:
    INFO.labels(str(process_id), str(processes), str(workers)).set(1)


class MetricsServer:
    """The HTTP endpoint (any path serves the metrics; probes use /metrics)."""

    def __init__(self, port: int, addr: str = default("metrics_addr")) -> None:
        self._server, self._thread = start_http_server(port, addr)
        self.port = int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def local_values() -> dict[str, Any]:
    """This process's metrics as plain numbers (published in the job's status)."""
    values: dict[str, Any] = {f"records_{name}": int(_value(c)) for name, c in _RECORDS.items()}
    values["events_fired"] = int(_value(EVENTS_FIRED))
    values["build_queue_depth"] = int(_value(BUILD_QUEUE))
    values["builds"] = _by_label(BUILDS, "outcome")
    partitions: dict[str, dict[str, int]] = {}
    for metric, key in ((SOURCE_MESSAGES, "messages"), (SOURCE_POSITION, "position"),
                        (SOURCE_PENDING, "pending")):
        for name, value in _by_label(metric, "partition").items():
            partitions.setdefault(name, {})[key] = value
    values["partitions"] = partitions
    values["event_time_newest_s"] = _newest_s or None
    values["event_time_lag_s"] = round(_value(EVENT_TIME_LAG), 3) if _newest_s else None
    return values


def _value(metric: Any) -> float:
    """The value of a metric without labels."""
    for family in metric.collect():
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                return float(sample.value)
    return 0.0


def _by_label(metric: Any, label: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for family in metric.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            out[sample.labels[label]] = int(sample.value)
    return out
