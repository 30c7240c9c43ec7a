"""The metrics API and its HTTP endpoint (a real scrape on a free port)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from binloop.core.detection import DetectorStats
from binloop.nats.server import free_port
from binloop.ops import metrics
from flows.operators import IngestStats


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_counters_builds_and_partitions_are_served() -> None:
    server = metrics.MetricsServer(free_port(), "127.0.0.1")
    try:
        before = scrape(server.port)
        metrics.record_counters(IngestStats(10, 8, 2, max_ts=1_700_000_000_000))
        metrics.record_counters(DetectorStats(counted=5, duplicates=1, late=2, fired=1))
        metrics.record_build("gated", 42.0)
        metrics.record_build("rolled_back")
        metrics.set_build_queue_depth(3)
        metrics.PartitionMetrics("TEST/9", 100).read(7, 107, 0)
        after = scrape(server.port)
    finally:
        server.close()

    def grew(name: str, *labels: tuple[str, str]) -> float:
        key = (name, tuple(sorted(labels)))
        return after[key] - before.get(key, 0.0)

    assert grew("binloop_records_read_total") == 10
    assert grew("binloop_records_valid_total") == 8
    assert grew("binloop_records_invalid_total") == 2
    assert grew("binloop_records_counted_total") == 5
    assert grew("binloop_records_duplicate_total") == 1
    assert grew("binloop_records_late_total") == 2
    assert grew("binloop_events_fired_total") == 1
    assert grew("binloop_builds_total", ("outcome", "gated")) == 1
    assert grew("binloop_builds_total", ("outcome", "rolled_back")) == 1
    assert grew("binloop_build_duration_seconds_count", ("outcome", "gated")) == 1
    assert after[("binloop_build_queue_depth", ())] == 3
    assert after[("binloop_source_position", (("partition", "TEST/9"),))] == 107
    assert after[("binloop_source_pending_messages", (("partition", "TEST/9"),))] == 0
    assert grew("binloop_source_messages_total", ("partition", "TEST/9")) == 7
    assert after[("binloop_event_time_newest_seconds", ())] >= 1_700_000_000
    assert after[("binloop_event_time_lag_seconds", ())] > 0
    assert not any(name.endswith("_created") for name, _ in after)


def test_local_values_for_the_status_bucket() -> None:
    metrics.PartitionMetrics("TEST/8", 5).read(3, 8, 2)
    values = metrics.local_values()
    assert values["partitions"]["TEST/8"] == {"messages": 3, "position": 8, "pending": 2}
    assert {"records_read", "records_counted", "events_fired", "builds",
            "build_queue_depth", "event_time_lag_s"} <= set(values)
