"""The input files of `binloop bench engines`, made again on demand (never committed).

- `anchor`: the file `../shared/bench/anchors.py make` writes (300 tools, 6 modes, 20%
  failures, small args, int sessions, no ids); where anchors.py is absent, the same
  shape is written here.
- `realistic`: records as an agent fleet's telemetry looks: string session ids, an
  agent id, args of a few hundred bytes (paths, commands, text), error texts on
  failures, ~7% failures and timeouts over the simulator's tools and failure modes,
  and the content-hash `id` the client sets.
- `invalid`: the realistic records with 10% invalid lines (cut lines, a string ts, a
  JSON array, a record without a tool, bytes that are not UTF-8), kinds that the anchors
  and binloop's schema all reject, so invalid counts and events can be compared.

Files are named by kind, size and seed and reused when present.
"""

from __future__ import annotations

import hashlib
import random
import subprocess
import sys
from pathlib import Path
from typing import Any, Final

import orjson

FILE_KINDS: Final = ("anchor", "realistic", "invalid")
_ANCHOR_TOOLS: Final = tuple(f"tool_{i}" for i in range(300))
_ANCHOR_MODES: Final = ("TIMEOUT", "NETWORK.refused", "ARGS.type", "NOTFOUND.file",
                        "SYNTAX.json", "PERM.denied")
_TOOLS: Final = ("read_file", "write_file", "search_code", "run_tests", "run_shell",
                 "git_commit", "git_push", "http_get", "http_post", "db_query",
                 "install_package", "lint", "type_check", "docker_build", "kubectl_apply",
                 "s3_upload", "send_email", "create_ticket", "search_web", "book_reservation",
                 "update_reservation_flights")
_MODES: Final = ("PERM.denied", "PERM.token_expired", "NOTFOUND.file", "NOTFOUND.module",
                 "TIMEOUT.exec", "TIMEOUT.http", "SYNTAX.json", "RUNTIME.type_error",
                 "RUNTIME.key_error", "ARGS.missing_field", "ARGS.bad_date",
                 "CONFLICT.merge", "NETWORK.connection_reset", "NETWORK.rate_limited",
                 "TOOL_GAP.no_pdf_reader")
_WORDS: Final = ("the", "build", "failed", "because", "module", "payment", "order", "retry",
                 "user", "session", "cache", "config", "deploy", "service", "request",
                 "timeout", "schema", "record", "token", "branch", "merge", "reservation")
_ERRORS: Final = (
    "ConnectionResetError: [Errno 104] Connection reset by peer while POST {url}",
    "PermissionError: [Errno 13] Permission denied: '{path}'",
    "FileNotFoundError: [Errno 2] No such file or directory: '{path}'",
    "TimeoutError: command '{cmd}' did not finish within 120 s",
    "json.decoder.JSONDecodeError: Expecting ',' delimiter: line 3 column {n} (char {m})",
    "KeyError: 'customer_id' in handler {path}:{n}",
    "HTTP 429 Too Many Requests from {url}: retry after {n} s",
    "ValueError: invalid date '2024-13-{n}' for field departure_date",
)


def anchors_script(explicit: str | None) -> Path | None:
    """`anchors.py`: the given path, else ../shared/bench/anchors.py beside the repo."""
    if explicit:
        path = Path(explicit)
        return path if path.is_file() else None
    root = Path(__file__).resolve().parent.parent
    for candidate in (root.parent / "shared" / "bench" / "anchors.py",
                      root.parent.parent / "shared" / "bench" / "anchors.py"):
        if candidate.is_file():
            return candidate
    return None


