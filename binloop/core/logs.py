"""The one logging setup of every binloop command: text or JSON lines on stderr.

`setup_logging(format, level)` installs a single handler on the root logger (calling
it again replaces it), so binloop's loggers (`binloop.*`) and the libraries' (nats,
asyncio) write through it. `binloop.*` logs at `level`; other libraries at WARNING or
above. In JSON format every line is one object::

    {"ts": "2024-05-01T12:00:00.123Z", "level": "info", "logger": "binloop.nats",
     "msg": "...", "process_id": 1, ...fields passed as `extra=`}

with `exc` holding the traceback of a logged exception. Secrets: every message and
traceback goes through the one redactor (`RedactingFilter` on the handler), and NATS
URLs are logged through `binloop.nats.jetstream.redact_url`.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import TYPE_CHECKING, Any, Final, TextIO

import orjson

from binloop.core.redact import RedactingFilter

if TYPE_CHECKING:
    from binloop.core.config import Config

HANDLER_NAME: Final = "binloop"
_LEVELS: Final = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
                  "error": logging.ERROR}
# Attributes every LogRecord has: anything else was passed with `extra=`.
_STANDARD: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName"}
_context: dict[str, Any] = {}


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": _iso_ms(record.created), "level": record.levelname.lower(),
            "logger": record.name, "msg": record.getMessage(), **_context}
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = record.exc_text or self.formatException(record.exc_info)
        return orjson.dumps(line, default=str).decode()


class TextFormatter(logging.Formatter):
    """`binloop: message` (as the commands always printed), with a process tag in a
    cluster and the traceback of a logged exception."""

    def format(self, record: logging.LogRecord) -> str:
        tag = f"[{_context['process_id']}]" if "process_id" in _context else ""
        level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
        text = f"binloop{tag}: {level}{record.getMessage()}"
        if record.exc_info:
            text += "\n" + (record.exc_text or self.formatException(record.exc_info))
        return text


def _iso_ms(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + \
        f".{int(created % 1 * 1000):03d}Z"


def setup_logging(log_format: str = "text", level: str = "info",
                  stream: TextIO | None = None) -> None:
    """Install (or replace) binloop's handler on the root logger."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(HANDLER_NAME)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    binloop_level = _LEVELS[level]
    root.setLevel(max(binloop_level, logging.WARNING))
    logging.getLogger("binloop").setLevel(binloop_level)


def current_format() -> str | None:
    """"json" or "text" once `setup_logging` ran, else None."""
    for handler in logging.getLogger().handlers:
        if handler.get_name() == HANDLER_NAME:
            return "json" if isinstance(handler.formatter, JsonFormatter) else "text"
    return None


def set_context(**fields: Any) -> None:
    """Fields added to every line from now on (e.g. the cluster process id)."""
    _context.update(fields)


def clear_context() -> None:
    _context.clear()


def json_line(logger: str, msg: str, level: str = "info", **fields: Any) -> bytes:
    """A JSON log line written by a sink rather than through `logging` (dead letters)."""
    return orjson.dumps({"ts": _iso_ms(time.time()), "level": level, "logger": logger,
                         "msg": msg, **_context, **fields}, default=str)


def configure_logging(config: Config) -> None:
    """binloop's logging from the settings, unless a command has already set it up."""
    if current_format() is None:
        setup_logging(config.log_format, config.log_level)
