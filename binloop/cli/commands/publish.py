"""`binloop publish`: replay a telemetry file onto the JetStream stream."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from binloop.core.config import Config, add_arguments, load_config, positive_int


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "publish", help="publish a telemetry file onto the NATS stream",
        description="Publish each record of FILE on telemetry.<session_id>.<tool> with "
                    "Nats-Msg-Id = its id (or, with --batch N, envelopes of up to N records "
                    "of one tool, header Binloop-Batch: jsonl), waiting for the stream's "
                    "acknowledgements. The stream is created when missing.")
    parser.add_argument("file", metavar="FILE", help="JSONL or JSONL.gz telemetry; - reads "
                        "standard input as it comes (tail -F FILE | binloop publish -)")
    parser.add_argument("--rate", type=float, default=None, metavar="N",
                        help="records per second (default: as fast as the stream takes them)")
    parser.add_argument("--batch", type=positive_int, default=1, metavar="N",
                        help="records per message (default 1: no envelopes)")
    add_arguments(parser, "publish")
    parser.set_defaults(func=run)


# sysexits EX_TEMPFAIL: NATS was unreachable; publishing the same file again is safe.
NOT_STORED_EXIT = 75


def run(args: argparse.Namespace) -> int:
    from binloop.cli import report_error
    from binloop.nats.publish import NotStored

    config = load_config(args)
    if not config.nats:
        raise ValueError("--nats URL is required (e.g. nats://127.0.0.1:4222)")
    from binloop.replay.readers import list_input_files

    list_input_files(args.file)  # a missing file is a one-line error before connecting
    damaged: list[str] = []
    try:
        stats = publish_file(config, args.file, args.rate, args.batch, damaged)
    except NotStored as exc:
        report_error("publish", exc)
        return NOT_STORED_EXIT
    except ConnectionError as exc:
        from binloop.core.errors import ServiceUnavailable

        raise ServiceUnavailable(str(exc)) from None
    rate = stats.records / stats.elapsed_s if stats.elapsed_s else 0.0
    print(f"published {stats.records:,} records in {stats.messages:,} messages "
          f"({stats.duplicates:,} already stored, {stats.retries:,} sent again) in "
          f"{stats.elapsed_s:.2f}s, "
          f"{rate:,.0f} records/s", file=sys.stderr)
    if damaged:
        from binloop.core.errors import DataError

        raise DataError(f"input not published at {', '.join(damaged[:3])}"
                        f"{' ...' if len(damaged) > 3 else ''}: a damaged file (the records "
                        "before the damage were published) or a line no server takes; see "
                        "the dead letters")
    return 0


def publish_file(config: Config, path: str, rate: float | None, batch: int,
                 damaged: list[str] | None = None) -> Any:
    from binloop.nats.jetstream import ensure_telemetry_stream
    from binloop.nats.link import NatsLink
    from binloop.nats.publish import messages, publish_messages, read_in_thread, read_lines
    from binloop.replay.readers import STDIN
    from flows.live import source_settings

    settings = source_settings(config)

    async def publish(link: NatsLink) -> Any:
        js = link.nc.jetstream(timeout=10.0)
        await ensure_telemetry_stream(js, settings.stream, config.manage_stream)
        items = messages(read_lines(path, damaged), batch, config.subject_prefix)
        # stdin may wait for its writer: read it beside the event loop, not in it
        return await publish_messages(js, read_in_thread(items) if path == STDIN else items,
                                      rate, deadline_s=config.publish_deadline / 1000)

    with NatsLink(config.nats or "", "binloop-publish", settings.connect_timeout_s) as link:
        return link.run(publish(link), None)  # bounded by the publish deadline
