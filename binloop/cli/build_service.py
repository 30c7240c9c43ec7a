"""The build runner inside the live job, and as its own service (`binloop runner`).

:class:`LiveBuilds` owns what builds need on NATS: one connection (`NatsLink`), agent
control (`NatsControl`), build results and re-arms to `BIN_BUILDS`
(`NatsResultSink`), the build service, and the watcher that counts tool uses from the
telemetry stream (promotions). `binloop run` attaches it to the dataflow
(`flow_hooks`): BINEvents go to the build-runner sink, and the detector consumes the
results and re-arms as its second input (`flows.builds_source`). `binloop runner`
feeds it from a durable consumer of `BIN_EVENTS` instead (:func:`consume_events`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from bytewax.dataflow import Dataflow, Stream
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from binloop.core.config import Config
from binloop.core.events import BINEvent
from binloop.library import manifest as mf
from binloop.nats.jetstream import StreamSpec, ensure_stream
from binloop.nats.link import NatsLink
from pipeline_runner.event_input import InvalidEvent, parse_event
from pipeline_runner.factory import library_of
from pipeline_runner.nats_pause_resume import NatsControl
from pipeline_runner.nats_results import NatsResultSink, builds_stream_spec
from pipeline_runner.nats_uses import UseWatcher
from pipeline_runner.service import BuildService

log = logging.getLogger("binloop.builds")


def _limits(config: Config) -> dict[str, Any]:
    return {"max_age_s": None if config.stream_max_age is None else config.stream_max_age / 1000,
            "max_bytes": config.stream_max_bytes, "replicas": config.stream_replicas,
            "storage": config.stream_storage}


def builds_stream(config: Config) -> StreamSpec:
    return builds_stream_spec(config.builds_stream, config.builds_subject_prefix,
                              duplicate_window_s=config.events_duplicate_window / 1000,
                              **_limits(config))


def answered_epochs(library_dir: str) -> list[tuple[tuple[str, str], int]]:
    """(key, arm epoch) of every key a non-quarantined library tool answers."""
    manifest = library_of_dir(library_dir).read()
    return [((e["answers"]["tool"], e["answers"]["failure_mode"]), int(e.get("arm_epoch", 0)))
            for e in manifest["tools"].values() if e["status"] != "quarantined"]


def library_of_dir(directory: str) -> Any:
    from binloop.library.store import ToolLibrary

    return ToolLibrary(directory)


class LiveBuilds:
    """The build service of one process, connected to NATS."""

    def __init__(self, config: Config) -> None:
        if not config.nats:
            raise ValueError("builds on the live job need --nats")
        library_of(config)  # fails early without --library
        self.config = config
        self.link = NatsLink(config.nats, "binloop-builds", config.connect_timeout / 1000)
        control = NatsControl(self.link, config.pause_timeout / 1000,
                              config.control_subject_prefix, config.registry_subject)
        results = NatsResultSink(self.link, builds_stream(config),
                                 config.builds_subject_prefix, config.manage_stream)
        self.service = BuildService(config, control, results)
        self.uses = UseWatcher(self.link, self.service, config.stream, config.subject_prefix,
                               self.service.library.state_dir / "uses.position")

    def start(self) -> LiveBuilds:
        self.service.start()
        self.uses.start()
        return self

    def stop(self) -> None:
        self.uses.stop()
        self.service.stop()
        self.link.close()

    def busy(self) -> bool:
        return self.service.queue.depth() > 0


_process_builds: LiveBuilds | None = None
_process_lock = threading.Lock()


def process_builds(config: Config) -> LiveBuilds:
    """This process's LiveBuilds, started on first use (by the worker owning the sink)."""
    global _process_builds
    with _process_lock:
        if _process_builds is None:
            _process_builds = LiveBuilds(config).start()
        return _process_builds


def stop_process_builds() -> None:
    global _process_builds
    with _process_lock:
        if _process_builds is not None:
            _process_builds.stop()
            _process_builds = None


def flow_hooks(config: Config) -> dict[str, Any]:
    """Keyword arguments for `flows.live.build_flow` that add the build runner."""
    from flows.builds_source import ControlSettings, controls_factory, library_seed
    from sinks.build_runner import build_events

    assert config.nats and config.library
    library = config.library

    def busy() -> bool:
        return _process_builds is not None and _process_builds.busy()

    summary_path = Path(config.summary_out) if config.summary_out else None

    def progress() -> object:
        """The records read so far, from the job's summary file (refreshed as it runs)."""
        if summary_path is None:
            return None
        try:
            return orjson.loads(summary_path.read_bytes()).get("records_read")
        except (OSError, orjson.JSONDecodeError, AttributeError):
            return None

    settings = ControlSettings(config.nats, builds_stream(config), config.builds_subject_prefix,
                               busy=busy, progress=progress,
                               until_idle_s=None if config.until_idle is None
                               else config.until_idle / 1000,
                               manage_stream=config.manage_stream,
                               connect_timeout_s=config.connect_timeout / 1000)

    def on_events(events: Stream[BINEvent]) -> None:
        build_events(events, lambda: process_builds(config).service, stop_with_flow=False)

    controls: Callable[[Dataflow], Any] = controls_factory(settings, config.shard_count())
    return {"controls": controls, "on_events": on_events,
            "seed": library_seed(answered_epochs(library))}


def consume_events(config: Config, builds: LiveBuilds, stop: threading.Event,
                   durable: str = "binloop-runner") -> int:
    """`binloop runner`: BINEvents from a durable consumer of BIN_EVENTS into the build
    queue, acknowledged once queued (at-least-once; the queue drops replays by
    event_id). Returns how many events were queued. Ends with `stop`, or after
    `until_idle` without events once no build is running."""
    link = builds.link
    stream = StreamSpec(config.events_stream, (f"{config.events_subject_prefix}.>",),
                        duplicate_window_s=config.events_duplicate_window / 1000,
                        **_limits(config))
    link.run(ensure_stream(link.js, stream, config.manage_stream))
    consumer = ConsumerConfig(durable_name=durable, ack_policy=AckPolicy.EXPLICIT,
                              deliver_policy=DeliverPolicy.ALL, ack_wait=60, max_deliver=-1,
                              filter_subject=f"{config.events_subject_prefix}.>")
    subscription = link.run(link.js.pull_subscribe(
        f"{config.events_subject_prefix}.>", durable, stream=config.events_stream,
        config=consumer))
    idle_s = None if config.until_idle is None else config.until_idle / 1000
    quiet_since, queued = time.monotonic(), 0
    while not stop.is_set():
        try:
            messages = link.run(subscription.fetch(16, timeout=0.5), 30)
        except Exception:  # nats' fetch timeout, or a reconnect in progress
            messages = []
        for message in messages:
            try:
                event = parse_event(message.data)
            except InvalidEvent as exc:
                log.warning("BIN_EVENTS message is not a BINEvent (%s); terminated", exc)
                link.run(message.term())
                continue
            if builds.service.submit(event) == "queued":
                queued += 1
            link.run(message.ack())
        now = time.monotonic()
        if messages or builds.busy():
            quiet_since = now
        elif idle_s is not None and now - quiet_since >= idle_s:
            break
    return queued


def result_summary(builds: LiveBuilds) -> dict[str, Any]:
    manifest = builds.service.library.read()
    return {"queue": builds.service.queue.stats.as_dict(),
            "manifest_version": manifest["version"],
            "tools": {name: e["status"] for name, e in manifest["tools"].items()},
            "answered": sorted(map(list, mf.answered_keys(manifest)))}


def dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()


def position_file(directory: Path) -> Path:
    return directory / "uses.position"
