from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from binloop.core.config import Config, ConfigError, load_config
from binloop.core.window import WindowSpec

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_precedence_default_file_env_flag(tmp_path: Path) -> None:
    toml = tmp_path / "job.toml"
    toml.write_text('theta = 4\nwindow = "global"\nsession_gap = "10m"\n')
    env = {"BINLOOP_CONFIG": str(toml), "BINLOOP_THETA": "5"}
    config = load_config({"window": "sliding:90s"}, env)
    assert config.theta == 5  # env beats file
    assert config.window == WindowSpec("sliding", 90_000)  # flag beats file
    assert config.session_gap == 600_000  # file beats default
    assert config.evidence_max == 10  # default


def test_bad_values_name_the_setting_and_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="environment theta"):
        load_config({}, {"BINLOOP_THETA": "zero"})
    with pytest.raises(ConfigError, match="flag window"):
        load_config({"window": "tumbling"}, {})
    toml = tmp_path / "bad.toml"
    toml.write_text("thetta = 3\n")
    with pytest.raises(ConfigError, match="unknown setting 'thetta'"):
        load_config({}, {}, toml)


def test_config_round_trips_through_env() -> None:
    config = load_config({"theta": "2", "window": "sliding:10m", "count_outcomes": "failure",
                          "mode_level": "1", "max_future_skew": "off"}, {})
    assert load_config({}, config.to_env()) == config


def test_the_docs_render_every_setting_from_its_declaration() -> None:
    sys.path.insert(0, str(DOCS))
    try:
        from hooks import on_page_markdown  # the mkdocs hook that fills the settings table
    finally:
        sys.path.pop(0)
    page = (DOCS / "configuration.md").read_text()
    rendered = on_page_markdown(page)
    assert rendered != page
    for f in dataclasses.fields(Config):
        assert f"| `{f.name}` |" in rendered, f.name


def test_parts_built_without_a_config_take_the_declared_defaults(tmp_path: Path) -> None:
    """Each default is declared once: what a part uses when no `Config` is given is what
    the config declares (a literal beside it would drift; θ=3 once did)."""
    import inspect

    from binloop.nats.jetstream import CONNECT_TIMEOUT_S, StreamSpec
    from pipeline_runner.factory import target_of, timeouts_of
    from pipeline_runner.nats_pause_resume import NatsControl
    from pipeline_runner.queue import BuildQueue
    from pipeline_runner.rearm import RearmScheduler
    from pipeline_runner.runner import StageTimeouts
    from pipeline_runner.sandbox import Limits
    from pipeline_runner.targets.python import PythonTarget
    from pipeline_runner.targets.typescript import TypeScriptTarget
    from sinks.nats_events import NatsEventSettings

    config = load_config({}, {})
    python = target_of(config)
    assert isinstance(python, PythonTarget)
    assert (PythonTarget().check_limits, PythonTarget().test_limits) == (
        python.check_limits, python.test_limits)
    typescript = target_of(config.replace(target="typescript", toolchain_dir=str(tmp_path)))
    assert isinstance(typescript, TypeScriptTarget)
    alone = TypeScriptTarget(tmp_path)
    assert (alone.typescript, alone.check_limits, alone.test_limits) == (
        typescript.typescript, typescript.check_limits, typescript.test_limits)
    assert Limits().memory_mb == config.sandbox_memory_mb
    assert Limits().processes == config.sandbox_processes
    assert StageTimeouts() == timeouts_of(config)

    def given(func: object, name: str) -> object:
        return inspect.signature(func).parameters[name].default  # type: ignore[arg-type]

    assert given(BuildQueue, "max_pending") == config.build_queue_max
    assert given(RearmScheduler, "base_s") * 1000 == config.rearm_backoff
    assert given(RearmScheduler, "max_s") * 1000 == config.rearm_backoff_max
    assert given(NatsControl, "pause_timeout_s") * 1000 == config.pause_timeout
    assert given(NatsControl, "prefix") == config.control_subject_prefix
    assert given(NatsControl, "registry_subject") == config.registry_subject
    spec = StreamSpec("S", ("s.>",))
    assert (spec.storage, spec.replicas, spec.duplicate_window_s * 1000) == (
        config.stream_storage, config.stream_replicas, config.duplicate_window)
    assert config.connect_timeout == CONNECT_TIMEOUT_S * 1000
    assert NatsEventSettings("nats://x", spec).prefix == config.events_subject_prefix
