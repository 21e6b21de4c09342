"""One declaration and one parser per setting (``base/config.py``): every way a reflection trigger
or a compaction mode comes in (the config file, the environment, a command-line flag, a suite file,
a sweep, the library) is refused with the same reason, which names the allowed values, behind the
name the value was given under. Library refusals name parameters, never flags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from orchestrator import open_session, run_suite, sweep
from orchestrator.base.choices import BadValue, Choice, Choices
from orchestrator.base.config import (
    COMPACTION_MODES,
    REFLECTION_TRIGGERS,
    ConfigError,
    Flags,
    load_settings,
    parse_setting,
)
from orchestrator.base.errors import ReverieError
from orchestrator.base.paths import Home
from orchestrator.batch.suite import SuiteError, parse_suite
from orchestrator.batch.sweep import expand_triggers
from orchestrator.cli.batch import register
from orchestrator.compaction import CompactionMode
from subagents.triggers import POLICIES

TRIGGER_REASON = f"use {REFLECTION_TRIGGERS.allowed()}"
MODE_REASON = f"use {COMPACTION_MODES.allowed()}"
TASK = {"id": "t", "turns": ["hello"], "checks": [{"contains": "hello"}]}


def test_the_reasons_name_every_allowed_value() -> None:
    assert TRIGGER_REASON == "use off, compaction-event, step-count:N or idle:SECONDS"
    assert MODE_REASON == "use sliding_window or all"
    assert set(CompactionMode.__args__) == set(COMPACTION_MODES.names)  # type: ignore[attr-defined]
    assert list(POLICIES) == list(REFLECTION_TRIGGERS.names)


def test_a_choice_takes_its_argument_only_where_declared() -> None:
    choices = Choices((Choice("plain"), Choice("every", "N", "count")))
    assert choices.parse(" plain ") == (Choice("plain"), None)
    assert choices.parse("every:3") == (Choice("every", "N", "count"), "3")
    for bad in ("plain:3", "sometimes", "", "every-3"):
        with pytest.raises(BadValue, match=r"^use plain or every:N$"):
            choices.parse(bad)


def test_the_parser_sets_what_an_argument_implies_and_checks_it_as_its_own_setting() -> None:
    assert parse_setting("reflection_trigger", "step-count:5") == {
        "reflection_trigger": "step-count", "reflection_step_count": 5
    }
    assert parse_setting("reflection_trigger", "idle:90") == {"reflection_trigger": "idle", "reflection_idle_seconds": 90.0}
    assert parse_setting("reflection_trigger", "idle") == {"reflection_trigger": "idle"}
    with pytest.raises(BadValue, match=r"^idle:SECONDS: must be a positive number$"):
        parse_setting("reflection_trigger", "idle:-1")
    with pytest.raises(BadValue, match=r"^step-count:N: expected a whole number$"):
        parse_setting("reflection_trigger", "step-count:x")


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def _suite(tmp_path: Path, settings: dict[str, Any] | None = None) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({**TASK, "settings": settings or {}}) + "\n", encoding="utf-8")
    return path


def _refusal(call: Callable[[], Any], kind: type[Exception] = ReverieError) -> str:
    with pytest.raises(kind) as caught:
        call()
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_bad_trigger_is_refused_alike_by_every_reader(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[reflection]\ntrigger = "sometimes"\n', encoding="utf-8")
    from_file = _refusal(lambda: load_settings(environ={}, path=config), ConfigError)
    assert from_file.endswith(f"config.toml: reflection.trigger = 'sometimes': {TRIGGER_REASON}")
    from_env = _refusal(lambda: load_settings(environ={"REVERIE_REFLECTION_TRIGGER": "sometimes"}, path=tmp_path / "none"))
    assert from_env == f"REVERIE_REFLECTION_TRIGGER = 'sometimes': {TRIGGER_REASON}"
    from_flags = _refusal(lambda: load_settings(cli=Flags(reflection_trigger="sometimes"), environ={}, path=tmp_path / "none"))
    assert from_flags == f"--reflection-trigger = 'sometimes': {TRIGGER_REASON}"
    from_library = _refusal(lambda: load_settings(cli={"reflection_trigger": "sometimes"}, environ={}, path=tmp_path / "none"))
    assert from_library == f"reflection_trigger = 'sometimes': {TRIGGER_REASON}"
    from_suite = _refusal(lambda: parse_suite(json.dumps({**TASK, "settings": {"reflection_trigger": "sometimes"}}), source="s.jsonl"), SuiteError)
    assert from_suite == f"s.jsonl:1: settings.reflection_trigger: 'sometimes': {TRIGGER_REASON}"
    assert _refusal(lambda: expand_triggers(["sometimes"])) == f"triggers 'sometimes': {TRIGGER_REASON}"
    swept = CliRunner().invoke(_cli(), ["sweep", str(_suite(tmp_path)), "--trigger", "sometimes", "--out", str(tmp_path / "o")])
    assert swept.exit_code != 0 and f"--trigger 'sometimes': {TRIGGER_REASON}" in swept.output
    assert not (tmp_path / "o").exists()


@pytest.mark.anyio
async def test_the_library_names_its_parameters(tmp_path: Path) -> None:
    suite, home = _suite(tmp_path), Home(tmp_path / "home")
    with pytest.raises(ReverieError) as caught:
        await sweep(suite, "o", tmp_path / "a")
    assert str(caught.value) == f"triggers 'o': {TRIGGER_REASON}"
    with pytest.raises(ReverieError) as caught:
        async with open_session("ada", home=home, settings={"reflection_trigger": "sometimes"}):
            pass
    assert str(caught.value) == f"reflection_trigger = 'sometimes': {TRIGGER_REASON}"
    with pytest.raises(ReverieError) as caught:
        await run_suite(suite, tmp_path / "b", context_window=10)
    assert str(caught.value) == "context_window = 10: must be at least 256"
    for price in ("price_in", "price_out"):
        with pytest.raises(ReverieError) as caught:
            await run_suite(suite, tmp_path / "c", **{price: -1})
        assert str(caught.value) == f"{price} = -1: must be zero or more"
        with pytest.raises(ReverieError) as caught:
            async with open_session("ada", home=home, **{price: -1.0}):
                pass
        assert str(caught.value) == f"{price} = -1.0: must be zero or more"
    with pytest.raises(ReverieError) as caught:
        async with open_session("ada", home=home, settings={"bogus": 1}):
            pass
    assert str(caught.value).startswith("settings: unknown setting 'bogus' (known: ")
    assert not any((tmp_path / d).exists() for d in ("a", "b", "c"))


@pytest.mark.anyio
async def test_a_single_string_is_one_trigger(tmp_path: Path) -> None:
    report = await sweep(_suite(tmp_path), "off", tmp_path / "sweep")
    assert [row["setting"] for row in report.rows] == ["off"]
    assert [s.label for s in expand_triggers("step-count:2,3")] == ["step-count-2", "step-count-3"]


def test_a_bad_compaction_mode_is_refused_alike_by_every_reader(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[compaction]\nmode = "half"\n', encoding="utf-8")
    assert _refusal(lambda: load_settings(environ={}, path=config)).endswith(f"compaction.mode = 'half': {MODE_REASON}")
    from_env = _refusal(lambda: load_settings(environ={"REVERIE_COMPACTION_MODE": "half"}, path=tmp_path / "none"))
    assert from_env == f"REVERIE_COMPACTION_MODE = 'half': {MODE_REASON}"
    from_suite = _refusal(lambda: parse_suite(json.dumps({**TASK, "settings": {"compaction_mode": "half"}}), source="s.jsonl"))
    assert from_suite == f"s.jsonl:1: settings.compaction_mode: 'half': {MODE_REASON}"
    flag = subprocess.run(
        [sys.executable, "-m", "orchestrator", "compact", "--mode", "half"], capture_output=True, text=True,
        env={**os.environ, "REVERIE_HOME": str(tmp_path / "home")}, timeout=120,
    )  # fmt: skip
    assert flag.returncode != 0 and f"--mode 'half': {MODE_REASON}" in flag.stderr, flag.stderr


@pytest.mark.anyio
async def test_the_library_compacts_only_in_a_declared_mode(tmp_path: Path) -> None:
    async with open_session("ada", home=Home(tmp_path / "home")) as chat:
        with pytest.raises(ReverieError) as caught:
            await chat.compact(mode="half")  # type: ignore[arg-type]
    assert str(caught.value) == f"compaction_mode = 'half': {MODE_REASON}"

