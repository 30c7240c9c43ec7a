"""Deprecated alias: the agents' telemetry client is `binloop.nats.telemetry_client`.

Kept so that agents written against the old path keep working; it will be removed in a
later release.
"""

import warnings

from binloop.nats.telemetry_client import DEFAULT_ROTATE_BYTES, TelemetryClient

__all__ = ["DEFAULT_ROTATE_BYTES", "TelemetryClient"]

warnings.warn("binloop.telemetry_client moved to binloop.nats.telemetry_client",
              DeprecationWarning, stacklevel=2)
