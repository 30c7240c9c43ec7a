"""The Hanzo bot's native telemetry, mapped onto binloop's record (`--input-format hanzo`).

The bot's self-improvement extension (hanzoai/bot, `extensions/self-improvement/src/
telemetry.ts`) appends one `ToolInvocation` per line to `~/.hanzo/bot/telemetry/
session-<ms>.jsonl`:

    {tool_id, session_id, agent_id, timestamp_ms, duration_ms, success, failure_mode?,
     input_tokens?, output_tokens?, cost_usd?, retries, user_corrected, context}

Field by field (the one place this mapping lives; docs/hanzo.md restates it):

| binloop        | from the bot's record                                                    |
|----------------|--------------------------------------------------------------------------|
| `id`           | sha256 of (`hanzo`, file name, line number, the line's bytes): stable for a |
|                | re-read, distinct for two same-millisecond records                       |
| `session_id`   | `session_id`; where it is `"current"` (what the friction detector writes |
|                | for every record) the file's name `session-<ms>` stands for the session  |
| `ts`           | `timestamp_ms`                                                            |
| `tool`         | `tool_id`                                                                 |
| `args`         | `{}` (the bot records no arguments)                                       |
| `outcome`      | `success` true -> `success`; false -> `failure` (`timeout` when its       |
|                | failure mode is `timeout`)                                                |
| `failure_mode` | the bot's word, mapped by `FAILURE_MODES` onto the taxonomy, the word     |
|                | kept as level 2 (`auth` -> `PERM.auth`); null for a success and for a    |
|                | failure without a mode (the bot records no error text to infer one from)  |
| `duration_ms`  | `duration_ms` (rounded; a negative value is rejected)                     |
| `agent_id`     | `agent_id`                                                                |

`retries`, `user_corrected`, tokens, cost and `context` have no place in the record and
are dropped. A line that is not a JSON object, or lacks `tool_id`, `timestamp_ms` or
`success`, is a dead letter with the reason.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePath
from typing import Any, Final

import orjson

from binloop.core.schema import InvalidRecord

# Both vocabularies of the bot: the `ToolInvocation` type's (timeout, auth, validation,
# model_error, unknown) and the friction detector's `categorizeFailure` (timeout, auth,
# not_found, permission, parse_error, rate_limit, network, unknown).
FAILURE_MODES: Final[dict[str, str]] = {
    "timeout": "TIMEOUT",
    "not_found": "NOTFOUND",
    "permission": "PERM",
    "auth": "PERM",
    # The bot's `parse` words come from its detector matching "parse"/"syntax"/"json"
    # in the error: malformed text, so SYNTAX. `validation` is input the tool refused:
    # the arguments, so ARGS.
    "parse_error": "SYNTAX",
    "validation": "ARGS",
    "network": "NETWORK",
    "rate_limit": "NETWORK",
    # RUNTIME is the taxonomy's "the tool ran and failed": a model call that failed, and
    # the detector's catch-all for an error it could not place.
    "model_error": "RUNTIME",
    "unknown": "RUNTIME",
}
CURRENT_SESSION: Final = "current"
_SESSION_FILE = re.compile(r"(session-\d+)\.jsonl(?:\.gz)?$")
_REQUIRED: Final = ("tool_id", "timestamp_ms", "success")


def looks_like(obj: object) -> bool:
    """Whether a decoded line is a Hanzo bot record (for format sniffing)."""
    return isinstance(obj, dict) and all(key in obj for key in _REQUIRED) and "ts" not in obj


def session_of_file(source: str) -> str | None:
    """`session-<ms>` of a bot telemetry file name, else None."""
    match = _SESSION_FILE.search(PurePath(source).name)
    return match.group(1) if match else None


def failure_mode(word: Any) -> str | None:
    """The bot's failure-mode word as a binloop failure mode (`PERM.auth`); words outside
    both vocabularies become `RUNTIME.<word>` when they are a clean token, else RUNTIME."""
    if word is None:
        return None
    if not isinstance(word, str) or not word.strip():
        raise InvalidRecord(f"hanzo record: failure_mode must be a word, got {word!r:.80}")
    token = word.strip().lower()
    code = FAILURE_MODES.get(token, "RUNTIME")
    return f"{code}.{token}" if re.fullmatch(r"[a-z0-9_\-]{1,64}", token) else code


def record_id(source: str, line: int, raw: bytes) -> str:
    digest = hashlib.sha256(b"hanzo\0")
    digest.update(PurePath(source).name.encode("utf-8", "surrogateescape"))
    digest.update(b"\0%d\0" % line)
    digest.update(raw)
    return digest.hexdigest()


def map_line(raw: bytes, source: str, line: int) -> dict[str, Any]:
    """One line of a bot telemetry file as a binloop record dict (validated afterwards
    by binloop's own parse step); raises InvalidRecord with the reason."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRecord(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidRecord(f"hanzo record: not a JSON object but {type(obj).__name__}")
    return map_record(obj, source, line, raw)


def map_record(obj: dict[str, Any], source: str, line: int, raw: bytes) -> dict[str, Any]:
    for key in _REQUIRED:
        if key not in obj:
            raise InvalidRecord(f"hanzo record: missing field {key}")
    success = obj["success"]
    if not isinstance(success, bool):
        raise InvalidRecord(f"hanzo record: success must be true or false, got {success!r:.80}")
    mode = None if success else failure_mode(obj.get("failure_mode"))
    session = obj.get("session_id")
    if session == CURRENT_SESSION or session is None:
        session = session_of_file(source) or session
    record: dict[str, Any] = {
        "id": record_id(source, line, raw),
        "session_id": session,
        "ts": obj["timestamp_ms"],
        "tool": obj["tool_id"],
        "args": {},
        "outcome": "success" if success else
                   ("timeout" if mode is not None and mode.startswith("TIMEOUT") else "failure"),
        "failure_mode": mode,
    }
    duration = obj.get("duration_ms")
    if isinstance(duration, float) and duration >= 0:
        duration = round(duration)
    if duration is not None:
        record["duration_ms"] = duration
    if isinstance(obj.get("agent_id"), str):
        record["agent_id"] = obj["agent_id"]
    return record
