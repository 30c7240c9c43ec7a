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
