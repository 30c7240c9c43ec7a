"""The errors a command reports in one line, and the exit code of each (docs/robustness.md).

Codes follow BSD `sysexits.h`, so that they stay clear of each command's own outcomes
(`binloop build` exits 2 for a clean rollback):

| code | meaning |
|---|---|
| 0 | done |
| 64 | usage: a bad argument or setting (flag, environment, TOML file) |
| 65 | data: the run finished, but an input file was damaged (see the dead letters) |
| 66 | no input: an input file or directory is missing or unreadable |
| 69 | unavailable: a service (NATS) could not be reached |
| 70 | internal error (a bug: the traceback is logged at --log-level debug) |
| 73 | cannot create an output (missing directory, a directory, read-only, refused) |
| 74 | I/O error while writing an output (disk full, device error) |
"""

from __future__ import annotations

from typing import Final

EX_OK: Final = 0
EX_USAGE: Final = 64
EX_DATAERR: Final = 65
EX_NOINPUT: Final = 66
EX_UNAVAILABLE: Final = 69
EX_SOFTWARE: Final = 70
EX_CANTCREAT: Final = 73
EX_IOERR: Final = 74


class CommandError(Exception):
    """An error a command reports as one line and exits with `code`."""

    code: int = EX_SOFTWARE


class UsageError(CommandError, ValueError):
    """A bad argument or setting value."""

    code = EX_USAGE


class DataError(CommandError, ValueError):
    """An input that was read but is not what the command needs (an invalid event)."""

    code = EX_DATAERR


class InputError(CommandError, OSError):
    """An input path that cannot be read at all (missing, unreadable, no telemetry)."""

    code = EX_NOINPUT


class OutputError(CommandError, OSError):
    """An output that cannot be created or opened (or that a run refuses to touch)."""

    code = EX_CANTCREAT


class OutputWriteError(CommandError, OSError):
    """Writing an output failed (no space left, a device error)."""

    code = EX_IOERR


class ServiceUnavailable(CommandError, ConnectionError):
    """A service the command needs (NATS) could not be reached."""

    code = EX_UNAVAILABLE
