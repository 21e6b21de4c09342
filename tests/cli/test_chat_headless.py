"""Headless chat through the real CLI: json and stream-json output, stream-json input over one
process and one conversation, D13 exit codes, and Ctrl-C (SIGINT) storing the turn as
``interrupted`` with what was streamed. Both backends."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from orchestrator.testing.openai_server import LoopbackOpenAI, http_error, stall
from tests.support import wait_until

EVENT_KINDS = {
    "turn.start", "turn.end", "text.delta", "model.call", "model.retry", "tool.start", "tool.end",
    "memory.commit", "memory.update_injected", "reminder.queued", "compaction.start", "compaction.progress",
    "compaction.done", "compaction.failed", "reflection.launch", "reflection.merged", "reflection.kept",
    "reflection.failed", "result",
}  # fmt: skip


@pytest.fixture(params=["trio", "asyncio"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _env(home: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, REVERIE_HOME=str(home), **extra)


def reverie(home: Path, *args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *args],
        capture_output=True, text=True, env=_env(home, **env), input=stdin, timeout=120,
    )  # fmt: skip


def _db(home: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(home / "reverie.sqlite3") as conn:
        return list(conn.execute(sql))


def test_json_prints_one_result_object(tmp_path: Path, backend: str) -> None:
    proc = reverie(tmp_path, "chat", "-p", "hello", "--output-format", "json", REVERIE_BACKEND=backend)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["type"] == "result" and result["status"] == "end_turn" and result["exit_code"] == 0
    assert result["reply"] == "(mock) I heard: hello"
    assert result["turn_id"] == _db(tmp_path, "SELECT id FROM turns")[0][0]
    assert result["usage"]["prompt_tokens"] > 0 and result["usage"]["subagents"]["calls"] == 0
    assert result["memory"]["before"] == result["memory"]["after"] and len(result["memory"]["after"]) == 40
    assert "cost" not in result, "no prices, no cost"


def test_json_result_has_the_cost_when_prices_are_configured(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[model]\nprice_in = 3.0\nprice_out = 15.0\n", encoding="utf-8")
    result = json.loads(reverie(tmp_path, "chat", "-p", "hello", "--output-format", "json").stdout)
    usage = result["usage"]
    agent = round((usage["prompt_tokens"] * 3.0 + usage["completion_tokens"] * 15.0) / 1e6, 6)
    assert result["cost"] == {"total": agent, "agent": agent, "subagents": 0.0} and agent > 0


def test_stream_json_is_events_then_the_result(tmp_path: Path, backend: str) -> None:
    proc = reverie(
        tmp_path, "chat", "-p", "remember that I like owls", "--output-format", "stream-json", REVERIE_BACKEND=backend
    )
    assert proc.returncode == 0, proc.stderr
    objects = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {o["type"] for o in objects} <= EVENT_KINDS
    kinds = [o["type"] for o in objects]
    assert kinds[0] == "turn.start" and kinds[-1] == "result" and kinds.count("result") == 1
    assert "tool.start" in kinds and "tool.end" in kinds and kinds.index("turn.end") < kinds.index("result")
    result = objects[-1]
    assert result["reply"] == "Noted — I saved that to memory."
    assert result["memory"]["before"] != result["memory"]["after"]


def test_stream_json_input_answers_each_message_in_one_conversation(tmp_path: Path, backend: str) -> None:
    lines = "".join(json.dumps({"type": "user", "text": t}) + "\n" for t in ("one", "two", "three"))
    proc = reverie(tmp_path, "chat", "--input-format", "stream-json", stdin=lines, REVERIE_BACKEND=backend)
    assert proc.returncode == 0, proc.stderr
    results = [o for o in map(json.loads, proc.stdout.splitlines()) if o["type"] == "result"]
    assert [r["reply"] for r in results] == ["(mock) I heard: one", "(mock) I heard: two", "(mock) I heard: three"]
    assert len({r["conversation_id"] for r in results}) == 1
    assert _db(tmp_path, "SELECT COUNT(DISTINCT conversation_id), COUNT(*) FROM turns") == [(1, 3)]


def test_text_output_puts_the_reply_alone_on_stdout_and_activity_on_stderr(tmp_path: Path, backend: str) -> None:
    proc = reverie(tmp_path, "chat", "-p", "remember that I like owls", REVERIE_BACKEND=backend)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "Noted — I saved that to memory.\n"
    assert "⚙ bash" in proc.stderr and "↻ memory changed" in proc.stderr
    plain = reverie(tmp_path, "chat", "-p", "hi", REVERIE_BACKEND=backend)
    assert plain.stdout == "(mock) I heard: hi\n"


def test_p_dash_reads_the_message_from_stdin(tmp_path: Path) -> None:
    proc = reverie(tmp_path, "chat", "-p", "-", stdin="two lines\nof text\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "(mock) I heard: two lines\nof text\n"
    assert _db(tmp_path, "SELECT content FROM messages WHERE role = 'user' AND content LIKE 'two lines%'") == [
        ("two lines\nof text",)
    ]
    typer_path = reverie(tmp_path, "chat", "--context-window", "8000", "-p", "-", stdin="via typer\n")
    assert typer_path.stdout == "(mock) I heard: via typer\n", typer_path.stderr
    empty = reverie(tmp_path, "chat", "-p", "-", stdin="")
    assert empty.returncode == 1 and empty.stderr.strip().endswith("stdin is empty: pipe the message in, e.g. echo hi | reverie chat -p -")


def test_stream_json_input_with_text_output_marks_each_turn_on_stderr(tmp_path: Path) -> None:
    lines = "".join(json.dumps({"type": "user", "text": t}) + "\n" for t in ("one", "remember that I like owls", "three"))
    proc = reverie(tmp_path, "chat", "--input-format", "stream-json", "--output-format", "text", stdin=lines)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["(mock) I heard: one", "Noted — I saved that to memory.", "(mock) I heard: three"]
    turn_ids = [row[0] for row in _db(tmp_path, "SELECT id FROM turns ORDER BY started_at, rowid")]
    markers = [line for line in proc.stderr.splitlines() if line.startswith("── turn ")]
    assert markers == [
        f"── turn 1 · {turn_ids[0]} · one",
        f"── turn 2 · {turn_ids[1]} · remember that I like owls",
        f"── turn 3 · {turn_ids[2]} · three",
    ]
    between = proc.stderr.split(markers[1])[1].split(markers[2])[0]
    assert "⚙ bash" in between


def test_a_bad_input_line_is_named_and_the_rest_answered(tmp_path: Path) -> None:
    lines = '{"type": "user", "text": "one"}\n{"type": "user"}\nnot json\n{"type": "user", "text": "two"}\n'
    proc = reverie(tmp_path, "chat", "--input-format", "stream-json", "--output-format", "json", stdin=lines)
    assert proc.returncode == 1
    assert [json.loads(line)["reply"] for line in proc.stdout.splitlines()] == [
        "(mock) I heard: one",
        "(mock) I heard: two",
    ]
    errors = proc.stderr.strip().splitlines()
    assert errors == [
        'reverie: error: stdin line 2: field "text" must be a non-empty string',
        "reverie: error: stdin line 3: not JSON (Expecting value at column 1)",
    ]


def test_exit_codes_for_max_steps_and_a_model_error(tmp_path: Path) -> None:
    stopped = reverie(tmp_path, "chat", "-p", "remember that I like owls", "--output-format", "json", REVERIE_MAX_STEPS="1")
    assert stopped.returncode == 3, stopped.stderr
    assert json.loads(stopped.stdout)["status"] == "max_steps"
    with LoopbackOpenAI() as server:
        server.enqueue(http_error(400, "model 'nope' does not exist"))
        failed = reverie(tmp_path, "chat", "-p", "hi", REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY="sk-test")
    assert failed.returncode == 1
    assert "Traceback" not in failed.stderr and "reverie: error:" in failed.stderr


def test_sigint_interrupts_the_turn_keeps_the_streamed_text_and_exits_130(tmp_path: Path, backend: str) -> None:
    with LoopbackOpenAI() as server:
        server.enqueue(stall("partial answer that never ends", after=2, seconds=30))
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "chat", "-p", "go", "--output-format", "stream-json"],
            env=_env(tmp_path, REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY="sk-test", REVERIE_BACKEND=backend),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(json.loads(line))
            if seen[-1]["type"] == "text.delta":
                break
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=20)
        assert time.monotonic() - started < 10
    assert proc.returncode == 130
    result = json.loads(rest.strip().splitlines()[-1])
    assert result["status"] == "interrupted" and result["reply"]
    assert "partial answer that never ends".startswith(result["reply"])
    assert _db(tmp_path, "SELECT status FROM turns") == [("interrupted",)]
    kept = _db(tmp_path, "SELECT content, metadata FROM messages WHERE role = 'assistant'")
    assert len(kept) == 1 and kept[0][0] == result["reply"] and json.loads(str(kept[0][1]))["interrupted"] is True
    shown = reverie(tmp_path, "history")
    assert f"assistant (interrupted): {result['reply']}" in shown.stdout
    assert shown.stdout.rstrip().endswith("⏹ turn interrupted (Ctrl-C): what was streamed is kept")
    rows = json.loads(reverie(tmp_path, "history", "--json").stdout)
    assert {r["turn_status"] for r in rows if r["turn_id"]} == {"interrupted"}


def test_scripted_latency_is_checked(tmp_path: Path) -> None:
    proc = reverie(tmp_path, "chat", "-p", "hi", REVERIE_SCRIPTED_LATENCY="soon")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "REVERIE_SCRIPTED_LATENCY='soon'" in proc.stderr


def test_headless_flags_are_checked(tmp_path: Path) -> None:
    bad = reverie(tmp_path, "chat", "-p", "hi", "--output-format", "yaml")
    assert bad.returncode == 1 and "--output-format 'yaml'" in bad.stderr
    both = reverie(tmp_path, "chat", "-p", "hi", "--input-format", "stream-json")
    assert both.returncode == 1 and "leave out -p" in both.stderr


def _processes_with(marker: str) -> list[int]:
    """Processes whose command line starts with ``marker`` (the shell that runs it does not)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if cmdline.startswith(marker):
            found.append(int(entry.name))
    return found


