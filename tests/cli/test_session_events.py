"""``reverie events --agent``: a chat session's events read from the store, printed once or followed
live from a second process while the session runs in a first (the processes synchronise on the
lines they print, never on the clock)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def _env(home: Path) -> dict[str, str]:
    return dict(os.environ, REVERIE_HOME=str(home))


def _start(home: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator", *args], env=_env(home), text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _say(chat: subprocess.Popen[str], text: str) -> dict[str, object]:
    """Send one message and wait for its result line."""
    assert chat.stdin is not None and chat.stdout is not None
    chat.stdin.write(json.dumps({"type": "user", "text": text}) + "\n")
    chat.stdin.flush()
    for line in chat.stdout:
        obj = json.loads(line)
        if obj["type"] == "result":
            return dict(obj)
    raise AssertionError(f"the chat ended before answering {text!r}")


def _lines(stream: IO[str] | None) -> Iterator[dict[str, object]]:
    assert stream is not None
    for line in stream:
        yield json.loads(line)


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
    proc.communicate(timeout=30)


def test_a_second_process_follows_a_running_chat_session(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[reflection]\ntrigger = "step-count:2"\n', encoding="utf-8")
    chat = _start(tmp_path, "chat", "--agent", "watched", "--input-format", "stream-json", "--output-format", "json")
    follower: subprocess.Popen[str] | None = None
    # a deadline that fails loudly: killing the processes ends the streams the test reads
    watchdog = threading.Timer(120, lambda: [p.kill() for p in (chat, follower) if p is not None])
    watchdog.start()
    try:
        first = _say(chat, "hello")
        follower = _start(
            tmp_path, "events", "--agent", "watched", "--follow", "--json",
            "-k", "turn.start", "-k", "tool.start", "-k", "reflection.launch", "-k", "reflection.outcome",
        )  # fmt: skip
        seen = _lines(follower.stdout)
        event = next(seen)
        assert event["kind"] == "turn.start" and event["payload"]["turn_id"] == first["turn_id"]  # type: ignore[index]
        assert event["conversation_id"] == first["conversation_id"] and event["agent_id"] == "watched"
        # recorded after the follower printed the first: it can only have come by following
        second = _say(chat, "tell me more")
        event = next(seen)
        assert event["kind"] == "turn.start" and event["payload"]["turn_id"] == second["turn_id"]  # type: ignore[index]
        launched = next(seen)
        assert launched["kind"] == "reflection.launch", "step-count:2 launches after the second reply"
        reflection_id = launched["payload"]["reflection_id"]  # type: ignore[index]
        outcome = next(e for e in seen if e["kind"] == "reflection.outcome")
        assert outcome["payload"]["reflection_id"] == reflection_id  # type: ignore[index]
        assert outcome["payload"]["outcome"] == "no_changes"  # type: ignore[index]
    finally:
        watchdog.cancel()
        if follower is not None:
            _stop(follower)
        _stop(chat)


def test_events_of_a_session_once_and_the_mistakes(tmp_path: Path) -> None:
    def reverie(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator", *args], env=_env(tmp_path), input=stdin,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    assert reverie("chat", "-p", "hi").returncode == 0
    shown = reverie("events")
    assert shown.returncode == 0, shown.stderr
    kinds = [line.split()[2] for line in shown.stdout.splitlines()]
    assert kinds[0] == "turn.start" and "model.call" in kinds and kinds[-1] == "turn.end"
    conversation = shown.stdout.split()[1]
    only = reverie("events", "--conversation", conversation, "--kind", "turn.end", "--json")
    (row,) = [json.loads(line) for line in only.stdout.splitlines()]
    assert row["kind"] == "turn.end" and row["conversation_id"] == conversation and row["payload"]["status"] == "end_turn"
    for args, message in [
        (("events", "--agent", "nobody"), "no agent 'nobody' in this home's store (agents: agent-default)"),
        (("events", "--conversation", "conv-x"), "no conversation 'conv-x' of agent 'agent-default'"),
        (("events", str(tmp_path), "--agent", "a"), "give RUN_DIR (a batch run) or --agent (a chat session), not both"),
        (("events", str(tmp_path)), "a reverie home: `reverie events --agent A` prints a chat session's events"),
    ]:
        proc = reverie(*args)
        assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_events_follow_prints_every_documented_kind_formatted(tmp_path: Path) -> None:
    """V2: one stored event of every kind of docs/events.md, followed by ``reverie events --follow``
    in a second process: each is a formatted line (no raw JSON), a model call names its purpose and
    a memory commit its source."""
    # the doc's kinds and sample payloads, as the unit test of the line format reads them
    from tests.base.test_event_lines import KINDS, _sample

    seed = (
        "import anyio, json, sys\n"
        "from orchestrator.store import Store\n"
        "async def main():\n"
        "    async with Store.opened() as store:\n"
        "        await store.ensure_agent('every')\n"
        "        for kind, payload in json.loads(sys.stdin.read()):\n"
        "            await store.record_event(kind, payload, agent_id='every', conversation_id='conv-1')\n"
        "anyio.run(main)\n"
    )
    events = [
        [kind, {field: _sample(field) for field in fields}]
        for kind, fields in sorted(KINDS.items())
    ]
    for kind, payload in events:
        if kind == "model.call":
            payload["purpose"] = "resolve"
        if kind == "memory.commit":
            payload.update(source="other", by="edit from the other REPL")
    seeded = subprocess.run(
        [sys.executable, "-c", seed], env=_env(tmp_path), input=json.dumps(events), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert seeded.returncode == 0, seeded.stderr
    follower = _start(tmp_path, "events", "--agent", "every", "--follow")
    watchdog = threading.Timer(120, follower.kill)
    watchdog.start()
    try:
        assert follower.stdout is not None
        lines = [follower.stdout.readline().rstrip("\n") for _ in events]
    finally:
        watchdog.cancel()
        _stop(follower)
    assert [line.split("  ")[2] for line in lines] == [kind for kind, _ in events]
    for line in lines:
        detail = line.split("  ", 3)[3]
        assert detail and not detail.startswith("{") and '":' not in detail, line
    call = next(line for line in lines if "  model.call  " in line)
    assert call.split("  ", 3)[3].startswith("resolve <model>")
    commit = next(line for line in lines if "  memory.commit  " in line)
    assert "other:edit from the other REPL" in commit
