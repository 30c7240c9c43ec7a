"""BINEvents to the build runner: each event is queued for a background build.

Delivery guarantee: at-least-once into a durable queue, exactly one build per
`event_id`. `write_batch` only writes each event to the service's queue directory
(fsynced) and returns, so the dataflow never waits for a build; builds run on the
service's worker threads. Events replayed after a recovery are recognised by
`event_id` (pending or done) and build nothing new; events queued but not yet built
when the job stops are built after the next start. The sink has one partition, so one
worker of the whole cluster owns the queue and its build workers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import bytewax.operators as op
from bytewax.dataflow import Stream
from bytewax.outputs import FixedPartitionedSink, StatefulSinkPartition
from typing_extensions import override

from binloop.core.events import BINEvent
from pipeline_runner.service import BuildService

ServiceFactory = Callable[[], BuildService]


class _BuildPartition(StatefulSinkPartition[BINEvent, None]):
    def __init__(self, service: BuildService, owned: bool) -> None:
        self._service = service
        self._owned = owned

    @override
    def write_batch(self, values: list[BINEvent]) -> None:
        for event in values:
            self._service.submit(event)

    @override
    def snapshot(self) -> None:
        return None

    @override
    def close(self) -> None:
        if self._owned:
            self._service.stop()


class BuildRunnerSink(FixedPartitionedSink[BINEvent, None]):
    """Submit events to a :class:`BuildService` (created by `factory` on the worker that
    owns the partition, and stopped with the dataflow unless `stop_with_flow=False`)."""

    def __init__(self, factory: ServiceFactory, stop_with_flow: bool = True) -> None:
        self._factory = factory
        self._stop_with_flow = stop_with_flow

    @override
    def list_parts(self) -> list[str]:
        return ["builds"]

    @override
    def part_fn(self, item_key: str) -> int:
        return 0

    @override
    def build_part(self, step_id: str, for_part: str, resume_state: None) -> _BuildPartition:
        service = self._factory()
        return _BuildPartition(service, self._stop_with_flow)


def build_events(events: Stream[BINEvent], factory: ServiceFactory,
                 stop_with_flow: bool = True) -> None:
    """Attach the build runner to a dataflow's BINEvent stream."""
    keyed: Any = op.key_on("key_builds", events, lambda _: "builds")
    op.output("builds", keyed, BuildRunnerSink(factory, stop_with_flow))
