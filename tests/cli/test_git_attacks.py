"""A1-A9 end to end: a model that attacks its own memory repository, played by the loopback
server through ``reverie chat -p`` with real bubblewrap and real git (items 1-3, 6, 9)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest

from orchestrator.testing.openai_server import LoopbackOpenAI, Planned, text_reply, tool_call_reply
from tests.memfs.tree_bombs import plant
from tests.support import running_with, wait_until

KEY = "sk-live-4b1d9e77c0a2_DO_NOT_LEAK"
MEMORY = Path("agents") / "agent-default" / "memory"


def _env(home: Path, server: LoopbackOpenAI, **extra: str) -> dict[str, str]:
    env = dict(os.environ, REVERIE_HOME=str(home), REVERIE_WORKTREES=str(home / "worktrees"))
    env.update(REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY=KEY)
    env.update(REVERIE_BACKEND="trio", **extra)
    return env


def _reverie(tmp_path: Path, server: LoopbackOpenAI, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    workspace = tmp_path / "project" / "ws"
    workspace.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True,
        text=True,
        cwd=workspace,
        env=_env(tmp_path / "home", server, **extra),
        timeout=180,
    )


def _bash(command: str) -> Planned:
    return tool_call_reply("bash", json.dumps({"command": command}))


def _events(home: Path, kind: str) -> list[dict[str, object]]:
    with closing(sqlite3.connect(home / "reverie.sqlite3")) as db:
        rows = db.execute("SELECT payload FROM events WHERE kind = ? ORDER BY id", (kind,)).fetchall()
    return [json.loads(row[0]) for row in rows]


_COPY = 'cp -a "$MEMORY_DIR/.git" "$PWD/evilgit"'
_PLANT = 'echo "$PWD/evilgit" > "$MEMORY_DIR/.git/commondir" && echo planted'
_FSMONITOR = """git config -f "$PWD/evilgit/config" core.fsmonitor 'env > "$REVERIE_HOME/ESCAPED-fsmonitor.txt"; false #'"""
_FILTER = (
    """git config -f "$PWD/evilgit/config" filter.evil.clean 'env > "$REVERIE_HOME/ESCAPED-filter.txt"; cat' && """
    """git config -f "$PWD/evilgit/config" filter.evil.smudge 'env > "$REVERIE_HOME/ESCAPED-filter.txt"; cat' && """
    """mkdir -p "$PWD/evilgit/info" && echo '* filter=evil' > "$PWD/evilgit/info/attributes" """
)
_REFLECTION_EDITS = (
    'echo "- likes green tea" >> human.md && git commit -qam "reflection: tea" && '
    'echo "draft, not committed" >> persona.md && echo edited'
)


@pytest.mark.parametrize("payload", [_FSMONITOR, _FILTER], ids=["fsmonitor", "filter-driver"])
def test_a_planted_commondir_runs_nothing_outside_the_sandbox(tmp_path: Path, payload: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello").returncode == 0
        server.enqueue(_bash(f"{_COPY} && {payload} && {_PLANT}"), text_reply("done"))
        attack = _reverie(tmp_path, server, "chat", "-p", "attack", "--output-format", "json")
        validate = _reverie(tmp_path, server, "memory", "validate")
        server.enqueue(_bash(_REFLECTION_EDITS), text_reply("reflected"))
        reflect = _reverie(tmp_path, server, "reflect")
        tool_results = [m["content"] for body in server.chat_bodies for m in body["messages"] if m["role"] == "tool"]
    assert tool_results[0].endswith("planted"), tool_results[0]
    assert tool_results[1].endswith("edited"), tool_results[1]
    assert attack.returncode == 0, attack.stderr
    assert validate.returncode == 0, validate.stderr
    assert reflect.returncode == 0, reflect.stderr
    assert sorted(p.name for p in home.glob("ESCAPED-*")) == []
    assert not (home / MEMORY / ".git" / "commondir").exists()
    warning = [line for line in attack.stderr.splitlines() if "planted .git/commondir" in line]
    assert len(warning) == 1 and warning[0].startswith("reverie: warning: "), attack.stderr
    result = json.loads(attack.stdout.splitlines()[-1])
    assert [w for w in result["warnings"] if "planted .git/commondir" in w] == [warning[0].removeprefix("reverie: warning: ")]
    assert any("planted .git/commondir" in str(e["message"]) for e in _events(home, "memory.warning"))
    memory = home / MEMORY
    log = subprocess.run(["git", "-C", str(memory), "log", "--format=%s"], capture_output=True, text=True, check=True)
    assert "reflection: tea" in log.stdout
    user_status = subprocess.run(["git", "-C", str(memory), "status", "--porcelain"], capture_output=True, text=True)
    assert user_status.returncode == 0
    assert sorted(p.name for p in home.glob("ESCAPED-*")) == []


def _git_out(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_a_commit_works_at_once_after_a_kill_9_during_a_sandboxed_pathspec_commit(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    memory = home / MEMORY
    workspace = tmp_path / "project" / "ws"
    workspace.mkdir(parents=True)
    edit = 'cd "$MEMORY_DIR" && printf "Prefers short answers.\\n" >> persona.md'
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello").returncode == 0
        server.enqueue(_bash(f'{edit} && GIT_EDITOR="sleep 30.0923; true" git commit -- persona.md'))
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "chat", "-p", "remember it"],
            cwd=workspace, env=_env(home, server), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            assert _wait_for(lambda: bool(running_with("30.0923", program="sleep"))), "the commit never reached its editor"
            left = sorted(p.name for p in (memory / ".git").iterdir() if p.name.endswith(".lock") and "reverie" not in p.name)
            proc.kill()
            proc.wait(30)
            killed = time.monotonic()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert "index.lock" in left and any(name.startswith("next-index-") for name in left), left
        server.enqueue(
            _bash('cd "$MEMORY_DIR" && git commit -q -m "after the crash" -- persona.md && echo committed'),
            text_reply("saved"),
        )
        after = _reverie(tmp_path, server, "chat", "-p", "save it again", "--output-format", "json")
        elapsed = time.monotonic() - killed
        tool_results = [m["content"] for m in server.chat_bodies[-1]["messages"] if m["role"] == "tool"]
    assert after.returncode == 0, after.stderr
    assert tool_results[-1].endswith("committed"), tool_results[-1]
    assert _git_out(memory, "log", "-1", "--format=%s") == "after the crash"
    assert "Prefers short answers." in _git_out(memory, "show", "HEAD:persona.md")
    assert [p.name for p in (memory / ".git").iterdir() if p.name.endswith(".lock") and "reverie" not in p.name] == []
    stale = [line for line in after.stderr.splitlines() if "removed a stale" in line]
    assert len(stale) == len(left) and all(line.startswith("reverie: warning: ") for line in stale), after.stderr
    assert len([e for e in _events(home, "memory.warning") if "stale" in str(e["message"])]) == len(left)
    print(f"kill -9 to the next commit landing: {elapsed:.2f} s")
    assert elapsed < 30


def _wait_for(condition: Callable[[], bool], seconds: float = 90.0) -> bool:
    try:
        wait_until(condition, timeout=seconds, what="the condition")
    except AssertionError:
        return False
    return True


def test_a_memory_commit_that_fails_is_a_warning_and_a_reminder(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    memory = home / MEMORY
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello").returncode == 0
        server.enqueue(
            _bash('cd "$MEMORY_DIR" && printf "Likes tea.\\n" >> human.md && git commit -qam "tea"'),
            text_reply("saved"),
        )
        with (memory / ".git" / "index.lock").open("w"):  # an editor's git holds it, alive
            turn = _reverie(tmp_path, server, "chat", "-p", "remember tea", "--output-format", "json")
        (memory / ".git" / "index.lock").unlink()
        server.enqueue(text_reply("noted"))
        assert _reverie(tmp_path, server, "chat", "-p", "anything else?").returncode == 0
        next_request = json.dumps(server.chat_bodies[-1])
    assert turn.returncode == 0, turn.stderr
    result = json.loads(turn.stdout.splitlines()[-1])
    landed = [w for w in result["warnings"] if "did not land" in w]
    assert len(landed) == 1 and "index.lock" in landed[0] and "git commit" in landed[0], result
    assert f"reverie: warning: {landed[0]}" in turn.stderr.splitlines()
    assert "Your last commit did not land" in next_request and "index.lock" in next_request
    assert any("did not land" in str(e["message"]) for e in _events(home, "memory.warning"))


_RULES = " && ".join(
    f'printf -- "- rule {n}\\n" >> persona.md && git commit -qam "rule {n}"' for n in (1, 2, 3)
)


def test_a_deleted_branch_is_restored_from_the_reflog_never_reinitialised(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    memory = home / MEMORY
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello").returncode == 0
        server.enqueue(
            _bash(f'cd "$MEMORY_DIR" && {_RULES} && git update-ref -d refs/heads/main && echo gone'), text_reply("done")
        )
        attack = _reverie(tmp_path, server, "chat", "-p", "three rules")
        moves = [line.split()[1] for line in (memory / ".git" / "logs" / "HEAD").read_text().splitlines()]
        tip = [sha for sha in moves if sha.strip("0")][-1]
        results = [m["content"] for m in server.chat_bodies[-1]["messages"] if m["role"] == "tool"]
        assert results[-1].endswith("gone"), results
        server.enqueue(text_reply("still here"))
        after = _reverie(tmp_path, server, "chat", "-p", "what are the rules?")
        prompt = json.dumps(server.chat_bodies[-1])
    assert attack.returncode == 0 and after.returncode == 0, after.stderr
    assert _git_out(memory, "rev-parse", "refs/heads/main") == tip
    assert [_git_out(memory, "log", "-1", "--format=%s")] == ["rule 3"]
    assert _git_out(memory, "rev-list", "--count", "--max-parents=0", "HEAD") == "1"
    persona = (memory / "persona.md").read_text()
    assert all(f"- rule {n}" in persona for n in (1, 2, 3)) and "- rule 3" in prompt
    restored = [line for line in after.stderr.splitlines() if "restored it from the reflog" in line]
    assert len(restored) == 1 and restored[0].startswith("reverie: warning: "), after.stderr


def test_history_without_a_branch_or_a_reflog_is_refused_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    memory = home / MEMORY
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello").returncode == 0
        server.enqueue(
            _bash(f'cd "$MEMORY_DIR" && {_RULES} && git update-ref -d refs/heads/main && rm -rf .git/logs && echo gone'),
            text_reply("done"),
        )
        assert _reverie(tmp_path, server, "chat", "-p", "three rules").returncode == 0
        refused = _reverie(tmp_path, server, "chat", "-p", "hello again")
    assert refused.returncode == 1
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and "has history but no refs/heads/main" in lines[0] and "update-ref refs/heads/main" in lines[0]
    assert "- rule 3" in (memory / "persona.md").read_text()
    assert not (memory / ".git" / "refs" / "heads" / "main").exists()


def test_off_warns_once_and_a_hooks_path_to_dev_null_is_repaired(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    memory = home / MEMORY
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello", REVERIE_SANDBOX="off").returncode == 0
        server.enqueue(_bash('git -C "$MEMORY_DIR" config core.hooksPath /dev/null && echo disabled'), text_reply("done"))
        attack = _reverie(tmp_path, server, "chat", "-p", "no more hooks", REVERIE_SANDBOX="off")
        server.enqueue(text_reply("fine"))
        after = _reverie(tmp_path, server, "chat", "-p", "hello again", REVERIE_SANDBOX="off")
    assert attack.returncode == 0, attack.stderr
    assert attack.stderr.count("sandbox = off: bash commands run unconfined") == 1
    assert after.returncode == 0, after.stderr
    repaired = [line for line in after.stderr.splitlines() if "core.hooksPath" in line]
    assert len(repaired) == 1 and repaired[0].startswith("reverie: warning: ") and "Traceback" not in after.stderr
    unset = subprocess.run(["git", "-C", str(memory), "config", "--local", "--get", "core.hooksPath"], capture_output=True)
    assert unset.returncode == 1
    assert "orchestrator.memfs.hook" in (memory / ".git" / "hooks" / "pre-commit").read_text()


def test_off_hides_the_key_in_reverie_s_own_environment_block(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    probe = 'cat /proc/$PPID/environ | tr "\\0" "\\n" | grep OPENAI_API_KEY'
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(_bash(probe), text_reply("done"))
        done = _reverie(tmp_path, server, "chat", "-p", "look around", REVERIE_SANDBOX="off")
        bodies = json.dumps(server.chat_bodies)
        results = [m["content"] for m in server.chat_bodies[-1]["messages"] if m["role"] == "tool"]
    assert done.returncode == 0, done.stderr
    assert results and results[0].startswith("OPENAI_API_KEY=**"), results  # reverie's own, blanked
    assert KEY not in bodies


def test_a_corrupt_index_is_rebuilt_from_head_and_the_commit_lands(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    memory = home / MEMORY
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello").returncode == 0
        server.enqueue(
            _bash('cd "$MEMORY_DIR" && head -c 200 /dev/urandom > .git/index && printf -- "- tea\\n" >> human.md && git commit -qam tea; echo tried'),
            _bash('cd "$MEMORY_DIR" && git commit -qam tea && echo committed'),
            text_reply("saved"),
        )
        turn = _reverie(tmp_path, server, "chat", "-p", "remember tea", "--output-format", "json")
        results = [m["content"] for m in server.chat_bodies[-1]["messages"] if m["role"] == "tool"]
    assert turn.returncode == 0, turn.stderr
    assert results[-1].endswith("committed"), results
    assert _git_out(memory, "log", "-1", "--format=%s") == "tea"
    assert (memory / ".git" / "index.corrupt").exists()
    rebuilt = [line for line in turn.stderr.splitlines() if "index was corrupt" in line]
    assert len(rebuilt) == 1 and rebuilt[0].startswith("reverie: warning: "), turn.stderr
    assert _git_out(memory, "status", "--porcelain") == ""


def test_a_missing_head_object_is_a_loud_warning(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    memory = home / MEMORY
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello").returncode == 0
        blob = _git_out(memory, "rev-parse", "HEAD:persona.md")
        (memory / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
        turn = _reverie(tmp_path, server, "chat", "-p", "anything", "--output-format", "json")
    result = json.loads(turn.stdout.splitlines()[-1])
    damaged = [w for w in result["warnings"] if "is missing the objects of persona.md" in w]
    assert len(damaged) == 1 and "fsck" in damaged[0], result
    assert f"reverie: warning: {damaged[0]}" in turn.stderr.splitlines()
    assert any("persona.md" in str(e["message"]) for e in _events(home, "memory.warning"))


def test_reflect_on_a_read_only_memory_directory_ends_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    memory = home / MEMORY
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello, I like tea").returncode == 0
        read_only = ["bwrap", "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--ro-bind", str(memory), str(memory)]
        done = subprocess.run(
            [*read_only, sys.executable, "-m", "orchestrator", "reflect"],
            capture_output=True, text=True, cwd=tmp_path / "project" / "ws", env=_env(home, server), timeout=180,
        )
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("reverie: error: ") and "Read-only file system" in lines[0], done.stderr


_PEAK = (
    "import resource, subprocess, sys\n"
    "code = subprocess.run(sys.argv[1:]).returncode\n"
    "print('peak-rss-kb', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _measured(tmp_path: Path, server: LoopbackOpenAI, *args: str) -> tuple[subprocess.CompletedProcess[str], float, int]:
    """``reverie ARGS`` run under a small parent that reports the peak resident memory of its children
    (reverie and every git it starts); (result without that line, seconds, peak KB)."""
    workspace = tmp_path / "project" / "ws"
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, sys.executable, "-m", "orchestrator", *args],
        capture_output=True, text=True, cwd=workspace, env=_env(tmp_path / "home", server), timeout=180,
    )  # fmt: skip
    seconds = time.monotonic() - start
    *said, peak = done.stderr.rstrip("\n").split("\n")
    assert peak.startswith("peak-rss-kb "), done.stderr
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout, "\n".join(said)), seconds, int(peak.split()[1])


@pytest.mark.parametrize(
    ("fanout", "levels", "cap"),
    [pytest.param(10, 7, "MAX_TREE_PATHS", id="ten-million-paths"), pytest.param(1, 5000, "MAX_TREE_DEPTH", id="5000-deep")],
)
def test_a_head_of_shared_subtrees_costs_a_turn_seconds_and_megabytes(tmp_path: Path, fanout: int, levels: int, cap: str) -> None:
    """A HEAD whose ~100 bytes of tree objects stand for 10^7 paths, or nest 5,000 folders: the turn
    answers from the last valid commit with a warning, and ``memory validate --head`` names the cap
    in one line; neither expands the tree (A11; docs/architecture.md, "Bounded trees")."""
    with LoopbackOpenAI(fallback=text_reply("ok")) as server:
        server.enqueue(text_reply("ready"))
        assert _reverie(tmp_path, server, "chat", "-p", "hello").returncode == 0
        memory = tmp_path / "home" / MEMORY
        valid = _git_out(memory, "rev-parse", "HEAD")
        plant(memory, fanout=fanout, levels=levels)
        server.enqueue(text_reply("answered"))
        chat, chat_seconds, chat_peak = _measured(tmp_path, server, "chat", "-p", "still there?")
        validate, validate_seconds, validate_peak = _measured(tmp_path, server, "memory", "validate", "--head")
        system = server.chat_bodies[-1]["messages"][0]["content"]
    assert chat.returncode == 0 and chat.stdout.strip() == "answered", chat.stderr
    assert "HEAD that fails validation" in chat.stderr and "Traceback" not in chat.stderr
    assert "<persona>" in system and "bomb" not in system
    assert chat_seconds < 10 and chat_peak < 300_000, (chat_seconds, chat_peak)
    assert validate.returncode == 1 and "Traceback" not in validate.stderr
    why = [line for line in validate.stderr.splitlines() if f"({cap})" in line]
    assert len(why) == 1 and why[0].strip().startswith("bomb/d"), validate.stderr
    assert validate_seconds < 10 and validate_peak < 300_000, (validate_seconds, validate_peak)
    assert _git_out(memory, "rev-parse", "HEAD~1") == valid
