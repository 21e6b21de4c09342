"""``reverie agents``, ``reverie config`` and conversation lists: what a home holds and why a setting
has its value, in lines a user can act on (real commands, scripted model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def reverie(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, **env}, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result


def test_agents_lists_chat_and_memory_init_agents_with_head_and_activity(isolated_env: Path) -> None:
    reverie("chat", "-p", "hello", "--agent", "ada")
    reverie("memory", "init", "--agent", "bob")
    lines = reverie("agents").stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["ada", "bob"]
    assert all(" HEAD " in line and " last 20" in line for line in lines), lines
    assert "memory only" in lines[1]
    refused = subprocess.run([sys.executable, "-m", "orchestrator", "history", "-a", "zed"], cwd=ROOT,
                             capture_output=True, text=True)
    assert "(agents: ada, bob)" in refused.stderr


def test_config_names_each_value_source(isolated_env: Path) -> None:
    (isolated_env / "config.toml").write_text('[turn]\nmax_steps = 7\n', encoding="utf-8")
    out = reverie("config", "--context-window", "9000", "--json", REVERIE_MODEL="from-env").stdout
    rows = json.loads(out)
    assert rows["model.name"] == {"value": "from-env", "source": "REVERIE_MODEL"}
    assert rows["compaction.context_window"] == {"value": 9000, "source": "--context-window"}
    assert rows["tools.network"]["value"] is True and rows["model.base_url"]["value"] is None
    assert rows["turn.max_steps"]["source"].endswith("config.toml: turn.max_steps")
    assert rows["turn.bash_timeout"]["source"] == "default"


def test_conversations_show_first_message_count_and_take_a_unique_prefix(isolated_env: Path) -> None:
    reverie("chat", "-p", "first topic: gardens", "--agent", "ada")
    reverie("chat", "-p", "second topic: bicycles", "--agent", "ada", "--new")
    listed = reverie("history", "--list", "--agent", "ada").stdout.splitlines()
    assert len(listed) == 2 and "first topic: gardens" in listed[0] and "second topic: bicycles" in listed[1]
    assert all("2 messages" in line and " last 20" in line for line in listed), listed
    prefix = listed[0].split()[0]
    shown = reverie("history", "--agent", "ada", "--conversation", prefix).stdout
    assert "first topic: gardens" in shown and "bicycles" not in shown


@pytest.mark.anyio
async def test_an_ambiguous_prefix_is_refused_naming_the_candidates(tmp_path: Path) -> None:
    from orchestrator.runtime.runtime import Runtime
    from orchestrator.store import StoreError

    async with Runtime.open(workspace=tmp_path) as rt:
        agent = await rt.agent("ada")
        one = await rt.store.create_conversation("ada")
        await rt.store.create_conversation("ada")
        assert (await rt.conversation(agent, conversation_id=one.id)).id == one.id
        with pytest.raises(StoreError, match="is ambiguous: 2 conversations"):
            await rt.conversation(agent, conversation_id="conv-")


def test_memory_tree_wraps_a_long_root_instead_of_cropping_it(tmp_path: Path) -> None:
    home = tmp_path / ("long-" * 20) / "home"
    reverie("memory", "init", "--agent", "ada", REVERIE_HOME=str(home))
    out = reverie("memory", "tree", "--agent", "ada", REVERIE_HOME=str(home), COLUMNS="80").stdout
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    root = "".join(line for line in lines[: lines.index(next(x for x in lines if x.startswith("├")))])
    assert root.startswith(str(home / "agents" / "ada" / "memory")) and " @ " in root, root


def test_config_for_an_agent_shows_the_model_set_on_it_with_its_source(isolated_env: Path) -> None:
    script = (
        "import anyio, orchestrator\n"
        "async def main():\n"
        "    async with orchestrator.open_session('ada') as chat:\n"
        "        await chat.set_model('other-model')\n"
        "anyio.run(main)\n"
    )
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=300)
    plain = reverie("config").stdout
    assert "model.name" in plain and "scripted   (default)" in plain
    shown = reverie("config", "--agent", "ada").stdout
    line = next(row for row in shown.splitlines() if row.startswith("model.name"))
    assert line.split() == ["model.name", "other-model", "(agent", "setting", "model)"], line
    rows = json.loads(reverie("config", "--agent", "ada", "--json").stdout)
    assert rows["model.name"] == {"value": "other-model", "source": "agent setting model"}
    flag = json.loads(reverie("config", "--agent", "ada", "--model", "flagged", "--json").stdout)
    assert flag["model.name"] == {"value": "flagged", "source": "--model"}


def test_config_for_an_unknown_agent_is_one_line(isolated_env: Path) -> None:
    refused = subprocess.run([sys.executable, "-m", "orchestrator", "config", "--agent", "zed"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0
    assert refused.stderr.strip().count("\n") == 0 and "no agent 'zed'" in refused.stderr, refused.stderr


def test_config_shows_the_limits_and_the_subagents_derived_defaults(isolated_env: Path) -> None:
    (isolated_env / "config.toml").write_text("[limits]\nsession_cost = 2.5\nsubagents = 2\n", encoding="utf-8")
    rows = json.loads(reverie("config", "--context-window", "9000", "--json").stdout)
    assert rows["limits.session_cost"]["value"] == 2.5 and rows["limits.subagents"]["value"] == 2
    assert rows["limits.reflection_tokens"] == {
        "value": 288_000, "source": "default: 32 x compaction.context_window"
    }  # fmt: skip
    assert rows["limits.compaction_seconds"]["value"] == 600.0
    assert rows["limits.turn_tokens"] == {"value": None, "source": "default"}
    plain = reverie("config").stdout
    assert "limits.resolver_tokens" in plain and "4096000" in plain
    import os

    bad = subprocess.run(
        [sys.executable, "-m", "orchestrator", "config"], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "REVERIE_LIMIT_SESSION_COST": "-1"}, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 1 and "REVERIE_LIMIT_SESSION_COST = '-1': must be a positive number" in bad.stderr
