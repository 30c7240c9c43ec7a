"""What one `binloop run` process serves beside the dataflow: its Prometheus metrics
endpoint (`--metrics-port`) and its status publisher (`--status-interval`)."""

from __future__ import annotations

import logging

from binloop.core.config import Config
from binloop.core.logs import set_context
from binloop.core.summary import RunSummary
from binloop.ops import metrics
from binloop.ops.job_status import PublisherSettings, StatusPublisher

log = logging.getLogger("binloop.run")


class Operations:
    """Started before the dataflow, closed after it (a last status is published)."""

    def __init__(self, config: Config, process_id: int = 0, processes: int = 1) -> None:
        if processes > 1:
            set_context(process_id=process_id)
        metrics.set_info(process_id, processes, config.workers)
        self.server: metrics.MetricsServer | None = None
        if config.metrics_port:
            self.server = metrics.MetricsServer(config.metrics_port, config.metrics_addr)
            log.info("metrics on http://%s:%d/metrics", config.metrics_addr, self.server.port)
        self.status: StatusPublisher | None = None
        if config.status_interval and config.nats:
            self.status = StatusPublisher(PublisherSettings(
                config.nats, config.status_bucket, config.job_name,
                config.status_interval / 1000, process_id, processes, config.workers,
                create_bucket=config.manage_stream,
                connect_timeout_s=config.connect_timeout / 1000)).start()

    def note_summary(self, summary: RunSummary) -> None:
        if self.status is not None:
            self.status.note_summary(summary)

    def close(self) -> None:
        if self.status is not None:
            self.status.close()
        if self.server is not None:
            self.server.close()
