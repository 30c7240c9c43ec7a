"""Outputs that are devices, pipes, directories or missing; bad values; names from
telemetry in listings (docs/robustness.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from binloop.core.display import shown
from binloop.core.errors import OutputError, OutputWriteError
from binloop.replay.jsonl import JsonlFileWriter, event_key

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000


def binloop(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "binloop.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, stdin=subprocess.DEVNULL)


@pytest.fixture
def telemetry(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(
        orjson.dumps({"session_id": 1, "ts": T0 + i, "tool": f"t{i % 2}", "outcome": "failure",
                      "failure_mode": "ARGS.x", "args": {"i": i}}) + b"\n" for i in range(12)))
    return path


@pytest.mark.parametrize("engine", ["reference", "polars", "bytewax"])
def test_devices_directories_and_missing_parents(engine: str, telemetry: Path,
                                                 tmp_path: Path) -> None:
    def detect(out: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return binloop("detect", "--engine", engine, "--input", str(telemetry), "--out", out,
                       *extra)

    assert detect("/dev/null").returncode == 0
    for out, code, words in ((str(tmp_path), 73, "is a directory"),
                             ("/proc/version", 73, "cannot open /proc/version for writing"),
                             ("/dev/full", 74, "No space left on device"),
                             (str(tmp_path / "no" / "dir" / "f.jsonl"), 73, "--mkdirs")):
        failed = detect(out)
        assert failed.returncode == code, failed.stderr
        (line,) = failed.stderr.splitlines()
        assert words in line
    assert not (tmp_path / "no").exists()
    made = detect(str(tmp_path / "no" / "dir" / "f.jsonl"), "--mkdirs")
    assert made.returncode == 0 and (tmp_path / "no" / "dir" / "f.jsonl").stat().st_size > 0


def test_a_pipe_is_written_as_a_stream(tmp_path: Path) -> None:
    fifo = tmp_path / "events.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    writer = JsonlFileWriter(fifo, event_key)
    assert writer.write([b'{"event_id": "a"}', b'{"event_id": "a"}', b'{"event_id": "b"}']) == 2
    writer.close()
    reader.join(10)
    assert received == [b'{"event_id": "a"}\n{"event_id": "b"}\n']


def test_writer_errors_are_one_line() -> None:
    with pytest.raises(OutputError, match="is a directory"):
        JsonlFileWriter("/tmp")
    full = JsonlFileWriter("/dev/full")
    with pytest.raises(OutputWriteError, match="No space left"):
        full.write([b"x" * 10])
    full.close()  # after a failed write, closing reports nothing more


@pytest.mark.parametrize("engine", ["reference", "polars", "bytewax"])
@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--window", "sliding:9999999999999999d", "longer than the limit of 36500d"),
    ("--session-gap", "99999999999999999999d", "longer than the limit of 36500d"),
    ("--session-gap", "-1m", "invalid duration '-1m'"),
    ("--allowed-lateness", "9999999999999d", "longer than the limit"),
    ("--theta", str(10**23), "is larger than 9223372036854775807"),
    ("--dedup-max", str(10**23), "is larger than 9223372036854775807"),
    ("--shards", str(2**63 - 1), "is more than 65536 shards"),  # not the machine's memory
])
def test_bad_values_are_one_line_usage_errors(engine: str, flag: str, value: str, words: str,
                                              telemetry: Path) -> None:
    proc = binloop("detect", "--engine", engine, "--input", str(telemetry), flag, value)
    assert proc.returncode == 64
    (line,) = proc.stderr.splitlines()
    assert words in line


def test_sweep_thetas_beyond_64_bits_are_a_usage_error(telemetry: Path, tmp_path: Path) -> None:
    proc = binloop("sweep", "--input", str(telemetry), "--out", str(tmp_path / "sw"),
                   "--thetas", f"2,{10**23}")
    assert proc.returncode == 64
    (line,) = proc.stderr.splitlines()
    assert "give integers from 1 to 2^63-1" in line


def test_shown_escapes_what_could_forge_a_listing() -> None:
    assert shown("book_flight") == "book_flight"
    assert shown("a\nb") == '"a\\nb"'
    assert shown("nul\x00x") == '"nul\\u0000x"'
    assert shown("\x1b[31mred") == '"\\u001b[31mred"'
    assert shown("say \"hi\"") == '"say \\"hi\\""'
    assert shown("\u202eevil") == '"\\u202eevil"'
    for text in ("a\nb", "x\x00", "\r", " lead", "tab\t"):
        assert "\n" not in shown(text) and shown(text).isprintable()


def test_tools_list_escapes_names_from_telemetry(gated: tuple[Path, str],
                                                 tmp_path: Path) -> None:
    from tests.agentkit import copy_library

    template, name = gated
    library = copy_library(template, tmp_path / "library")
    manifest_path = library / "manifest.json"
    manifest = orjson.loads(manifest_path.read_bytes())
    forged = "search\nfake_tool v9 stable python ok 99"
    manifest["tools"][name]["answers"] = {"tool": forged, "failure_mode": "ARGS.x\x00y"}
    manifest_path.write_bytes(orjson.dumps(manifest))
    listed = binloop("tools", "list", "--library", str(library))
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert len(lines) == 2  # the header and one tool: no forged line
    assert '"search\\nfake_tool v9 stable python ok 99" / "ARGS.x\\u0000y"' in lines[1]
    as_json = orjson.loads(binloop("tools", "list", "--library", str(library),
                                   "--json").stdout)
    assert as_json["tools"][0]["tool"] == forged  # JSON keeps the original
    show = binloop("tools", "show", name, "--library", str(library))
    assert "\\nfake_tool" in show.stdout and "search\nfake" not in show.stdout