def test_sigint_during_a_tool_ends_the_tool_and_its_children(tmp_path: Path, backend: str) -> None:
    from orchestrator.testing.openai_server import tool_call_reply

    marker = f"{os.getpid() % 1000}.{time.monotonic_ns() % 100000:05d}"
    command = f"(sleep 3{marker}; touch {tmp_path}/child-finished) & sleep 3{marker}; touch {tmp_path}/finished"
    with LoopbackOpenAI() as server:
        server.enqueue(tool_call_reply("bash", json.dumps({"command": command})))
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "chat", "-p", "go", "--output-format", "stream-json"],
            env=_env(tmp_path, REVERIE_BASE_URL=server.base_url, REVERIE_MODEL="loopback-model", OPENAI_API_KEY="sk-test", REVERIE_BACKEND=backend),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            if json.loads(line)["type"] == "tool.start":
                break
        wait_until(lambda: len(_processes_with(f"sleep 3{marker}")) == 2, timeout=60, what="the tool and its child")
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert json.loads(rest.strip().splitlines()[-1])["status"] == "interrupted"
    assert _processes_with(f"sleep 3{marker}") == []
    assert not (tmp_path / "finished").exists() and not (tmp_path / "child-finished").exists()


def _unended(home: Path) -> dict[str, list[str]]:
    """Background jobs of the store's event log without their one terminal event (and ids ended twice)."""
    rows = _db(home, "SELECT kind, payload FROM events ORDER BY id")
    ends = {"compaction": ("compaction.done", "compaction.failed", "compaction.cancelled", "compaction.superseded"),
            "reflection": ("reflection.outcome",)}  # fmt: skip
    starts = {"compaction": "compaction.start", "reflection": "reflection.launch"}
    key = {"compaction": "compaction_id", "reflection": "reflection_id"}
    found: dict[str, list[str]] = {}
    for job in ("compaction", "reflection"):
        started = [json.loads(str(p))[key[job]] for k, p in rows if k == starts[job]]
        ended = [json.loads(str(p)).get(key[job], "") for k, p in rows if k in ends[job]]
        ended = [e for e in ended if e]
        assert started, f"the session started no {job}"
        assert len(set(started)) == len(started)
        found[f"{job} without an end"] = [s for s in started if s not in ended]
        found[f"{job} ended twice"] = sorted({e for e in ended if ended.count(e) > 1})
    return found


