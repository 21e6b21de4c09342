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


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[turn]\nbash_timeout = 1e308\n", "turn.bash_timeout = 1e+308: must be at most 86,400"),
        ("[turn]\nmax_steps = 10000000\n", "turn.max_steps = 10000000: must be at most 100,000"),
        ("[model]\nrequest_timeout = 1e9\n", "model.request_timeout = 1000000000.0: must be at most 86,400"),
        ("[model]\nmax_response_chars = 0\n", "model.max_response_chars = 0: must be positive"),
        ("[model]\nstream_idle_timeout = inf\n", "model.stream_idle_timeout = inf: must be a positive number"),
        ('[tools]\nsandbox = "docker"\n', "tools.sandbox = 'docker': use auto, bwrap or off"),
        ('[tools]\nnetwork = "maybe"\n', "tools.network = 'maybe': expected true or false"),
        ('[tools]\nenv = ["OPENAI_API_KEY"]\n', "OPENAI_API_KEY looks like a secret"),
        ('[tools]\nenv = ["GITHUB_TOKEN"]\n', "GITHUB_TOKEN looks like a secret"),
        ('[tools]\nenv = ["not a name"]\n', "'not a name' is not an environment variable name"),
        ("[tools]\nenv = 5\n", "tools.env = 5: expected a list of environment variable names"),
        ("[tools]\nwrite_limit_mb = 0\n", "tools.write_limit_mb = 0: must be positive"),
        ("[tools]\nwrite_limit_mb = 0.5\n", "tools.write_limit_mb = 0.5: expected a whole number"),
        ("[tools]\nwrite_limit_mb = 1e20\n", "tools.write_limit_mb = 1e+20: must be at most 1,048,576"),
    ],
)
def test_bounds_and_tool_settings_name_the_key(tmp_path: Path, toml: str, needle: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, toml)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_tool_and_bound_settings_resolve(tmp_path: Path) -> None:
    settings = _load(
        tmp_path,
        '[tools]\nsandbox = "off"\nnetwork = false\nenv = ["EDITOR", "MY_VAR"]\n[model]\nmax_response_chars = 5000\n',
        REVERIE_REQUEST_TIMEOUT="5",
    )
    assert settings.sandbox == "off" and settings.network is False  # type: ignore[attr-defined]
    assert settings.tool_env == ("EDITOR", "MY_VAR")  # type: ignore[attr-defined]
    assert settings.request_timeout == 5.0 and settings.max_response_chars == 5000  # type: ignore[attr-defined]
    defaults = load_settings(environ={}, path=tmp_path / "none.toml")
    assert (defaults.sandbox, defaults.network, defaults.request_timeout, defaults.max_response_chars) == (
        "auto",
        True,
        600.0,
        1_000_000,
    )
    with pytest.raises(ConfigError, match="REVERIE_REQUEST_TIMEOUT = '1e308': must be at most"):
        _load(tmp_path, None, REVERIE_REQUEST_TIMEOUT="1e308")


def test_model_attempts_is_a_setting(tmp_path: Path) -> None:
    """Retries are a setting, so a caller (a test of a timeout, a user on a flaky link) picks how many
    attempts a failing request costs."""
    assert load_settings(environ={}, path=tmp_path / "none.toml").model_attempts == 4
    assert _load(tmp_path, "[model]\nattempts = 2\n").model_attempts == 2  # type: ignore[attr-defined]
    assert _load(tmp_path, "[model]\nattempts = 2\n", REVERIE_MODEL_ATTEMPTS="1").model_attempts == 1  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="REVERIE_MODEL_ATTEMPTS"):
        _load(tmp_path, None, REVERIE_MODEL_ATTEMPTS="0")


def test_an_endpoint_without_a_model_name_is_refused_before_any_request(isolated_env: Path) -> None:
    import os
    import subprocess
    import sys

    from orchestrator.testing.openai_server import LoopbackOpenAI

    with LoopbackOpenAI() as server:
        env = {**os.environ, "REVERIE_BASE_URL": server.base_url}
        env.pop("REVERIE_MODEL", None)
        refused = subprocess.run(
            [sys.executable, "-m", "orchestrator", "chat", "-p", "hello"], capture_output=True, text=True,
            env=env, timeout=300,
        )
        assert refused.returncode != 0
        assert refused.stderr.strip().count("\n") == 0 and "no model name configured" in refused.stderr, refused.stderr
        assert server.chat_bodies == [], "nothing was sent"
        named = subprocess.run(
            [sys.executable, "-m", "orchestrator", "chat", "-p", "hello", "--model", "m"], capture_output=True,
            text=True, env=env, timeout=300,
        )
        assert named.returncode == 0, named.stderr
        assert [body["model"] for body in server.chat_bodies] == ["m"]


def test_the_write_limit_is_a_setting(tmp_path: Path) -> None:
    assert load_settings(environ={}, path=tmp_path / "none.toml").write_limit_mb == 1024
    assert _load(tmp_path, "[tools]\nwrite_limit_mb = 64\n").write_limit_mb == 64  # type: ignore[attr-defined]
    assert _load(tmp_path, "[tools]\nwrite_limit_mb = 64\n", REVERIE_WRITE_LIMIT_MB="8").write_limit_mb == 8  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"^REVERIE_WRITE_LIMIT_MB = 'lots': expected a whole number$"):
        _load(tmp_path, None, REVERIE_WRITE_LIMIT_MB="lots")
