"""Detection throughput of `binloop run` while tools are being built, against no builds.

    python -m benchmarks.live_builds [--records 400000] [--keys 8] [--rounds 2] [--out DIR]

One embedded nats-server, one pre-filled telemetry stream (batch envelopes): `--keys`
keys fail θ = 3 times at the start of the stream (real payment mismatches, so that the
offline designer builds and gates a tool for each), then `--records` successful calls.
The live job (`binloop run`, its own process, one worker) reads the whole stream
twice per round: with `--no-build`, and with builds (library, build runner in the same
process). Throughput is the records of the stream over the time from the job's first
summary with records to the summary that has them all (the summary is refreshed each
epoch); the ratio of the two runs, in the same round, is the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
from nats.js.errors import NotFoundError

from binloop.nats.jetstream import connect, ensure_telemetry_stream, telemetry_stream_spec
from binloop.nats.publish import messages, publish_messages
from binloop.nats.server import NatsServer


def telemetry(records: int, keys: int) -> list[bytes]:
    t0, lines = 1_700_000_000_000, []
    for key in range(keys):
        for attempt in range(3):
            paid = 100 + attempt
            lines.append(orjson.dumps({
                "session_id": key, "ts": t0 + key * 10 + attempt, "tool": f"book_{key}",
                "failure_mode": "ARGS.payment_total_mismatch", "outcome": "failure",
                "args": {"payment_methods": [{"payment_id": f"gift_card_{key}", "amount": paid}]},
                "error": f"Error: payment amount does not add up, total price is 300, but "
                         f"paid {paid}"}))
    for i in range(records):
        lines.append(orjson.dumps({"session_id": 1000 + i // 1000, "ts": t0 + 1000 + i,
                                   "tool": f"tool_{i % 40}", "outcome": "success",
                                   "args": {"n": i}, "failure_mode": None}))
    return lines


async def _publish(url: str, lines: list[bytes], batch: int) -> None:
    nc = await connect(url, "bench-publisher", 30)
    js = nc.jetstream(timeout=30)
    await ensure_telemetry_stream(js, telemetry_stream_spec("TELEMETRY", "telemetry", 1))
    await publish_messages(js, messages(lines, batch))
    await nc.close()


async def _reset_outputs(url: str) -> None:
    """Drop the event and build streams of a previous run (the telemetry stays)."""
    nc = await connect(url, "bench-reset", 30)
    js = nc.jetstream(timeout=30)
    for stream in ("BIN_EVENTS", "BIN_BUILDS"):
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(stream)
    await nc.close()


def run_job(url: str, work: Path, total: int, build: bool) -> dict[str, Any]:
    asyncio.run(_reset_outputs(url))
    summary = work / "summary.json"
    env = {**os.environ, "BINLOOP_SUMMARY_OUT": str(summary)}
    args = [sys.executable, "-m", "binloop.cli", "run", "--nats", url, "--partitions", "1",
            "--until-idle", "3s", "--events-out", str(work / "events.jsonl"),
            "--dead-letter", str(work / "dead.jsonl")]
    args += ["--library", str(work / "lib"), "--rearm-backoff", "1h"] if build else ["--no-build"]
    job = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None
    while job.poll() is None:
        try:
            read = int(orjson.loads(summary.read_bytes())["records_read"])
        except (OSError, ValueError, KeyError):
            read = 0
        now = time.perf_counter()
        if read and first is None:
            first = (now, read)
        if read >= total and last is None:
            last = (now, read)
        time.sleep(0.02)
    _, err = job.communicate()
    if job.returncode != 0 or first is None or last is None or last[0] <= first[0]:
        raise RuntimeError(f"job failed or too fast to measure: {err.decode()[-2000:]}")
    builds = 0
    pending = work / "lib" / ".state" / "queue" / "pending"
    if pending.is_dir() and any(pending.iterdir()):
        print(f"warning: {len(list(pending.iterdir()))} builds still pending at the end; "
              f"{err.decode()[-1500:]}", file=sys.stderr)
    manifest = work / "lib" / "manifest.json"
    if manifest.exists():
        builds = len(orjson.loads(manifest.read_bytes())["tools"])
    return {"records_per_s": (last[1] - first[1]) / (last[0] - first[0]),
            "seconds": last[0] - first[0], "tools_gated": builds}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("out/live_builds"))
    args = parser.parse_args(argv)
    lines = telemetry(args.records, args.keys)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="binloop-bench-") as tmp, \
            NatsServer(store_dir=Path(tmp) / "nats") as server:
        asyncio.run(_publish(server.url, lines, args.batch))
        for number in range(args.rounds):
            row: dict[str, Any] = {}
            for build in (False, True):
                work = Path(tmp) / f"round{number}-{'builds' if build else 'plain'}"
                work.mkdir()
                row["builds" if build else "plain"] = run_job(server.url, work, len(lines),
                                                              build)
            row["ratio"] = row["builds"]["records_per_s"] / row["plain"]["records_per_s"]
            rounds.append(row)
            print(f"round {number}: {row}", file=sys.stderr)
    report = {"records": len(lines), "keys": args.keys, "rounds": rounds,
              "median_ratio": statistics.median(float(r["ratio"]) for r in rounds)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "live_builds.json").write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    table = ["| round | no builds (rec/s) | with builds (rec/s) | tools gated | ratio |",
             "|---|---|---|---|---|"]
    for number, row in enumerate(rounds):
        table.append(f"| {number} | {row['plain']['records_per_s']:,.0f} | "
                     f"{row['builds']['records_per_s']:,.0f} | {row['builds']['tools_gated']} | "
                     f"{row['ratio']:.2f} |")
    text = "\n".join(table) + f"\n\nmedian ratio {report['median_ratio']:.2f}\n"
    (args.out / "live_builds.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