_LONG_SESSION = {"REVERIE_CONTEXT_WINDOW": "4000"}


def _reflect_every_three_steps(home: Path) -> None:
    (home / "config.toml").write_text('[reflection]\ntrigger = "step-count:3"\n', encoding="utf-8")


def _words(i: int) -> str:
    return json.dumps({"type": "user", "text": f"message {i}: " + "words " * 30}) + "\n"


def test_every_compaction_and_reflection_of_a_long_session_has_one_end(tmp_path: Path, backend: str) -> None:
    _reflect_every_three_steps(tmp_path)
    lines = "".join(_words(i) for i in range(150))
    proc = reverie(tmp_path, "chat", "--input-format", "stream-json", "--output-format", "json", stdin=lines,
                   REVERIE_BACKEND=backend, **_LONG_SESSION)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 150
    assert all(not v for v in _unended(tmp_path).values()), _unended(tmp_path)
    kinds = {row[0] for row in _db(tmp_path, "SELECT DISTINCT kind FROM events")}
    assert "compaction.done" in kinds and "reflection.outcome" in kinds


def test_an_interrupted_session_still_ends_every_background_job(tmp_path: Path, backend: str) -> None:
    _reflect_every_three_steps(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "chat", "--input-format", "stream-json", "--output-format", "json"],
        env=_env(tmp_path, REVERIE_BACKEND=backend, REVERIE_SCRIPTED_LATENCY="0.01", **_LONG_SESSION),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("".join(_words(i) for i in range(400)))
    proc.stdin.flush()
    answered = 0
    for line in proc.stdout:
        answered += json.loads(line)["type"] == "result"
        if answered == 40:
            break
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert all(not v for v in _unended(tmp_path).values()), _unended(tmp_path)


