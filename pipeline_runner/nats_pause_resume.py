"""The pause/resume protocol on NATS: pause/resume a session, announce registry updates.

* pause: request/reply on `{prefix}.{session_id}.pause` (`prefix` = `bin.control`); the
  payload is the reason (event id, tool, failure mode, build id); the agent's reply is
  its task state (a JSON object), which the runner writes to the checkpoint file. No
  reply within the pause timeout (or no agent subscribed) gives `None`: the build goes
  on without waiting.
* `bin.registry.updated`: `{"version": <manifest version>, "tool": {...}}` after a gate.
* resume: `{prefix}.{session_id}.resume` with the checkpoint (state included).

Session ids are escaped into one subject token (`binloop.nats.subjects.subject_token`).
Publishes are core NATS (an agent that is not connected has nothing to resume) and are
flushed before returning, so a message is on the server when the stage ends.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from binloop.core.config import default
from binloop.core.schema import SessionId
from binloop.nats.link import NatsLink
from binloop.nats.subjects import subject_token
from pipeline_runner.pause_resume import TaskState

log = logging.getLogger("binloop.builds")
REGISTRY_SUBJECT: str = default("registry_subject")


def control_subject(prefix: str, session_id: SessionId, action: str) -> str:
    return f"{prefix}.{subject_token(session_id)}.{action}"


class NatsControl:
    def __init__(self, link: NatsLink, pause_timeout_s: float = default("pause_timeout") / 1000,
                 prefix: str = default("control_subject_prefix"),
                 registry_subject: str = REGISTRY_SUBJECT) -> None:
        self.link = link
        self.pause_timeout_s = pause_timeout_s
        self.prefix = prefix
        self.registry_subject = registry_subject

    def pause(self, session_id: SessionId, reason: dict[str, Any]) -> TaskState | None:
        subject = control_subject(self.prefix, session_id, "pause")
        try:
            reply = self.link.run(self.link.nc.request(
                subject, orjson.dumps(reason), timeout=self.pause_timeout_s),
                self.pause_timeout_s + 5)
        except (NatsTimeout, NoRespondersError, TimeoutError) as exc:
            log.info("session %s did not answer the pause request (%s)", session_id,
                     type(exc).__name__)
            return None
        try:
            state = orjson.loads(reply.data)
        except orjson.JSONDecodeError:
            return {"raw": reply.data.decode(errors="replace")[:4000]}
        return state if isinstance(state, dict) else {"state": state}

    def registry_updated(self, manifest_version: int, tool: dict[str, Any] | None) -> None:
        self._publish(self.registry_subject, {"version": manifest_version, "tool": tool})

    def resume(self, session_id: SessionId, checkpoint: dict[str, Any]) -> None:
        self._publish(control_subject(self.prefix, session_id, "resume"), checkpoint)

    def _publish(self, subject: str, payload: dict[str, Any]) -> None:
        async def send() -> None:
            await self.link.nc.publish(subject, orjson.dumps(payload, default=str))
            await self.link.nc.flush(timeout=5)

        self.link.run(send(), 10.0)
