"""The build-runner sink in a real Bytewax dataflow (replayed telemetry, no NATS)."""

from __future__ import annotations

from pathlib import Path

import bytewax.operators as op
import pytest
from bytewax.dataflow import Dataflow
from bytewax.testing import run_main

from binloop.core.config import Config, load_config
from binloop.library.status import library_status
from binloop.library.store import ToolLibrary
from binloop.ops import metrics
from flows.detect import add_detector
from flows.file_source import TelemetryFileSource
from pipeline_runner.service import BuildService, LogResultSink
from sinks.build_runner import build_events
from tests.designers import BlockingOfflineDesigner

pytestmark = pytest.mark.slow


def replay_flow(config: Config, service: BuildService) -> Dataflow:
    flow = Dataflow("replay_with_builds")
    chunks = op.input("telemetry", flow, TelemetryFileSource(str(config.input), 256, False))
    build_events(add_detector(chunks, config), lambda: service, stop_with_flow=False)
    return flow


def test_builds_run_beside_the_dataflow_once_per_event(tmp_path: Path,
                                                       tau_telemetry: Path) -> None:
    config = load_config({"input": str(tau_telemetry), "theta": "2",
                          "library": str(tmp_path / "lib"),
                          "designer": "tests.designers:blocking_offline", "build_workers": "2",
                          "dead_letter": str(tmp_path / "dead.jsonl")}, env={})
    results = LogResultSink()
    service = BuildService(config, results=results).start()
    gated_before = metrics.local_values()["builds"].get("gated", 0)
    BlockingOfflineDesigner.RELEASE.clear()
    try:
        run_main(replay_flow(config, service))
        # the dataflow has finished while every build is still held in its design stage
        assert service.queue.depth() == 5
        assert metrics.local_values()["build_queue_depth"] == 5  # the metrics hook
        assert ToolLibrary(tmp_path / "lib").read()["tools"] == {}
        BlockingOfflineDesigner.RELEASE.set()
        assert service.queue.wait_idle(300)
        library = ToolLibrary(tmp_path / "lib")
        assert len(library.read()["tools"]) == 5
        assert [r["outcome"] for r in results.records if r["type"] == "result"] == ["gated"] * 5
        assert metrics.local_values()["builds"]["gated"] - gated_before == 5
        assert metrics.local_values()["build_queue_depth"] == 0
        # `binloop status --library` reads the real manifest
        status = library_status(tmp_path / "lib")
        assert status["state"] == "ok" and status["by_status"]["probationary"] == 5
        before = library.content_digest()
        run_main(replay_flow(config, service))  # the same events again: nothing new
        assert service.queue.wait_idle(60)
        assert service.queue.stats.duplicates == 5
        assert library.content_digest() == before
        assert service.answered_keys() == {(e["answers"]["tool"], e["answers"]["failure_mode"])
                                           for e in library.read()["tools"].values()}
    finally:
        BlockingOfflineDesigner.RELEASE.set()
        service.stop()