def test_text_output_says_once_that_a_dirty_memory_holds_reflection_back(tmp_path: Path) -> None:
    """One-shot chats are one process per turn: the warning is said once across them, on stderr."""
    (tmp_path / "config.toml").write_text('[reflection]\ntrigger = "step-count:1"\n', encoding="utf-8")
    first = reverie(tmp_path, "chat", "-p", "hi")
    assert first.returncode == 0 and "reflection held back" not in first.stderr, first.stderr
    memory = Path(reverie(tmp_path, "memory", "path").stdout.strip())
    with (memory / "human.md").open("a", encoding="utf-8") as human:
        human.write("An edit not committed yet.\n")
    said = [reverie(tmp_path, "chat", "-p", f"turn {i}").stderr for i in range(3)]
    assert [s.count("⚠ reflection held back: the memory repository has uncommitted changes (human.md)") for s in said] == [1, 0, 0], said


def test_a_stream_json_session_idle_past_the_threshold_reflects(tmp_path: Path, backend: str) -> None:
    (tmp_path / "config.toml").write_text('[reflection]\ntrigger = "idle:0.2"\n', encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "chat", "--input-format", "stream-json"],
        env=_env(tmp_path, REVERIE_BACKEND=backend), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"type": "user", "text": "my name is Ada Lovelace"}) + "\n")
        proc.stdin.flush()
        kinds = []
        for line in proc.stdout:  # stdin stays open: the session is idle, waiting for input
            kinds.append(json.loads(line)["type"])
            if kinds[-1] == "reflection.launch":
                break
        assert kinds[-1] == "reflection.launch", kinds
        assert kinds.index("result") < kinds.index("reflection.launch"), "it reflected after the turn, while idle"
        proc.communicate(timeout=60)  # closes stdin: the session ends after S23's wait
    finally:
        watchdog.cancel()
    assert proc.returncode == 0
    assert _db(tmp_path, "SELECT trigger, status FROM reflections") == [("idle", "merged")]


def test_max_cost_ends_a_long_session_with_status_limit_within_the_budget(tmp_path: Path) -> None:
    texts = [f"remember that I like owls number {i}" if i % 3 == 0 else f"message {i}: tell me more" for i in range(15)]
    lines = "".join(json.dumps({"type": "user", "text": text}) + "\n" for text in texts)
    proc = reverie(
        tmp_path, "chat", "--input-format", "stream-json", "--output-format", "json",
        "--max-cost", "0.03", "--price-in", "2", "--price-out", "8", stdin=lines,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    statuses = [r["status"] for r in map(json.loads, proc.stdout.splitlines())]
    assert statuses[0] == "end_turn" and statuses[-1] == "limit"
    assert set(statuses[statuses.index("limit") :]) == {"limit"}, "once out of budget, every turn stops at once"
    calls = [json.loads(p) for (p,) in _db(tmp_path, "SELECT payload FROM events WHERE kind = 'model.call'")]
    spent = sum(c["prompt_tokens"] * 2 + c["completion_tokens"] * 8 for c in calls) / 1e6
    assert 0.015 < spent <= 0.03, "the store's own records of every call stay within the budget"
    hits = [json.loads(p) for (p,) in _db(tmp_path, "SELECT payload FROM events WHERE kind = 'limit.reached'")]
    assert hits and {h["limit"] for h in hits} == {"session.cost"}
    assert hits[0]["spent"] == pytest.approx(spent) and hits[0]["spent"] + hits[0]["needed"] > 0.03
    last = json.loads(proc.stdout.splitlines()[-1])
    assert last["limits"]["session.cost"] == {"cap": 0.03, "spent": pytest.approx(spent, abs=1e-6)}
    assert set(last["spend"]) == {"main agent", "reflection", "compaction", "resolver"}
    turns = _db(tmp_path, "SELECT status FROM turns ORDER BY rowid")
    assert [s for (s,) in turns] == statuses
