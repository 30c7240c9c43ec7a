"""Peak RSS of the idempotent JSONL writer opening (and appending to) big existing files.

Two cases, each in a fresh child process (peak RSS is the child's `ru_maxrss`):

* `events`: a file of ~`--events-mb` MB of BINEvent-like lines (each with an `event_id`
  and ~3 KB of evidence); the writer indexes every key, then appends one new event and
  skips a duplicate.
* `one-line`: a file holding one line of `--line-mb` MB; the writer skips it unread.

    python -m benchmarks.jsonl_memory [--events-mb 400] [--line-mb 300]

The files are written under ~/.cache/binloop/jsonl_memory/ (made again when missing).
Prints one JSON line per case: {"case", "file_mb", "peak_rss_mb", "indexed", "seconds"}.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import orjson

CACHE = Path.home() / ".cache" / "binloop" / "jsonl_memory"


def _event(n: int) -> bytes:
    event_id = hashlib.sha256(str(n).encode()).hexdigest()
    evidence = [{"id": hashlib.sha256(f"{n}.{i}".encode()).hexdigest(), "ts": n * 10 + i,
                 "tool": f"tool_{n % 300}", "args": {"q": "x" * 150, "i": i},
                 "error": "connection refused by upstream", "outcome": "failure",
                 "failure_mode": "NETWORK.refused", "session_id": f"s-{n}"} for i in range(6)]
    return orjson.dumps({"event_id": event_id, "tool": f"tool_{n % 300}", "count": 3,
                         "evidence": evidence}, option=orjson.OPT_SORT_KEYS)


def make_events(path: Path, megabytes: int) -> None:
    if path.exists() and path.stat().st_size >= megabytes << 20:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as out:
        n = 0
        while out.tell() < megabytes << 20:
            out.write(b"".join(_event(n + i) + b"\n" for i in range(1000)))
            n += 1000


def make_one_line(path: Path, megabytes: int) -> None:
    if path.exists() and path.stat().st_size >= megabytes << 20:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    chunk = b"x" * (1 << 20)
    with open(path, "wb") as out:
        out.write(b'{"event_id": "huge", "pad": "')
        for _ in range(megabytes):
            out.write(chunk)
        out.write(b'"}\n')


def child(path: str) -> None:
    from binloop.replay.jsonl import JsonlFileWriter, event_key

    started = time.perf_counter()
    writer = JsonlFileWriter(path, event_key)
    indexed = len(writer.keys)
    writer.write([_event(0), orjson.dumps({"event_id": "new-" + str(time.time_ns())})])
    writer.close()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"indexed": indexed, "peak_rss_mb": round(peak_kb / 1024, 1),
                      "seconds": round(time.perf_counter() - started, 2)}))


def measure(case: str, path: Path) -> dict[str, object]:
    # The appended lines are cut off again, so that every round sees the same file.
    size = path.stat().st_size
    try:
        out = subprocess.run([sys.executable, "-m", "benchmarks.jsonl_memory", "--child",
                              str(path)], check=True, capture_output=True, text=True).stdout
    finally:
        with open(path, "r+b") as file:
            file.truncate(size)
    return {"case": case, "file_mb": round(size / (1 << 20)), **json.loads(out)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events-mb", type=int, default=400)
    parser.add_argument("--line-mb", type=int, default=300)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    events = CACHE / f"events-{args.events_mb}mb.jsonl"
    one_line = CACHE / f"line-{args.line_mb}mb.jsonl"
    make_events(events, args.events_mb)
    make_one_line(one_line, args.line_mb)
    for case, path in (("events", events), ("one-line", one_line)):
        print(json.dumps(measure(case, path)), flush=True)


if __name__ == "__main__":
    main()
