"""Bad settings are reported in the user's own words: the file and key, the variable, or the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.base.config import ConfigError, load_settings


def _load(tmp_path: Path, toml: str | None = None, **environ: str) -> object:
    path = tmp_path / "config.toml"
    if toml is not None:
        path.write_text(toml, encoding="utf-8")
    return load_settings(environ=environ, path=path)


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ('[turn]\nmax_steps = "abc"\n', "turn.max_steps = 'abc': expected a whole number"),
        ("[compaction]\ncontext_window = 1.5\n", "compaction.context_window = 1.5: expected a whole number"),
        ("[compaction]\ncontext_window = 100\n", "compaction.context_window = 100: must be at least 256"),
        ('[compaction]\nmode = "foo"\n', "compaction.mode = 'foo'"),
        ('[model]\nbase_url = "ftp://x"\n', "model.base_url = 'ftp://x': expected an http"),
        ("[model]\nbase_url = 5\n", "model.base_url = 5: expected a string"),
        ('[reflection]\ntrigger = "step-count:0"\n', "reflection.trigger = 'step-count:0'"),
        ("[model]\nname = \n", "not valid TOML: Invalid value (at line 2"),
    ],
)
def test_a_bad_file_setting_names_the_file_and_key(tmp_path: Path, toml: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, toml)
    message = str(caught.value)
    assert message.startswith(str(tmp_path / "config.toml")), message
    assert needle in message and "\n" not in message


def test_a_bad_environment_variable_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^REVERIE_MAX_STEPS = 'x': expected a whole number$"):
        _load(tmp_path, REVERIE_MAX_STEPS="x")
    with pytest.raises(ConfigError, match=r"^REVERIE_CONTEXT_WINDOW = '10': must be at least 256$"):
        _load(tmp_path, REVERIE_CONTEXT_WINDOW="10")


def test_a_config_path_that_is_a_directory_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "config.toml").mkdir()
    with pytest.raises(ConfigError, match="cannot read the config file"):
        _load(tmp_path)


def test_step_count_trigger_takes_its_count_inline(tmp_path: Path) -> None:
    settings = load_settings(environ={}, path=tmp_path / "config.toml", agent={"reflection_trigger": "step-count:7"})
    assert (settings.reflection_trigger, settings.reflection_step_count) == ("step-count", 7)
    idle = _load(tmp_path, REVERIE_STREAM_IDLE_TIMEOUT="5")
    assert idle.stream_idle_timeout == 5.0  # type: ignore[attr-defined]
