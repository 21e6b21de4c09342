"""The life of one memory (a rule committed by a tool call, then followed in later turns and
new conversations, T1) through the real CLI, one process per command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RULE = "回答末尾总是加上 🦉"


def reverie(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"reverie {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    home = tmp_path_factory.mktemp("story-home")
    saved = dict(os.environ)
    os.environ["REVERIE_HOME"] = str(home)
    try:
        steps = {
            "hello": reverie("chat", "-p", "你好"),
            "rule": reverie("chat", "-p", f"设定：{RULE}"),
            "turn2": reverie("chat", "-p", "你好"),
            "turn3": reverie("chat", "-p", "再说一次"),
            "cached": reverie("prompt"),
            "fresh": reverie("prompt", "--fresh"),
            "history": reverie("history", "--json"),
            "new": reverie("chat", "--new", "-p", "新对话"),
            "new_prompt": reverie("prompt"),
            "memory": reverie("memory", "path"),
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return steps


def test_rule_is_committed_by_a_real_tool_call(story: dict[str, subprocess.CompletedProcess[str]]) -> None:
    out, activity = story["rule"].stdout, story["rule"].stderr
    assert "⚙ bash  cd " in activity and "✓ " in activity
    assert "↻ memory changed — <memory_update> injected" in activity
    assert "⚙" not in out and "↻" not in out, "text output keeps the reply alone on stdout"
    assert out.rstrip().endswith("🦉"), "the same turn's reply already follows the committed rule"
    memory = Path(story["memory"].stdout.strip())
    log = subprocess.run(["git", "-C", str(memory), "log", "--format=%s"], capture_output=True, text=True, check=True)
    assert log.stdout.splitlines()[0] == "feat: update persona"
    assert RULE in (memory / "persona.md").read_text(encoding="utf-8")


def test_later_turns_still_follow_the_rule(story: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert not story["hello"].stdout.rstrip().endswith("🦉")
    assert story["turn2"].stdout.rstrip().endswith("🦉")
    assert story["turn3"].stdout.rstrip().endswith("🦉")


def test_cached_prompt_lacks_the_rule_and_fresh_has_it(story: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert RULE not in story["cached"].stdout
    assert story["cached"].stderr.startswith("[cached · compiled ")
    assert RULE in story["fresh"].stdout
    assert story["fresh"].stderr.startswith("[fresh · compiled ")
    fresh_sha = story["fresh"].stderr.split("memfs ")[1][:7]
    assert story["cached"].stderr.split("memfs ")[1][:7] == fresh_sha, "the row already names the new revision"


def test_new_conversation_prompt_has_the_rule(story: dict[str, subprocess.CompletedProcess[str]]) -> None:
    assert RULE in story["new_prompt"].stdout
    assert story["new"].stdout.rstrip().endswith("🦉")


def test_update_is_persisted_in_history(story: dict[str, subprocess.CompletedProcess[str]]) -> None:
    rows = json.loads(story["history"].stdout)
    updates = [r for r in rows if r["kind"] == "memory_update"]
    assert len(updates) == 1
    assert updates[0]["content"].startswith("<system-reminder>\n<memory_update>\n")
    assert RULE in updates[0]["content"]
    kinds = [r["kind"] if r["role"] != "tool" else "tool" for r in rows]
    tool_index = kinds.index("tool")
    assert kinds[tool_index + 1] == "memory_update", "the update follows the committing tool call in the same turn"
    assert rows[0]["kind"] == "reminder" and "This is an automated message providing information about you." in rows[0]["content"]


def test_dirty_memory_reminder_once_per_turn_across_processes(tmp_path: Path) -> None:
    os.environ["REVERIE_HOME"] = str(tmp_path / "home")
    reverie("chat", "-p", "hello")
    memory = Path(reverie("memory", "path").stdout.strip())
    (memory / "human.md").write_text("---\nname: human\ndescription: d\n---\nuncommitted edit\n", encoding="utf-8")
    # the post-turn sync of "one" sees the edit; every later turn starts with exactly one reminder
    for text in ("one", "two", "three", "four"):
        reverie("chat", "-p", text)
    rows = json.loads(reverie("history", "--json").stdout)
    per_turn = [r["content"].count("MEMORY COMMIT NEEDED") for r in rows if r["kind"] == "reminder"]
    assert per_turn[-3:] == [1, 1, 1]
    subprocess.run(["git", "-C", str(memory), "commit", "-qam", "fix"], check=True, capture_output=True)
    reverie("chat", "-p", "five")
    reverie("chat", "-p", "six")
    rows = json.loads(reverie("history", "--json").stdout)
    last_user = [i for i, r in enumerate(rows) if r["kind"] == "message" and r["role"] == "user"][-1]
    assert "MEMORY COMMIT NEEDED" not in rows[last_user - 1]["content"]


def test_user_mistakes_are_one_line_errors(tmp_path: Path) -> None:
    os.environ["REVERIE_HOME"] = str(tmp_path / "home")
    cases = [
        ("chat", "--conversation", "nope", "-p", "x"),
        ("memory", "validate", str(tmp_path / "missing")),
        ("memory", "install-hook", str(tmp_path), "--policy", "bogus"),
        ("chat", "--agent", "../evil", "-p", "x"),
    ]
    for args in cases:
        proc = reverie(*args, check=False)
        assert proc.returncode != 0, args
        assert "Traceback" not in proc.stderr, args
        assert proc.stderr.count("\n") <= 2 and "error" in proc.stderr.lower(), (args, proc.stderr)


def test_interactive_session_reads_turns_until_end_of_input(tmp_path: Path) -> None:
    env = dict(os.environ, REVERIE_HOME=str(tmp_path / "home"))
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "chat"],
        input="hello\nremember: always end answers with ~\nagain\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(mock) I heard: hello" in proc.stdout
    assert "↻ memory changed — <memory_update> injected" in proc.stdout
    assert "(mock) I heard: again ~" in proc.stdout
