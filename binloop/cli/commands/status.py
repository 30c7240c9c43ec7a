"""`binloop status`: the live job's and the tool library's state."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from binloop.core.config import add_arguments, load_config
from binloop.core.display import shown
from binloop.core.errors import ServiceUnavailable

STATUS_SETTINGS = ("nats", "connect_timeout", "stream", "subject_prefix", "events_stream",
                   "library")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "status", help="the live job's state (streams, positions, counters, last events) "
                       "and the tool library's",
        description="Read the job's state from NATS: the telemetry stream and its partitions, "
                    "the running job's consumer positions, the BINEvents stream and its last "
                    "events, the counters the job publishes to its status bucket; and the "
                    "tool library's manifest with --library.")
    add_arguments(parser, "status", extra=STATUS_SETTINGS)
    parser.add_argument("--events", type=int, default=5, metavar="N",
                        help="how many of the last BINEvents to show (default: 5)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import orjson

    from binloop.library.status import library_status
    from binloop.ops.status_report import StatusQuery, gather

    config = load_config(args)
    if not config.nats:
        raise ValueError("--nats URL is required (e.g. nats://127.0.0.1:4222)")
    query = StatusQuery(config.nats, config.stream, config.subject_prefix, config.events_stream,
                        config.status_bucket, config.job_name, max(0, args.events),
                        config.connect_timeout / 1000)
    try:
        report = gather(query)
    except ConnectionError as exc:
        raise ServiceUnavailable(str(exc)) from None
    if config.library:
        report["library"] = library_status(config.library)
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print("\n".join(render(report)))
    return 0


def render(report: dict[str, Any]) -> list[str]:
    now = report["checked"]
    lines = [f"NATS {report['nats']}"]
    lines += _telemetry(report["telemetry"], now)
    lines += _events(report["events"])
    lines += _job(report["job"], now)
    if "library" in report:
        lines += _library(report["library"])
    return lines


def _ago(ts: float | None, now: float) -> str:
    if not ts:
        return "never"
    seconds = max(0.0, now - ts)
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def _telemetry(stream: dict[str, Any], now: float) -> list[str]:
    if not stream["exists"]:
        return [f"telemetry stream {stream['name']}: missing (binloop run creates it)"]
    parts = stream["partitions"]
    lines = [f"telemetry stream {stream['name']}: {stream['messages']:,} messages, "
             f"{stream['bytes']:,} bytes, seq {stream['first_seq']}..{stream['last_seq']}, "
             f"{parts if parts is not None else 'no'} partitions, "
             f"last message {_ago(stream['last_ts'], now)}"]
    consumers = stream.get("consumers") or []
    if not consumers:
        lines.append("  no job is reading it now (no binloop consumers)")
    for c in consumers:
        lines.append(f"  partition {c['partition']}: read up to seq {c['delivered_stream_seq']}, "
                     f"{c['pending']:,} pending")
    return lines


def _events(stream: dict[str, Any]) -> list[str]:
    if not stream["exists"]:
        return [f"events stream {stream['name']}: missing (no event yet)"]
    lines = [f"events stream {stream['name']}: {stream['messages']:,} events"]
    for e in stream.get("last") or []:
        fired = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime((e["fired_ts"] or 0) / 1000))
        lines.append(f"  {fired}Z {shown(e['tool'])} {shown(e['failure_mode'])} session "
                     f"{shown(e['session_id'])} "
                     f"count {e['count']} ({str(e['event_id'])[:12]})")
    return lines


def _counters(values: dict[str, Any]) -> str:
    return (f"records read {values.get('records_read', 0):,} | valid {values.get('valid', 0):,}"
            f" | invalid {values.get('invalid', 0):,} | counted {values.get('counted', 0):,} | "
            f"duplicates {values.get('duplicates', 0):,} | late {values.get('late', 0):,} | "
            f"events fired {values.get('events_fired', 0):,}")


def _job(job: dict[str, Any], now: float) -> list[str]:
    published = job["published"]
    head = f"job {job['name']} (status bucket {job['bucket']})"
    if published is None:
        return [f"{head}: no status bucket (the job has not published yet)"]
    lines = [head + ":"]
    summary = published["summary"]
    if summary is None:
        lines.append("  no summary published yet")
    else:
        lines.append(f"  summary, updated {_ago(summary.get('updated'), now)}: "
                     f"{_counters(summary)}")
    for pid, proc in sorted(published["processes"].items(), key=lambda kv: int(kv[0])):
        lines.append(_process(pid, proc, now))
    return lines


def _process(pid: str, proc: dict[str, Any], now: float) -> str:
    m = proc.get("metrics") or {}
    stale = proc.get("state") == "running" and now - float(proc.get("updated") or 0) > 60
    state = "not heard of for over a minute" if stale else proc.get("state")
    partitions = ", ".join(f"{name} @{p.get('position')} ({p.get('pending', '?')} pending)"
                           for name, p in sorted((m.get("partitions") or {}).items()))
    lag = m.get("event_time_lag_s")
    return (f"  process {pid} ({proc.get('host')}, pid {proc.get('pid')}, "
            f"{proc.get('workers')} worker(s)): {state}, updated {_ago(proc.get('updated'), now)}"
            f"; read {m.get('records_read', 0):,} records, fired {m.get('events_fired', 0):,}"
            + (f", event-time lag {lag:.1f}s" if lag is not None else "")
            + (f"; partitions {partitions}" if partitions else ""))


def _library(lib: dict[str, Any]) -> list[str]:
    head = f"library {lib['path']}"
    if lib["state"] != "ok":
        detail = f" ({lib['error']})" if lib.get("error") else ""
        return [f"{head}: {lib['state']}{detail}"]
    counts = ", ".join(f"{n} {status}" for status, n in lib["by_status"].items())
    lines = [f"{head}: manifest version {lib['version']}, {len(lib['tools'])} tools: {counts}"]
    unsafe = lib.get("unsafe_builds") or []
    if unsafe:
        built = ", ".join(f"{u['tool']} v{u['version']}" for u in unsafe)
        lines.append(f"  WARNING: built with --sandbox unsafe (generated code ran unconfined): "
                     f"{built}")
    for t in lib["tools"]:
        lines.append(f"  {shown(t['name'])} v{t['version']} {t['status']} ({t['target']}) "
                     f"answers {shown(t['answers']['tool'])} "
                     f"{shown(t['answers']['failure_mode'])}; uses "
                     f"{t['uses']['ok']} ok, {t['uses']['failed']} failed")
    return lines
