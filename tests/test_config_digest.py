"""The detection configuration digest in every event_id; re-runs into the same events
file; a library built before event ids had a digest (docs/robustness.md)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from binloop.core.config import Config
from binloop.core.detection import detect
from binloop.core.events import event_id
from binloop.core.schema import validate_record
from binloop.core.window import WindowSpec
from tests.agentkit import copy_library
from tests.buildkit import runner_for

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000_000
# Another value for every setting that can change an event.
CHANGED: dict[str, Any] = {
    "theta": 4, "window": WindowSpec.parse("sliding:10m"), "count_outcomes": frozenset({"failure"}),
    "mode_level": 1, "evidence_max": 2, "session_gap": 60_000, "allowed_lateness": 0,
    "dedup_max": 0, "args_max_bytes": 100, "max_future_skew": None,
    "extra_failure_codes": frozenset({"QUOTA"}), "ts_unit": "ms", "max_line_bytes": 4096,
    "failure_modes": "given",
}


def digest_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(Config) if f.metadata["digest"]]


def test_every_digest_setting_changes_the_event_id() -> None:
    assert set(CHANGED) == set(digest_fields()), "give each digest setting another value"
    records = [validate_record({"ts": T0 + i, "tool": "t", "failure_mode": "ARGS.x",
                                "session_id": 1, "outcome": "failure", "args": {"i": i}})
               for i in range(6)]
    base = Config()
    (fired,) = detect(base.detection(), records[:3])
    ids = {event_id("t", "ARGS.x", 0, base.config_digest())}
    assert fired["event_id"] in ids and fired["config"]["digest"] == base.config_digest()
    assert re.fullmatch(r"[0-9a-f]{64}", fired["event_id"])
    for name, value in CHANGED.items():
        other = base.replace(**{name: value})
        assert other.config_digest() != base.config_digest(), name
        ids.add(event_id("t", "ARGS.x", 0, other.config_digest()))
    assert len(ids) == 1 + len(CHANGED)
    # Settings that cannot change an event leave it alone.
    for name, value in {"engine": "polars", "batch_size": 7, "workers": 2, "out": "x",
                        "follow_symlinks": True, "mkdirs": True}.items():
        assert base.replace(**{name: value}).config_digest() == base.config_digest(), name


def test_a_copy_with_another_theta_has_that_configuration_s_digest() -> None:
    """Sweeps derive parameters with `dataclasses.replace`: the digest follows."""
    base = Config(ts_unit="s").detection()
    copy = dataclasses.replace(base, theta=5, window=WindowSpec("global"))
    assert copy.config_digest == Config(ts_unit="s", theta=5,
                                        window=WindowSpec("global")).config_digest()
    assert copy.config_digest != base.config_digest


def test_the_docs_list_exactly_the_digest_settings() -> None:
    text = (ROOT / "docs" / "robustness.md").read_text()
    table = text.split("<!-- digest-settings -->")[1].split("<!-- /digest-settings -->")[0]
    listed = re.findall(r"^\| `([a-z_]+)` \|", table, re.M)
    assert listed == digest_fields()


def test_a_digest_setting_may_digest_more_than_its_value() -> None:
    """The hook for a setting whose meaning depends on code (a classifier's version)."""
    from binloop.core.config import setting

    @dataclasses.dataclass(frozen=True)
    class Extended(Config):
        failure_modes: str = setting("given", "test setting", groups=(),
                                     digest=lambda mode: [mode, "classifier-v1"])

    settings = Extended().digest_settings()
    assert settings["failure_modes"] == ["given", "classifier-v1"]
    assert Extended().config_digest() != Config().config_digest()


def binloop(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "binloop.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


@pytest.fixture
def telemetry(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(
        orjson.dumps({"session_id": i % 2, "ts": T0 + i * 1000, "tool": f"t{i % 4}",
                      "outcome": "failure", "failure_mode": "ARGS.x", "args": {"i": i}}) + b"\n"
        for i in range(40)))
    return path


@pytest.mark.parametrize("engine", ["reference", "polars", "bytewax"])
def test_rerun_same_configuration_is_idempotent_another_is_refused(
        engine: str, telemetry: Path, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    first = binloop("detect", "--engine", engine, "--input", str(telemetry), "--theta", "2",
                    "--window", "global", "--out", str(out))
    assert first.returncode == 0, first.stderr
    written = out.read_bytes()
    assert written.count(b"\n") == 4
    again = binloop("detect", "--engine", engine, "--input", str(telemetry), "--theta", "2",
                    "--window", "global", "--out", str(out))
    assert again.returncode == 0 and out.read_bytes() == written
    other = binloop("detect", "--engine", engine, "--input", str(telemetry), "--theta", "4",
                    "--window", "session", "--out", str(out))
    assert other.returncode == 73
    (line,) = other.stderr.splitlines()
    old = Config(theta=2, window=WindowSpec("global")).config_digest()[:12]
    new = Config(theta=4).config_digest()[:12]
    assert f"digest {old}: theta=2 window=global" in line
    assert f"this run is digest {new}: theta=4 window=session" in line
    assert out.read_bytes() == written


def test_rerun_refuses_events_written_before_digests(telemetry: Path, tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    old_event = {"event_id": hashlib.sha256(orjson.dumps(["t0", "ARGS.x", 0])).hexdigest(),
                 "tool": "t0", "failure_mode": "ARGS.x", "config": {"theta": 2}}
    out.write_bytes(orjson.dumps(old_event) + b"\n")
    refused = binloop("detect", "--engine", "reference", "--input", str(telemetry),
                      "--out", str(out))
    assert refused.returncode == 73 and "no digest (an older binloop)" in refused.stderr


def test_a_key_a_gated_tool_answers_is_not_built_again(gated: tuple[Path, str],
                                                       tmp_path: Path) -> None:
    """A library built before event ids had a digest: its versions hold old ids, and the
    detector's new event for the same key is recognised as answered."""
    template, name = gated
    library = copy_library(template, tmp_path / "library")
    manifest_path = library / "manifest.json"
    manifest = orjson.loads(manifest_path.read_bytes())
    entry = manifest["tools"][name]
    key = entry["answers"]
    entry["event_id"] = hashlib.sha256(orjson.dumps([key["tool"], key["failure_mode"],
                                                     0])).hexdigest()  # the old formula
    manifest_path.write_bytes(orjson.dumps(manifest))
    event: Any = {"event_id": event_id(key["tool"], key["failure_mode"], 0,
                                       Config().config_digest()),
                  "tool": key["tool"], "failure_mode": key["failure_mode"], "theta": 3,
                  "window": "session", "session_id": 1, "count": 3, "first_ts": T0,
                  "fired_ts": T0, "arm_epoch": 0, "config": {},
                  # a real BINEvent carries its evidence (the runner refuses one without)
                  "evidence": [validate_record({"session_id": 1, "ts": T0 + i, "tool": key["tool"],
                                                "args": {"i": i}, "outcome": "failure",
                                                "failure_mode": key["failure_mode"],
                                                "error": "failed"}) for i in range(3)]}
    runner = runner_for(library)
    result = runner.build(event)
    assert result.outcome == "gated" and result.reason == "a gated tool already answers this key"
    assert result.tool is not None and result.tool["name"] == name
    assert orjson.loads(manifest_path.read_bytes()) == manifest  # nothing was built
    # A quarantined tool answers nothing: its key would be built again.
    runner.library.set_status(name, "quarantined", "test")
    assert runner._already_built(event) is None