def bench_file(kind: str, records: int, workdir: Path, seed: int,
               anchors: Path | None) -> Path:
    """The input file of `kind` with `records` lines, written when absent."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{kind}-{records}-s{seed}.jsonl"
    if path.exists():
        return path
    partial = path.with_suffix(".partial")
    if kind == "anchor" and anchors is not None:
        subprocess.run([sys.executable, str(anchors), "make", str(partial), str(records)],
                       check=True)
    elif kind == "anchor":
        _write(partial, _anchor_lines(records))
    else:
        _write(partial, _realistic_lines(records, seed, invalid=kind == "invalid"))
    partial.replace(path)
    return path


def _write(path: Path, lines: Any) -> None:
    with open(path, "wb") as out:
        buffer: list[bytes] = []
        for line in lines:
            buffer.append(line)
            if len(buffer) >= 10_000:
                out.write(b"\n".join(buffer) + b"\n")
                buffer.clear()
        if buffer:
            out.write(b"\n".join(buffer) + b"\n")


def _anchor_lines(n: int) -> Any:
    """anchors.py's `make`, for machines without ../shared (same shape, same seed rule)."""
    rng = random.Random(3)
    for i in range(n):
        ok = rng.random() < 0.8
        yield orjson.dumps({"session_id": i // 2000, "ts": 1_700_000_000_000 + i * 10,
                            "tool": rng.choice(_ANCHOR_TOOLS),
                            "outcome": "success" if ok else "failure",
                            "failure_mode": None if ok else rng.choice(_ANCHOR_MODES),
                            "duration_ms": 5, "args": {"i": i}})


def _text(rng: random.Random, low: int, high: int) -> str:
    words: list[str] = []
    size = rng.randint(low, high)
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(_WORDS))
    return " ".join(words)


def _args(rng: random.Random, tool: str, n: int) -> dict[str, Any]:
    path = f"src/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{n % 997}.py"
    return {"path": path, "cmd": f"pytest -q tests/test_{rng.choice(_WORDS)}.py -k {tool}",
            "cwd": "/workspace/app", "timeout_s": rng.randint(10, 600),
            "note": _text(rng, 40, 200), "flags": {"verbose": n % 2 == 0, "retries": n % 4}}


def _realistic_lines(n: int, seed: int, invalid: bool) -> Any:
    rng = random.Random(seed)
    ts = 1_700_000_000_000
    agents = [f"agent-{a:03d}" for a in range(40)]
    for i in range(n):
        ts += rng.randint(1, 40)
        if invalid and rng.random() < 0.10:
            yield _invalid_line(rng, i, ts)
            continue
        agent = rng.choice(agents)
        roll = rng.random()
        outcome = ("failure" if roll < 0.055 else "timeout" if roll < 0.07
                   else "cancelled" if roll < 0.075 else "success")
        tool = rng.choice(_TOOLS)
        body: dict[str, Any] = {
            "session_id": f"sess-{agent}-{i // 500:06d}", "agent_id": agent, "ts": ts,
            "tool": tool, "args": _args(rng, tool, i), "outcome": outcome,
            "duration_ms": rng.randint(5, 30_000), "failure_mode": None}
        if outcome in ("failure", "timeout"):
            body["failure_mode"] = rng.choice(_MODES)
            body["error"] = rng.choice(_ERRORS).format(
                url=f"https://api.example.com/v1/orders/{i}", path=body["args"]["path"],
                cmd=body["args"]["cmd"], n=i % 97, m=i % 4099)
        body["id"] = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
        yield orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _invalid_line(rng: random.Random, i: int, ts: int) -> bytes:
    good = orjson.dumps({"session_id": f"sess-{i}", "ts": ts, "tool": "run_tests",
                         "outcome": "failure", "failure_mode": "TIMEOUT.exec",
                         "args": {"i": i}})
    kind = rng.randrange(5)
    if kind == 0:
        return good[: len(good) // 2]
    if kind == 1:
        return good.replace(f'"ts":{ts}'.encode(), b'"ts":"yesterday"')
    if kind == 2:
        return b"[1,2,3]"
    if kind == 3:
        return good.replace(b'"tool":"run_tests",', b"")
    return b"\xff\xfe" + good[2:]
