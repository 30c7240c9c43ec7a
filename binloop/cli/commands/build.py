"""`binloop build`: run the BIN build pipeline for one BINEvent by hand.

Exit codes: 0 a tool was gated into the library, 2 the build rolled back cleanly
(the reason is printed), 1 an internal error (bad event file, library I/O).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from binloop.core.config import add_arguments, load_config
from binloop.core.display import shown
from binloop.core.errors import DataError, InputError, UsageError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "build", help="design, build, check, test and gate a tool for one BINEvent",
        description="Run the BIN build pipeline (pause, design, build, check, test, gate, "
                    "reload, resume) for one BINEvent. Exit 0: tool gated; 2: clean "
                    "rollback; 1: the build failed inside the runner; 64 usage, 65 an "
                    "invalid event, 66 no event file (docs/robustness.md).")
    parser.add_argument("--event", required=True, metavar="FILE",
                        help="a BINEvent as JSON, or JSONL of events (see --event-id)")
    parser.add_argument("--event-id", metavar="PREFIX",
                        help="which event of a JSONL file (prefix of its event_id)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_arguments(parser, "build")
    parser.set_defaults(func=run)


def select_event(path: Path, prefix: str | None) -> Any:
    """The one event of the file (or the one whose event_id starts with `prefix`)."""
    from pipeline_runner.event_input import InvalidEvent, check_event, parse_event

    text = path.read_bytes()
    try:
        whole = orjson.loads(text)
    except orjson.JSONDecodeError:
        events = [parse_event(line) for line in text.splitlines() if line.strip()]
    else:
        events = [check_event(whole)]
    chosen = [e for e in events if prefix is None or e["event_id"].startswith(prefix)]
    if len(chosen) != 1:
        raise InvalidEvent(f"{path} holds {len(events)} events, {len(chosen)} match "
                           f"{prefix!r}: give --event-id with a unique prefix")
    return chosen[0]


def run(args: argparse.Namespace) -> int:
    from pipeline_runner.event_input import InvalidEvent, check_event
    from pipeline_runner.factory import make_runner

    config = load_config(args)
    if config.library:
        check_creatable(Path(config.library))
    path = Path(args.event)
    if not path.is_file():
        raise InputError(f"event file {path} does not exist" if not path.exists()
                         else f"event file {path} is not a regular file")
    try:
        event = check_event(select_event(path, args.event_id))  # before anything is written
    except InvalidEvent as exc:
        raise DataError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if config.library:
        from binloop.replay.jsonl import ensure_output_dir

        ensure_output_dir(config.library)
    try:
        runner = make_runner(config)
    except (ImportError, AttributeError, TypeError) as exc:
        raise UsageError(f"cannot make the build runner: {exc}") from None
    result = runner.build(event)
    if args.json:
        print(orjson.dumps(result.summary(), option=orjson.OPT_INDENT_2).decode())
    else:
        for stage in result.stages:
            note = f"  {stage.reason.splitlines()[0][:160]}" if stage.reason else ""
            print(f"{stage.stage:<8} {stage.outcome:<8} {stage.duration_ms:>10.1f} ms{note}")
        if result.tool:
            print(f"gated {shown(result.tool['name'])} v{result.tool['version']} "
                  f"({result.tool['status']}) -> {result.tool['path']}")
    if result.outcome != "gated":
        print(f"binloop build: {result.outcome.replace('_', ' ')}: {result.reason}",
              file=sys.stderr)
    return result.exit_code


def check_creatable(library: Path) -> None:
    """Raise OutputError unless `library` exists as a directory or can be made (checked
    without writing anything: a refused event must leave no trace)."""
    import os

    from binloop.core.errors import OutputError

    ancestor = library
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputError(f"cannot create library {library}: {ancestor} is not a directory")
    if ancestor != library and not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputError(f"cannot create library {library}: {ancestor} is not writable")
