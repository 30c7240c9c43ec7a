from __future__ import annotations

from pathlib import Path

import pytest

from binloop.core.config import ConfigError, load_config, update_readme
from binloop.core.window import WindowSpec

README = Path(__file__).resolve().parents[1] / "README.md"


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


def test_readme_settings_table_is_current() -> None:
    text = README.read_text()
    assert update_readme(text) == text, "run: python -m binloop.core.config --update-readme"
